"""Schema.from_arrow: the one rule for the schema of Arrow data that came without one.

The writer (`WriteShards` with no schema) and the reader (`make_dataset` over
Parquet shards without schema.json) both use it; the expectations below are
written out by hand from the rule.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparse_io import FeatureSpec, Schema
from transforms.beam import infer_schema


def _described(schema: Schema) -> list[tuple]:
    return [(f.name, f.kind, f.dtype, f.weighted) for f in schema]


@pytest.mark.parametrize("arrow_type, dtype", [
    (pa.int64(), "int64"),
    (pa.int32(), "int32"),  # not widened: the schema says what the file holds
    (pa.int16(), "int64"),
    (pa.uint32(), "int64"),
    (pa.float64(), "float64"),  # not narrowed: that would round
    (pa.float32(), "float32"),
    (pa.float16(), "float32"),
    (pa.bool_(), "float32"),
    (pa.string(), "string"),
    (pa.large_string(), "string"),
])
def test_scalar_columns_are_dense_and_the_label_column_is_the_label(arrow_type, dtype):
    schema = Schema.from_arrow(pa.schema([("label", arrow_type), ("x", arrow_type)]))
    assert _described(schema) == [("label", "label", dtype, False), ("x", "dense", dtype, False)]


def test_a_float64_label_stays_float64_and_int32_scalars_stay_int32():
    schema = Schema.from_arrow(pa.schema([("label", pa.float64()), ("age", pa.int32()), ("n", pa.int32())]))
    assert _described(schema) == [
        ("label", "label", "float64", False), ("age", "dense", "int32", False), ("n", "dense", "int32", False)]


def test_a_scalar_string_column_is_a_dense_string_column():
    # A user history's key (`user_id`) travels to the shards as a plain string column.
    arrow = pa.schema([("user_id", pa.string()), ("item_id", pa.list_(pa.int64())), ("label", pa.int64())])
    assert _described(Schema.from_arrow(arrow)) == [
        ("user_id", "dense", "string", False),
        ("item_id", "sparse", "int64", False),
        ("label", "label", "int64", False),
    ]


@pytest.mark.parametrize("value_type, dtype", [
    (pa.int64(), "int64"),
    (pa.int32(), "int32"),
    (pa.int8(), "int64"),
    (pa.string(), "string"),
    (pa.large_string(), "string"),
    (pa.float64(), "float32"),
    (pa.float32(), "float32"),
])
@pytest.mark.parametrize("list_of", [pa.list_, pa.large_list])
def test_list_columns_are_sparse_features(value_type, dtype, list_of):
    schema = Schema.from_arrow(pa.schema([("ids", list_of(value_type))]))
    assert _described(schema) == [("ids", "sparse", dtype, False)]


def test_a_weights_column_belongs_to_its_feature_wherever_it_stands():
    arrow = pa.schema([
        ("a__weights", pa.list_(pa.float32())),
        ("a", pa.list_(pa.int64())),
        ("b", pa.list_(pa.string())),
        ("b__weights", pa.list_(pa.float64())),
        ("c", pa.list_(pa.int32())),
    ])
    assert _described(Schema.from_arrow(arrow)) == [
        ("a", "sparse", "int64", True), ("b", "sparse", "string", True), ("c", "sparse", "int32", False)]


@pytest.mark.parametrize("arrow", [
    pa.schema([("x__weights", pa.list_(pa.float32()))]),
    pa.schema([("x", pa.int64()), ("x__weights", pa.list_(pa.float32()))]),
])
def test_weights_without_their_list_column_are_refused_or_skipped(arrow):
    with pytest.raises(ValueError, match="column 'x__weights' holds weights but there is no list column 'x'"):
        Schema.from_arrow(arrow)
    assert "x__weights" not in Schema.from_arrow(arrow, skip_unsupported=True)


@pytest.mark.parametrize("arrow_type", [
    pa.map_(pa.string(), pa.int64()),
    pa.struct([("a", pa.int64())]),
    pa.binary(),
    pa.timestamp("ms"),
    pa.uint64(),
    pa.list_(pa.bool_()),
    pa.list_(pa.list_(pa.int64())),
])
def test_a_column_no_feature_describes_is_refused_or_skipped(arrow_type):
    arrow = pa.schema([("label", pa.int64()), ("odd", arrow_type)])
    with pytest.raises(ValueError, match=r"column 'odd' has type .*, which shards cannot hold"):
        Schema.from_arrow(arrow)
    assert _described(Schema.from_arrow(arrow, skip_unsupported=True)) == [("label", "label", "int64", False)]


def test_the_label_column_is_named_by_the_caller():
    arrow = pa.schema([("clicked", pa.int64()), ("label", pa.float32())])
    assert _described(Schema.from_arrow(arrow, "clicked")) == [
        ("clicked", "label", "int64", False), ("label", "dense", "float32", False)]
    assert [f.kind for f in Schema.from_arrow(arrow, None)] == ["dense", "dense"]


def test_tables_and_batches_give_their_schema():
    table = pa.table({"label": pa.array([1.5], pa.float64()), "ids": pa.array([[1, 2]], pa.list_(pa.int32()))})
    expected = [("label", "label", "float64", False), ("ids", "sparse", "int32", False)]
    assert _described(Schema.from_arrow(table)) == expected
    assert _described(Schema.from_arrow(table.to_batches()[0])) == expected


def test_the_writer_infers_with_the_same_rule():
    arrow = pa.schema([("label", pa.float64()), ("age", pa.int32()), ("user_id", pa.string()),
                       ("items", pa.list_(pa.int64())), ("items__weights", pa.list_(pa.float32()))])
    assert infer_schema(arrow) == Schema.from_arrow(arrow) == Schema([
        FeatureSpec("label", "label", "float64"), FeatureSpec("age", "dense", "int32"),
        FeatureSpec("user_id", "dense", "string"), FeatureSpec("items", "sparse", "int64", weighted=True)])


@pytest.mark.slow
def test_the_reader_infers_with_the_same_rule(tmp_path):
    tf = pytest.importorskip("tensorflow")
    from transforms.tfdata import make_dataset

    table = pa.table({
        "label": pa.array([0.25, 0.75], pa.float64()),
        "age": pa.array([30, 40], pa.int32()),
        "items": pa.array([[1, 2], [3]], pa.list_(pa.int64())),
        "items__weights": pa.array([[0.5, 2.0], [4.0]], pa.list_(pa.float32())),
        "extra": pa.array([{"a": 1}, {"a": 2}], pa.struct([("a", pa.int64())])),  # not selected, not described
    })
    path = str(tmp_path / "part-00000-of-00001.parquet")
    pq.write_table(table, path)
    ds = make_dataset([path], 2, shuffle=False, output="ragged", features=["items", "age"], verify="none")
    features, label = next(iter(ds))
    # A float64 label is described as float64; the tf.data stage delivers every float label as float32.
    assert label.dtype == tf.float32 and np.array_equal(label.numpy(), [0.25, 0.75])
    assert features["items"].to_list() == [[1, 2], [3]]
    assert np.array_equal(features["age"].numpy(), [30, 40])
