"""FeatureSpec / Schema: validation, Arrow types, schema.json round trip, the Criteo layout."""

import json
import os

import pyarrow as pa
import pytest

from sparse_io import FeatureSpec, Schema, SchemaError, criteo_schema, weights_column


def _schema():
    return Schema(
        [
            FeatureSpec("label", "label", "float32"),
            FeatureSpec("age", "dense", "float32"),
            FeatureSpec("ts", "dense", "int64"),
            FeatureSpec("items", "sparse", "int64", vocabulary_size=1000, weighted=True, max_length=50),
            FeatureSpec("query", "sparse", "string", hash_buckets=2**20),
        ]
    )


def test_arrow_schema_follows_the_column_conventions():
    assert _schema().arrow_schema() == pa.schema(
        [
            ("label", pa.float32()),
            ("age", pa.float32()),
            ("ts", pa.int64()),
            ("items", pa.list_(pa.int64())),
            ("items__weights", pa.list_(pa.float32())),
            ("query", pa.list_(pa.string())),
        ]
    )
    assert weights_column("items") == "items__weights"


def test_accessors():
    s = _schema()
    assert s.names == ["label", "age", "ts", "items", "query"] and len(s) == 5
    assert s.label.name == "label"
    assert [f.name for f in s.sparse] == ["items", "query"]
    assert [f.name for f in s.dense] == ["age", "ts"]
    assert s["items"].weighted and "query" in s and "nope" not in s
    with pytest.raises(KeyError, match="no feature 'nope'"):
        s["nope"]
    assert Schema([FeatureSpec("x")]).label is None


def test_replace_and_select_return_new_schemas():
    s = _schema()
    hashed = s.replace("query", dtype="int64")
    assert hashed["query"].dtype == "int64" and s["query"].dtype == "string"
    assert s.select(["query", "label"]).names == ["label", "query"]
    with pytest.raises(KeyError, match=r"\['zz'\]"):
        s.select(["zz"])


def test_json_round_trip_keeps_every_field(tmp_path):
    s = _schema()
    assert Schema.from_json(s.to_json()) == s
    path = s.save(str(tmp_path))
    assert path == os.path.join(str(tmp_path), "schema.json")
    assert Schema.load(str(tmp_path)) == s
    assert Schema.load(path) == s
    data = json.loads(open(path).read())
    assert data["format_version"] == 1
    assert data["features"][3] == {
        "name": "items",
        "kind": "sparse",
        "dtype": "int64",
        "vocabulary_size": 1000,
        "weighted": True,
        "max_length": 50,
    }


def test_save_replaces_atomically(tmp_path):
    Schema([FeatureSpec("a")]).save(str(tmp_path))
    _schema().save(str(tmp_path))
    assert Schema.load(str(tmp_path)) == _schema()
    assert sorted(os.listdir(tmp_path)) == ["schema.json"]


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"name": ""}, "non-empty string"),
        ({"name": "x__weights"}, "reserved"),
        ({"name": "x", "kind": "bag"}, "kind 'bag' is not one of"),
        ({"name": "x", "dtype": "float16"}, "dtype 'float16' is not one of"),
        ({"name": "x", "vocabulary_size": 0}, "vocabulary_size must be a positive integer"),
        ({"name": "x", "hash_buckets": -3}, "hash_buckets must be a positive integer"),
        ({"name": "x", "max_length": 2.5}, "max_length must be a positive integer"),
        ({"name": "x", "vocabulary_size": True}, "vocabulary_size must be a positive integer"),
        ({"name": "x", "weighted": "yes"}, "weighted must be true or false"),
        ({"name": "x", "kind": "dense", "weighted": True}, "sparse features only"),
        ({"name": "x", "kind": "label", "max_length": 3}, "sparse features only"),
    ],
)
def test_invalid_feature_spec_names_the_feature_and_key(kwargs, pattern):
    with pytest.raises(SchemaError, match=pattern):
        FeatureSpec(**kwargs)


def test_schema_rejects_duplicates_and_two_labels():
    with pytest.raises(SchemaError, match=r"duplicate feature name\(s\) \['a'\]"):
        Schema([FeatureSpec("a"), FeatureSpec("a", "dense")])
    with pytest.raises(SchemaError, match="more than one label"):
        Schema([FeatureSpec("y1", "label"), FeatureSpec("y2", "label")])


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("{not json", "not valid JSON"),
        ('{"format_version": 1}', "missing key 'features'"),
        ('{"format_version": 9, "features": []}', "unsupported format_version 9"),
        ('{"features": {}}', "'features' must be a list"),
        ('{"features": [3]}', "must be a JSON object"),
        ('{"features": [{"kind": "dense"}]}', "missing key 'name'"),
        ('{"features": [{"name": "a", "colour": "red"}]}', r"unknown key\(s\) \['colour'\]"),
    ],
)
def test_bad_schema_json_is_a_schema_error(text, pattern):
    with pytest.raises(SchemaError, match=pattern):
        Schema.from_json(text)


def test_schema_error_is_a_value_error():
    assert issubclass(SchemaError, ValueError)


def test_criteo_schema_layout():
    s = criteo_schema()
    assert s.names == ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
    assert s.label.dtype == "int64"
    assert all(f.kind == "dense" and f.dtype == "float32" for f in s.dense) and len(s.dense) == 13
    assert all(f.dtype == "string" and not f.weighted for f in s.sparse) and len(s.sparse) == 26
    assert s.arrow_schema().field("C1").type == pa.list_(pa.string())
    assert criteo_schema(label=False).names[0] == "I1" and len(criteo_schema(label=False)) == 39


def test_table_rows_is_the_vocabulary_size_or_the_hash_buckets():
    schema = Schema([
        FeatureSpec("label", "label", "int64"),
        FeatureSpec("C1", hash_buckets=1_000_000),
        FeatureSpec("C9", vocabulary_size=3),
        FeatureSpec("raw", dtype="string"),
        FeatureSpec("I1", "dense", "float32"),
    ])
    assert schema.table_rows("C1") == 1_000_000 and schema.table_rows("C9") == 3
    with pytest.raises(SchemaError, match="'raw': schema.json gives neither vocabulary_size nor hash_buckets"):
        schema.table_rows("raw")
    with pytest.raises(SchemaError, match="'I1' is dense, not sparse"):
        schema.table_rows("I1")
    with pytest.raises(KeyError, match="no feature 'C2'"):
        schema.table_rows("C2")
