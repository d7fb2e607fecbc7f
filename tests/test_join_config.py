"""The `join:` config section: defaults, the schema it builds, and one-line errors naming the key."""

import pytest

from pipelines.config import ConfigError, parse_config
from pipelines.config_join import DEFAULT_SIDE_INPUT_MAX_MB, MIN_PARTITIONS, PARTITION_BYTES

SCHEMA = [
    {"name": "user_id", "kind": "dense", "dtype": "int64"},
    {"name": "item", "kind": "sparse", "dtype": "string"},
    {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer"},
]


def _config(join, features=None, fmt="tsv", **inp):
    return {
        "input": {"format": fmt, "schema": SCHEMA, **inp},
        "features": {"item": {"hash_buckets": 10},
                     **(features if features is not None else {"occupation": {"hash_buckets": 10}})},
        "join": join,
    }


def test_joined_columns_follow_the_events_and_take_features_settings():
    config = parse_config(_config(
        [{"table": "users.tsv", "key": "user_id", "columns": ["age", "occupation"],
          "schema": [{"name": "age", "kind": "dense", "dtype": "float32"}]}],
        features={"occupation": {"vocabulary": {"min_frequency": 2}}}))
    assert config.schema.names == ["user_id", "item", "rating", "age", "occupation"]
    assert config.read_schema.names == ["user_id", "item", "rating"]
    # An undeclared column is a sparse string; a declared one keeps its spec.
    assert (config.schema["occupation"].kind, config.schema["occupation"].dtype) == ("sparse", "string")
    assert (config.schema["age"].kind, config.schema["age"].dtype) == ("dense", "float32")
    plan = config.plan("occupation")
    assert plan.use_vocabulary and plan.min_frequency == 2
    (join,) = config.joins
    # The table takes the input's format and layout; its key is read with the events' dtype.
    assert (join.format, join.delimiter, join.list_separator) == ("tsv", "\t", "|")
    assert (join.schema["user_id"].kind, join.schema["user_id"].dtype) == ("dense", "int64")
    assert join.side_input_max_mb == DEFAULT_SIDE_INPUT_MAX_MB


def test_the_size_decides_the_way_and_the_partitions():
    import dataclasses

    (join,) = parse_config(_config([{"table": "u.tsv", "key": "user_id", "columns": ["occupation"]}])).joins
    assert join.side_input  # unknown size: small
    small = dataclasses.replace(join, table_bytes=DEFAULT_SIDE_INPUT_MAX_MB << 20)
    large = dataclasses.replace(join, table_bytes=(DEFAULT_SIDE_INPUT_MAX_MB << 20) + 1)
    assert small.side_input and not large.side_input
    assert large.partitions == MIN_PARTITIONS
    assert dataclasses.replace(join, table_bytes=40 * PARTITION_BYTES + 1).partitions == 41
    assert dataclasses.replace(join, num_partitions=3).partitions == 3


def test_a_criteo_log_s_table_defaults_to_tsv_and_other_formats_keep_their_own_layout():
    config = parse_config({
        "input": {"format": "csv", "delimiter": ";", "schema": SCHEMA, "null_values": ["NA"]},
        "features": {"item": {"hash_buckets": 10}, "occupation": {"hash_buckets": 10}},
        "join": [{"table": "a.csv", "key": "user_id", "columns": ["occupation"]},
                 {"table": "b.jsonl", "key": "user_id", "columns": ["zip"], "format": "jsonl",
                  "schema": [{"name": "zip", "kind": "dense", "dtype": "int64"}]}],
    })
    same, other = config.joins
    assert (same.delimiter, same.null_values) == (";", ("NA",))
    assert (other.format, other.delimiter) == ("jsonl", None)


@pytest.mark.parametrize("join, key, words", [
    ({"key": "user_id", "columns": ["occupation"]}, "join[0].table", "is required"),
    ({"table": "u.tsv", "key": "uid", "columns": ["occupation"]}, "join[0].key", "'uid' is not a column of the events"),
    ({"table": "u.tsv", "key": "rating", "columns": ["occupation"]}, "join[0].key", "a join key is an id"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["item"]}, "join[0].columns[0]", "already a column"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["user_id"]}, "join[0].columns[0]", "is the join key"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation", "occupation"]}, "join[0].columns[1]",
     "already a column"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"], "sheet": 1}, "join[0].sheet", "unknown key"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"], "format": "criteo"}, "join[0].format",
     "not a table format"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"],
      "schema": [{"name": "user_id", "kind": "dense", "dtype": "string"}]}, "join[0].schema",
     "key 'user_id' is string here but int64 in the events"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"],
      "schema": [{"name": "occupation", "kind": "label", "dtype": "int64"}]}, "join[0].schema[0]", "is a label"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"],
      "schema": [{"name": "occupation", "kind": "nope"}]}, "join[0].schema[0]", "kind 'nope'"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"], "skip_header": False}, "join[0].schema",
     "read by position"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"], "skip_header": False,
      "schema": [{"name": "user_id", "kind": "dense", "dtype": "int64"}]}, "join[0].schema", "lacks 'occupation'"),
    ({"table": "u.jsonl", "key": "user_id", "columns": ["occupation"], "format": "jsonl", "delimiter": ";"},
     "join[0].delimiter", "apply to csv"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"], "quote_char": "ab"}, "join[0].quote_char",
     "one character"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"], "side_input_max_mb": -1},
     "join[0].side_input_max_mb", ">= 0"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["occupation"], "num_partitions": 0},
     "join[0].num_partitions", "between 1 and"),
    ({"table": "u.tsv", "key": "user_id", "columns": ["bad/name"]}, "join[0].columns[0]", "bad/name"),
])
def test_misused_keys_are_refused_in_one_line_naming_the_key(join, key, words):
    with pytest.raises(ConfigError) as info:
        parse_config(_config([join]))
    message = str(info.value)
    assert message.startswith(f"config key '{key}'"), message
    assert words in message and "\n" not in message


def test_join_must_be_a_list_and_joined_string_columns_need_ids():
    with pytest.raises(ConfigError, match=r"^config key 'join': must be list, got dict"):
        parse_config(_config({"table": "u.tsv"}))
    # A joined string column is an ordinary string column: it needs hash_buckets or a vocabulary.
    with pytest.raises(ConfigError, match=r"^config key 'features.occupation': string ids need"):
        parse_config(_config([{"table": "u.tsv", "key": "user_id", "columns": ["occupation"]}],
                             features={}))


def test_a_later_join_may_key_on_an_earlier_join_s_column():
    config = parse_config(_config(
        [{"table": "u.tsv", "key": "user_id", "columns": ["city"],
          "schema": [{"name": "city", "kind": "dense", "dtype": "int64"}]},
         {"table": "c.tsv", "key": "city", "columns": ["occupation"]}]))
    assert config.schema.names[-2:] == ["city", "occupation"]
    assert config.joins[1].schema["city"].dtype == "int64"
