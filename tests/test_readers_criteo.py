"""The "criteo" format: real Criteo samples read with the right counts, and every kind of bad line."""

import gzip
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import zstandard

from sparse_io import DeadLetterSink, ErrorBudgetExceeded, criteo_schema, read_file, read_logs

SCHEMA = criteo_schema()
HEX = ["05db9164", "68fd1e64", "8cf07265", "be589b51"]


def _line(label="1", ints=None, cats=None) -> str:
    ints = ints if ints is not None else [str(i) for i in range(13)]
    cats = cats if cats is not None else [HEX[i % 4] for i in range(26)]
    return "\t".join([label, *ints, *cats])


def _write(tmp_path, name, text, mode="w"):
    path = os.path.join(str(tmp_path), name)
    with open(path, mode) as f:
        f.write(text)
    return path


def _read(path, **kw):
    sink = kw.pop("sink", None) or DeadLetterSink()
    batches = list(read_logs(path, "criteo", errors=sink, error_budget=1.0, **kw))
    return pa.Table.from_batches(batches, schema=SCHEMA.arrow_schema()), sink


def _reference_rows(path):
    """Plain-Python Criteo parse: split on tabs, pad short lines, '' is missing."""
    rows = []
    with open(path) as f:
        for line in f.read().split("\n"):
            if not line:
                continue
            fields = line.split("\t")
            fields += [""] * (40 - len(fields))
            row = {"label": int(fields[0])}
            for i in range(13):
                row[f"I{i + 1}"] = float(fields[1 + i]) if fields[1 + i] else None
            for i in range(26):
                row[f"C{i + 1}"] = [fields[14 + i]] if fields[14 + i] else []
            rows.append(row)
    return rows


def _empty_cells(table):
    i_empty = sum(table.column(f"I{i}").null_count for i in range(1, 14))
    c_empty = sum(
        pc.sum(pc.equal(pc.list_value_length(table.column(f"C{i}")), 0)).as_py() for i in range(1, 27)
    )
    return i_empty, c_empty


def _labels(table):
    return {d["values"]: d["counts"] for d in pc.value_counts(table.column("label")).to_pylist()}


# --- the real Criteo sample (../shared/data) ------------------------------------------------------

REAL = [
    # file, rows, label 0/1, empty I-cells, empty C-cells, short lines
    ("criteo_paddlerec_dnn_train.tsv", 100, {0: 71, 1: 29}, 297, 303, 0),
    ("criteo_paddlerec_ctr_dnn_train.tsv", 100, {0: 76, 1: 24}, 276, 275, 36),
    ("criteo_paddlerec_dnn_test.tsv", 100, {0: 64, 1: 36}, 270, 264, 39),
]


@pytest.mark.parametrize("name, rows, labels, i_empty, c_empty, short", REAL)
def test_real_tsv_reads_with_the_documented_counts(
    criteo_data_dir, name, rows, labels, i_empty, c_empty, short
):
    table, sink = _read(str(criteo_data_dir / name), batch_size=32)
    assert table.num_rows == rows and sink.records == rows and sink.bad == 0
    assert _labels(table) == labels
    assert _empty_cells(table) == (i_empty, c_empty)
    assert sink.padded == short
    assert table.to_pylist() == _reference_rows(str(criteo_data_dir / name))


@pytest.mark.parametrize("name, rows, labels, i_empty, c_empty, short", REAL)
def test_real_tsv_short_lines_are_dead_letters_in_strict_mode(
    criteo_data_dir, name, rows, labels, i_empty, c_empty, short
):
    table, sink = _read(str(criteo_data_dir / name), strict=True)
    assert table.num_rows == rows - short and sink.bad == short and sink.padded == 0
    assert all("expected 40 fields, got 3" in d.reason and "strict" in d.reason for d in sink)
    if short:
        with pytest.raises(ErrorBudgetExceeded, match=f"{short} of 100 records were bad"):
            list(read_logs(str(criteo_data_dir / name), "criteo", strict=True))


def test_real_tsv_negative_integers_survive(criteo_data_dir):
    table, _ = _read(str(criteo_data_dir / "criteo_paddlerec_dnn_train.tsv"))
    negatives = sum(pc.sum(pc.less(table.column(f"I{i}"), 0)).as_py() or 0 for i in range(1, 14))
    assert negatives == 11


