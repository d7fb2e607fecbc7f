"""The CSV family: any single-character delimiter, a chosen quote character, `tsv`, and null tokens."""

import csv
import io
import math

import pytest

import sparse_io
from sparse_io import DeadLetterSink, FeatureSpec, Schema, read_file, read_logs

SCHEMA = Schema([
    FeatureSpec("label", "label", "int64"),
    FeatureSpec("price", "dense", "float32"),
    FeatureSpec("tags", "sparse", "string"),
])


def _rows(path, fmt, schema=SCHEMA, **kwargs):
    sink = DeadLetterSink()
    batches = list(read_file(str(path), fmt, schema, dead_letters=sink, **kwargs))
    rows = [r for b in batches for r in b.to_pylist()]
    return rows, sink


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_one_list_of_log_formats_is_shared_by_every_entry_point():
    from pipelines import config, options
    from transforms.beam import read_logs as beam_read_logs
    from transforms.tfdata import log_dataset

    assert sparse_io.LOG_FORMATS == ("criteo", "csv", "tsv", "jsonl", "parquet")
    assert config.FORMATS is sparse_io.LOG_FORMATS
    assert beam_read_logs.LOG_FORMATS is sparse_io.LOG_FORMATS
    assert log_dataset.TEXT_FORMATS == tuple(f for f in sparse_io.LOG_FORMATS if f in ("criteo", "csv", "tsv"))
    parser = options.IngestOptions(["--format", "tsv", "--delimiter", ";"])
    assert parser.view_as(options.IngestOptions).format == "tsv"


@pytest.mark.parametrize("delimiter", [";", "\t", "|", "^", "]"])
def test_any_single_character_delimiter(tmp_path, delimiter):
    sep = "," if delimiter != "," else "/"
    text = f"label{delimiter}price{delimiter}tags\n1{delimiter}2.5{delimiter}a{sep}b\n0{delimiter}{delimiter}\n"
    path = _write(tmp_path, "log.csv", text)
    rows, sink = _rows(path, "csv", delimiter=delimiter, list_separator=sep)
    assert sink.bad == 0, sink.letters
    assert rows[0] == {"label": 1, "price": 2.5, "tags": ["a", "b"]}
    assert rows[1]["label"] == 0 and rows[1]["price"] is None and rows[1]["tags"] == []


def test_tsv_is_csv_with_a_tab_everywhere(tmp_path):
    path = _write(tmp_path, "log.tsv", 'label\tprice\ttags\n1\t3\t"x|y"\n0\t4.5\tz\n')
    rows, sink = _rows(path, "tsv")
    assert sink.bad == 0
    assert [r["tags"] for r in rows] == [["x", "y"], ["z"]]
    assert [r["label"] for r in read_logs(str(path), "tsv", SCHEMA).__next__().to_pylist()] == [1, 0]


def test_tsv_refuses_another_delimiter():
    with pytest.raises(ValueError, match="tsv"):
        list(read_logs("unused.tsv", "tsv", SCHEMA, delimiter=";"))


def test_a_quote_character_other_than_the_double_quote(tmp_path):
    path = _write(tmp_path, "log.csv", "label;price;tags\n1;'1,5';'a;b|c'\n0;2;\"q\"\n")
    schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("tags", "sparse", "string")])
    rows, sink = _rows(path, "csv", schema, delimiter=";", quote_char="'")
    assert sink.bad == 0
    # Inside single quotes the delimiter is text; the double quote is an ordinary character now.
    assert [r["tags"] for r in rows] == [["a;b", "c"], ['"q"']]


def test_an_unclosed_quote_under_a_chosen_quote_character_is_a_dead_letter(tmp_path):
    path = _write(tmp_path, "log.csv", "label;tags\n1;'a\n0;b\n")
    schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("tags", "sparse", "string")])
    rows, sink = _rows(path, "csv", schema, delimiter=";", quote_char="'")
    assert [r["tags"] for r in rows] == [["b"]]
    assert sink.bad == 1 and "quoted field is not closed" in sink.letters[0].reason


@pytest.mark.parametrize("delimiter", ["", ";;", "\n", '"'])
def test_bad_delimiters_are_refused_by_name(delimiter):
    with pytest.raises(ValueError, match="delimiter"):
        list(read_logs("unused.csv", "csv", SCHEMA, delimiter=delimiter))


def test_null_values_make_cells_missing_not_dead_letters(tmp_path):
    path = _write(tmp_path, "log.csv", "label,price,tags\n1,NA,NULL\n0,\\N,a|b\n1,7,\n0,NULL,NA\n")
    rows, sink = _rows(path, "csv", null_values=["", "NA", "NULL", "\\N"])
    assert sink.bad == 0, sink.letters
    assert [r["price"] for r in rows] == [None, None, 7.0, None]
    assert [r["tags"] for r in rows] == [[], ["a", "b"], [], []]


def test_by_default_only_the_empty_cell_is_missing(tmp_path):
    path = _write(tmp_path, "log.csv", "label,price,tags\n1,NA,NA\n")
    rows, sink = _rows(path, "csv")
    assert rows == [] and sink.bad == 1 and "price" in sink.letters[0].reason


