"""The config keys that say where a feature's values lie (`column`, `columns`, `from`) and `input.encoding`."""

import pytest
import yaml

from pipelines.config import ConfigError, parse_config
from sparse_io.readers import ColumnRange, ColumnSource

ALIMAMA = """
input:
  format: csv
  encoding: latin-1
  schema:
    - {name: liked, kind: label, from: "rating:float", at_least: 4}
    - {name: user_id, dtype: string, column: "user_id:token"}
    - {name: his_cate, dtype: string, columns: {name: his_cate}, padding: 0, mask: {name: his_mask}}
    - {name: hist, dtype: int64, columns: {first: 17, count: 50}, mask: {first: 67, count: 50}}
    - {name: kind_of, kind: dense, dtype: float32}
features:
  user_id: {hash_buckets: 100}
  his_cate: {vocabulary: {}}
"""


def _config(schema, **input_keys):
    return {"input": {"format": "csv", "schema": schema, **input_keys}}


def test_the_keys_become_column_sources_and_read_options():
    config = parse_config(yaml.safe_load(ALIMAMA))
    assert config.column_sources == (
        ColumnSource("liked", label_from="rating:float", at_least=4),
        ColumnSource("user_id", column="user_id:token"),
        ColumnSource("his_cate", columns=ColumnRange(name="his_cate"), padding="0", mask=ColumnRange(name="his_mask")),
        ColumnSource("hist", columns=ColumnRange(first=17, count=50), mask=ColumnRange(first=67, count=50)),
    )
    assert config.schema.names == ["liked", "user_id", "his_cate", "hist", "kind_of"]
    assert config.schema["liked"].kind == "label" and config.schema["liked"].dtype == "int64"
    options = config.read_options()
    assert options["column_sources"] == config.column_sources and options["encoding"] == "iso8859-1"


def test_a_config_without_the_keys_reads_as_before():
    config = parse_config(_config([{"name": "label", "kind": "label"}, {"name": "x", "kind": "dense"}]))
    assert config.column_sources == () and config.encoding == "utf-8"
    assert "column_sources" not in config.read_options() and "encoding" not in config.read_options()
    assert parse_config(_config([{"name": "label", "kind": "label"}], encoding="UTF8")).encoding == "utf-8"


def test_the_derived_label_may_be_derived_by_a_set_of_values():
    config = parse_config(_config([{"name": "y", "kind": "label", "from": "event", "in": ["buy", "click"]}]))
    assert config.column_sources == (ColumnSource("y", label_from="event", one_of=("buy", "click")),)


@pytest.mark.parametrize("entry, where, message", [
    ({"name": "h", "dtype": "string", "column": "a", "columns": {"name": "a"}}, "input.schema[1]",
     "give one of column, columns, from"),
    ({"name": "h", "dtype": "string", "mask": {"name": "m"}}, "input.schema[1]", "padding and mask apply to columns"),
    ({"name": "h", "dtype": "string", "columns": {"first": 0, "count": 3}, "mask": {"first": 3, "count": 2}},
     "input.schema[1]", "the mask has 2 columns, columns has 3"),
    ({"name": "h", "dtype": "string", "columns": {"name": "h", "first": 1}}, "input.schema[1].columns",
     "a name, or first and count, not both"),
    ({"name": "h", "dtype": "string", "columns": {"names": "h"}}, "input.schema[1].columns.names", "unknown key"),
    ({"name": "h", "dtype": "string", "columns": "h"}, "input.schema[1].columns", "must be {name: ...}"),
    ({"name": "h", "dtype": "string", "columns": {"first": 0, "count": 0}}, "input.schema[1].columns",
     "count must be an integer >= 1"),
    ({"name": "h", "dtype": "string", "columns": {"name": "h"}, "padding": 0.5}, "input.schema[1].padding",
     "must be the text of a padding cell"),
    ({"name": "h", "kind": "dense", "columns": {"name": "h"}}, "input.schema[1]", "must be sparse"),
    ({"name": "h", "dtype": "string", "weighted": True, "column": "g"}, "input.schema[1]",
     "cannot rename a weighted feature"),
    ({"name": "h", "kind": "dense", "from": "r", "at_least": 1}, "input.schema[1]", "must be kind: label"),
    ({"name": "h", "from": "r", "at_least": 1}, "input.schema[1]", "must be kind: label"),
    ({"name": "h", "dtype": "string", "column": ""}, "input.schema[1]", "column must be a header column name"),
])
def test_misused_column_keys_are_refused_in_one_line_naming_the_entry(entry, where, message):
    with pytest.raises(ConfigError) as caught:
        parse_config(_config([{"name": "label", "kind": "label"}, entry]))
    text = str(caught.value)
    assert text.startswith(f"config key '{where}': ") and message in text and "\n" not in text