def test_real_deepctr_csv_reads_as_csv_with_the_criteo_schema(criteo_data_dir):
    sink = DeadLetterSink()
    path = str(criteo_data_dir / "criteo_deepctr_sample.csv")
    table = pa.Table.from_batches(list(read_logs(path, "csv", SCHEMA, errors=sink, batch_size=64)))
    assert table.schema == SCHEMA.arrow_schema()
    assert table.num_rows == 200 and sink.records == 200 and sink.bad == 0
    assert _labels(table) == {0: 151, 1: 49}
    assert _empty_cells(table) == (528, 573)
    assert sum(pc.sum(pc.less(table.column(f"I{i}"), 0)).as_py() or 0 for i in range(1, 14)) == 15
    first = table.slice(0, 1).to_pylist()[0]
    assert (first["I1"], first["I2"], first["I3"], first["C1"], first["C19"]) == (
        None,
        3.0,
        260.0,
        ["05db9164"],
        [],
    )


def test_all_real_tsv_files_by_glob_and_compressed_copies_read_the_same(criteo_data_dir, tmp_path):
    table, sink = _read(str(criteo_data_dir / "criteo_paddlerec_*.tsv"))
    assert table.num_rows == 300 and sink.padded == 75
    raw = (criteo_data_dir / "criteo_paddlerec_dnn_test.tsv").read_bytes()
    _write(tmp_path, "a.tsv.gz", gzip.compress(raw), "wb")
    _write(tmp_path, "b.tsv.zst", zstandard.ZstdCompressor().compress(raw), "wb")
    plain, _ = _read(str(criteo_data_dir / "criteo_paddlerec_dnn_test.tsv"))
    for name in ("a.tsv.gz", "b.tsv.zst"):
        assert _read(os.path.join(str(tmp_path), name))[0].equals(plain)


# --- synthetic lines ------------------------------------------------------------------------------


def test_batches_are_bounded_and_keep_the_schema(tmp_path):
    lines = [_line(label=str(i % 2), ints=[str(i)] + [""] * 12) for i in range(23)]
    path = _write(tmp_path, "x.tsv", "\n".join(lines) + "\n")
    batches = list(read_file(path, "criteo", batch_size=5))
    assert [b.num_rows for b in batches] == [5, 5, 5, 5, 3]
    assert all(b.schema == SCHEMA.arrow_schema() for b in batches)
    assert pa.Table.from_batches(batches).column("I1").to_pylist() == [float(i) for i in range(23)]


def test_missing_values_and_padding(tmp_path):
    short = "\t".join(["0", "5"] + [""] * 12 + HEX[:3])  # 17 fields
    path = _write(tmp_path, "x.tsv", short)  # and no final newline
    table, sink = _read(path)
    row = table.to_pylist()[0]
    assert row["label"] == 0 and row["I1"] == 5.0 and row["I2"] is None
    assert row["C1"] == [HEX[0]] and row["C3"] == [HEX[2]] and row["C4"] == [] and row["C26"] == []
    assert sink.padded == 1 and sink.bad == 0


def test_crlf_line_endings(tmp_path):
    path = _write(tmp_path, "x.tsv", ((_line() + "\r\n") * 2).encode(), "wb")
    table, sink = _read(path)
    assert table.num_rows == 2 and sink.bad == 0 and table.column("C26").to_pylist() == [[HEX[1]]] * 2


BAD_LINES = [
    ("truncated mid-value", _line()[:-3], "C26: id '68fd1' is not an 8-digit hex string"),
    ("too many fields", _line() + "\textra", "expected 40 fields, got 41"),
    ("non-numeric integer", _line(ints=["abc"] + ["1"] * 12), "I1: 'abc' is not a number"),
    (
        "invalid hex",
        _line(cats=["zzzzzzzz"] + HEX[:1] * 25),
        "C1: id 'zzzzzzzz' is not an 8-digit hex string",
    ),
    (
        "hex with a bad digit",
        _line(cats=HEX[:1] * 25 + ["05db91g4"]),
        "C26: id '05db91g4' is not an 8-digit hex",
    ),
    ("missing label", _line(label=""), "label: missing label"),
    ("fractional label", _line(label="0.5"), "label: '0.5' is not an integer"),
    ("blank line", "", "empty line"),
    (
        "float out of range",
        _line(ints=["1e999"] + ["1"] * 12),
        "I1: '1e999' is not a number (or is out of float32",
    ),
]