def test_null_values_per_feature_override_the_default(tmp_path):
    path = _write(tmp_path, "log.csv", "label,price,tags\n1,-1,-1\n0,NA,x\n")
    rows, sink = _rows(path, "csv", null_values=["", "NA"], feature_null_values={"price": ["-1", ""]})
    # price: "-1" is missing and "NA" is not a number; tags keep the global tokens, so "-1" is an id.
    assert [r["price"] for r in rows] == [None]
    assert [r["tags"] for r in rows] == [["-1"]]
    assert sink.bad == 1 and "price" in sink.letters[0].reason and "'NA'" in sink.letters[0].reason


def test_a_missing_label_token_is_still_a_missing_label(tmp_path):
    path = _write(tmp_path, "log.csv", "label,price,tags\nNA,1,a\n1,2,b\n")
    rows, sink = _rows(path, "csv", null_values=["", "NA"])
    assert len(rows) == 1 and sink.bad == 1 and "missing label" in sink.letters[0].reason


def test_null_values_reach_dense_features_as_nan_in_the_log_dataset(tmp_path):
    pytest.importorskip("tensorflow")
    from transforms import make_log_dataset

    path = _write(tmp_path, "log.tsv", "label\tprice\ttags\n1\tNA\ta\n0\t2\tNULL\n")
    ds = make_log_dataset(str(path), "tsv", 2, schema=SCHEMA, hash_bins=10, output="ragged",
                          null_values=["", "NA", "NULL"])
    features, label = next(iter(ds))
    price = features["price"].numpy()
    assert math.isnan(price[0]) and price[1] == 2.0
    assert features["tags"].row_lengths().numpy().tolist() == [1, 0]
    assert label.numpy().tolist() == [1, 0]


def test_the_expected_rows_come_from_pythons_csv_module(tmp_path):
    text = 'label;price;tags\n1;"2;5";"a|b"\n0;NA;c\n'
    path = _write(tmp_path, "log.csv", text)
    expected = list(csv.DictReader(io.StringIO(text), delimiter=";"))
    rows, sink = _rows(path, "csv", Schema([FeatureSpec("label", "label", "int64"),
                                           FeatureSpec("tags", "sparse", "string")]), delimiter=";")
    assert [r["tags"] for r in rows] == [e["tags"].split("|") for e in expected]


def test_the_config_takes_delimiter_quote_char_and_null_values():
    from pipelines.config import ConfigError, parse_config

    schema = [{"name": "label", "kind": "label", "dtype": "int64"},
              {"name": "price", "kind": "dense", "dtype": "float32", "null_values": ["-1"]},
              {"name": "tags", "kind": "sparse", "dtype": "string"}]
    base = {"input": {"format": "csv", "schema": schema, "delimiter": "\\t", "quote_char": "'",
                      "null_values": ["", "NA"]},
            "features": {"tags": {"hash_buckets": 10}}}
    config = parse_config(base)
    assert config.read_options() == {"delimiter": "\t", "quote_char": "'", "null_values": ("", "NA"),
                                     "feature_null_values": {"price": ("-1",)}}
    assert parse_config(base, delimiter_override=";").read_options()["delimiter"] == ";"
    assert parse_config(base, format_override="tsv", delimiter_override="\t").format == "tsv"
    with pytest.raises(ConfigError, match="input.delimiter"):
        parse_config({**base, "input": {**base["input"], "delimiter": ";;"}})
    with pytest.raises(ConfigError, match="input.null_values"):
        parse_config({"input": {"format": "criteo", "null_values": ["NA"]}})
    with pytest.raises(ConfigError, match="input.delimiter.*format 'tsv' means delimiter"):
        parse_config({**base, "input": {**base["input"], "format": "tsv", "delimiter": ";"}})


def test_the_cli_takes_tsv_and_a_delimiter(tmp_path):
    import json as _json

    from pipelines.ingest import run_ingest

    config = {"input": {"format": "csv", "schema": [{"name": "label", "kind": "label", "dtype": "int64"},
                                                    {"name": "tags", "kind": "sparse", "dtype": "string"}]},
              "features": {"tags": {"hash_buckets": 10}}, "output": {"num_shards": 1}}
    (tmp_path / "c.json").write_text(_json.dumps(config))
    (tmp_path / "semi.csv").write_text("label;tags\n1;a|b\n0;c\n")
    (tmp_path / "tab.tsv").write_text("label\ttags\n1\ta|b\n0\tc\n1\t\n")
    for name, extra, rows in (("semi.csv", ["--delimiter", ";"], 2), ("tab.tsv", ["--format", "tsv"], 3),
                              ("tab.tsv", ["--delimiter", "\\t"], 3)):
        summary = run_ingest(["--input", str(tmp_path / name), "--config", str(tmp_path / "c.json"),
                              "--output", str(tmp_path / f"out-{len(extra[1])}-{name}"), "--no_report",
                              "--progress_seconds", "0", *extra])
        assert (summary["rows_out"], summary["bad_records"]) == (rows, 0)