@pytest.mark.parametrize("entry, message", [
    ({"name": "y", "kind": "label", "from": "r"}, "needs at_least or in"),
    ({"name": "y", "kind": "label", "from": "r", "at_least": "4"}, "at_least must be a number"),
    ({"name": "y", "kind": "label", "from": "r", "in": []}, "in must be a non-empty list"),
    ({"name": "y", "kind": "label", "from": "r", "in": 4}, "must be a list of values"),
    ({"name": "y", "kind": "label", "from": "r", "in": [4, "5"]}, "numbers or of strings"),
    ({"name": "y", "kind": "label", "from": True, "at_least": 1}, "from must be a header column name"),
    ({"name": "y", "kind": "label", "at_least": 1}, "at_least and in apply to a label derived with from"),
    ({"name": "y", "kind": "label", "dtype": "string", "from": "r", "in": ["a"]}, "numeric dtype"),
])
def test_misused_derived_labels_are_refused(entry, message):
    with pytest.raises(ConfigError, match="config key 'input.schema") as caught:
        parse_config(_config([entry]))
    assert message in str(caught.value)


def test_column_keys_apply_to_csv_and_tsv_only():
    data = {"input": {"format": "jsonl", "schema": [{"name": "y", "kind": "label", "column": "Y"}]}}
    with pytest.raises(ConfigError, match=r"input.schema\[0\]': column, columns and from apply to csv, tsv, not "
                                          "'jsonl'"):
        parse_config(data)


def test_header_names_without_a_header_are_refused():
    data = _config([{"name": "y", "kind": "label", "column": "Y"}], skip_header=False)
    with pytest.raises(ConfigError, match="feature 'y' reads header column 'Y', but skip_header is false"):
        parse_config(data)
    positional = _config([{"name": "y", "kind": "label", "from": 3, "at_least": 1},
                          {"name": "h", "columns": {"first": 0, "count": 2}}], skip_header=False)
    assert len(parse_config(positional).column_sources) == 2


@pytest.mark.parametrize("fmt, encoding, message", [
    ("csv", "klingon", "input.encoding': encoding 'klingon' is not a Python text codec"),
    ("csv", "utf-16", "input.encoding': encoding 'utf-16' does not write a line end as the byte"),
    ("parquet", "latin-1", "input.encoding': applies to text formats, not 'parquet'"),
    ("csv", 8859, "input.encoding': must be str"),
])
def test_unusable_encodings_are_refused(fmt, encoding, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"input": {"format": fmt, "encoding": encoding, "schema": [{"name": "y", "kind": "label"}]}})


def test_the_readmes_example_of_these_keys_parses_as_it_says():
    import pathlib
    import re

    section = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "your_logs.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"\n```\n(input:.*?)```", section, flags=re.S)
    config = parse_config(yaml.safe_load(example) | {"features": {"*": {"hash_buckets": 10}}})
    assert config.encoding == "iso8859-1"
    assert config.column_sources == (
        ColumnSource("liked", label_from="rating:float", at_least=4),
        ColumnSource("user_id", column="user_id:token"),
        ColumnSource("his_cate", columns=ColumnRange(name="his_cate"), padding="0", mask=ColumnRange(name="his_mask")),
    )