@pytest.mark.parametrize("case, bad, reason", BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_bad_line_becomes_a_dead_letter_with_its_line_number(tmp_path, case, bad, reason):
    path = _write(tmp_path, "x.tsv", "\n".join([_line(), _line(), bad, _line()]) + "\n")
    for strict in (False, True):
        table, sink = _read(path, strict=strict)
        assert table.num_rows == 3 and sink.records == 4 and sink.bad == 1
        (letter,) = sink.letters
        assert (letter.source, letter.line) == (path, 3)
        assert reason in letter.reason
        assert letter.raw == bad


def test_bad_utf8_is_isolated_to_its_line(tmp_path):
    good = (_line() + "\n").encode()
    path = _write(tmp_path, "x.tsv", good * 5 + b"1\t\xff\xfe" + good[1:] + good * 4, "wb")
    table, sink = _read(path, batch_size=8)
    assert table.num_rows == 9
    (letter,) = sink.letters
    assert letter.line == 6 and letter.reason == "invalid UTF-8 at byte 2"
    assert letter.raw.startswith("1\t\\xff\\xfe")


def test_many_bad_lines_across_blocks_keep_exact_line_numbers(tmp_path):
    lines = [_line() if i % 7 else "bad" for i in range(1, 60)]
    path = _write(tmp_path, "x.tsv", "\n".join(lines) + "\n")
    table, sink = _read(path, batch_size=10)
    expected = [i for i in range(1, 60) if i % 7 == 0]
    assert [d.line for d in sink] == expected
    assert table.num_rows == 59 - len(expected)


def test_raw_text_is_truncated_to_one_kib(tmp_path):
    path = _write(tmp_path, "x.tsv", _line(ints=["x" * 5000] + ["1"] * 12) + "\n")
    _, sink = _read(path)
    (letter,) = sink.letters
    assert letter.raw.startswith("1\txxx") and letter.raw.endswith("bytes]")
    assert len(letter.raw.encode()) < 1100


def test_empty_file_yields_nothing(tmp_path):
    path = _write(tmp_path, "x.tsv", "")
    table, sink = _read(path)
    assert table.num_rows == 0 and sink.records == 0 and sink.bad == 0


def test_header_only_file_yields_nothing(tmp_path):
    header = "\t".join(SCHEMA.names)
    path = _write(tmp_path, "x.tsv", header + "\n")
    table, sink = _read(path, skip_header=True)
    assert table.num_rows == 0 and sink.records == 0
    path = _write(tmp_path, "y.tsv", header + "\n" + _line() + "\n")
    table, sink = _read(path, skip_header=True)
    assert table.num_rows == 1 and sink.records == 1


def test_error_budget(tmp_path):
    path = _write(tmp_path, "x.tsv", "\n".join([_line()] * 9 + ["junk"]) + "\n")
    assert sum(b.num_rows for b in read_logs(path, "criteo", error_budget=0.1)) == 9
    with pytest.raises(ErrorBudgetExceeded) as info:
        list(read_logs(path, "criteo", error_budget=0.05))
    message = str(info.value)
    assert "1 of 10 records were bad (10.0000%)" in message and "error budget of 5.0000%" in message
    assert f"{path}:10: label: 'junk' is not an integer" in message
    assert (info.value.bad, info.value.records) == (1, 10)


def test_read_file_without_a_sink_raises_on_any_bad_record(tmp_path):
    path = _write(tmp_path, "x.tsv", _line() + "\n" + _line(label="x") + "\n")
    with pytest.raises(ErrorBudgetExceeded, match="1 of 2 records"):
        list(read_file(path, "criteo"))


def test_criteo_schema_must_have_string_categoricals(tmp_path):
    with pytest.raises(ValueError, match="'C1' must be an unweighted string feature"):
        read_logs("x", "criteo", SCHEMA.replace("C1", dtype="int64"))


def test_custom_schema_without_label(tmp_path):
    schema = criteo_schema(label=False)
    path = _write(tmp_path, "x.tsv", _line()[2:] + "\n")
    (batch,) = read_logs(path, "criteo", schema)
    assert batch.schema == schema.arrow_schema() and batch.column("I1").to_pylist() == [0.0]
