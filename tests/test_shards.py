"""Shard names and Parquet shards: exact round trips, row groups, atomic and repeatable writes."""

import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _batches import SCHEMA, batches_of_rows, to_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import read_parquet_shard, shard_name, write_parquet_shard


def test_shard_name_format():
    assert shard_name(0, 4, ".parquet") == "part-00000-of-00004.parquet"
    assert shard_name(3, 4, "tfrecord") == "part-00003-of-00004.tfrecord"
    assert shard_name(12, 100000, "") == "part-00012-of-100000"
    for index, count in ((4, 4), (-1, 4), (0, 0)):
        with pytest.raises(ValueError, match="shard index must be in"):
            shard_name(index, count, ".parquet")


@settings(max_examples=40)
@given(batches_of_rows, st.integers(1, 7))
def test_parquet_round_trip_is_exact(tmp_path_factory, batches, row_group_size):
    path = str(tmp_path_factory.mktemp("pq") / shard_name(0, 1, ".parquet"))
    rows = [r for b in batches for r in b]
    assert write_parquet_shard(path, map(to_batch, batches), SCHEMA, row_group_size=row_group_size) == len(
        rows
    )
    table = read_parquet_shard(path, SCHEMA)
    assert table.schema == SCHEMA.arrow_schema()
    assert table.to_pylist() == rows
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == len(rows)
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == len(rows) and len(sizes) == math.ceil(len(rows) / row_group_size)
    assert all(s == row_group_size for s in sizes[:-1])
    if sizes:
        assert meta.row_group(0).column(0).compression == "ZSTD"


def test_no_batches_still_write_a_readable_empty_shard(tmp_path):
    path = os.path.join(str(tmp_path), "part-00000-of-00001.parquet")
    assert write_parquet_shard(path, [], SCHEMA) == 0
    table = read_parquet_shard(path, SCHEMA)
    assert table.num_rows == 0 and table.schema == SCHEMA.arrow_schema()


def test_tables_and_reordered_columns_are_conformed(tmp_path):
    batch = to_batch([{"label": 1, "items": [5], "items__weights": [0.5], "tags": ["t"]}])
    shuffled = pa.table({n: batch.column(n) for n in reversed(batch.schema.names)}).append_column(
        "extra", pa.array([1])
    )
    path = os.path.join(str(tmp_path), "s.parquet")
    write_parquet_shard(path, [shuffled], SCHEMA)
    assert read_parquet_shard(path).schema.names == SCHEMA.arrow_schema().names
    assert read_parquet_shard(path, SCHEMA).to_pylist() == batch.to_pylist()


def test_castable_types_are_cast_and_others_named(tmp_path):
    batch = to_batch([{"label": 1, "cats": [2]}])
    narrow = batch.set_column(0, "label", pa.array([1], pa.int8()))
    path = os.path.join(str(tmp_path), "s.parquet")
    write_parquet_shard(path, [narrow], SCHEMA)
    assert read_parquet_shard(path, SCHEMA).column("label").to_pylist() == [1]
    bad = batch.set_column(0, "label", pa.array(["x"]))
    with pytest.raises(ValueError, match="feature 'label': cannot cast string to int64"):
        write_parquet_shard(path, [bad], SCHEMA)
    with pytest.raises(ValueError, match="feature 'tags': column missing"):
        write_parquet_shard(path, [batch.drop_columns(["tags"])], SCHEMA)


def test_rewriting_replaces_the_shard_cleanly(tmp_path):
    path = os.path.join(str(tmp_path), shard_name(0, 1, ".parquet"))
    write_parquet_shard(path, [to_batch([{"label": 1}] * 5)], SCHEMA)
    write_parquet_shard(path, [to_batch([{"label": 0}] * 2)], SCHEMA)
    assert read_parquet_shard(path, SCHEMA).column("label").to_pylist() == [0, 0]
    assert os.listdir(str(tmp_path)) == [os.path.basename(path)]


def test_a_crash_mid_write_leaves_no_file_under_the_final_name(tmp_path):
    path = os.path.join(str(tmp_path), shard_name(0, 1, ".parquet"))

    def crashing():
        yield to_batch([{"label": 1}] * 100)
        raise RuntimeError("worker lost")

    with pytest.raises(RuntimeError, match="worker lost"):
        write_parquet_shard(path, crashing(), SCHEMA, row_group_size=10)
    assert os.listdir(str(tmp_path)) == []
    # An earlier complete shard survives a crashed rewrite untouched.
    write_parquet_shard(path, [to_batch([{"label": 7}])], SCHEMA)
    with pytest.raises(RuntimeError):
        write_parquet_shard(path, crashing(), SCHEMA, row_group_size=10)
    assert read_parquet_shard(path, SCHEMA).column("label").to_pylist() == [7]
    assert os.listdir(str(tmp_path)) == [os.path.basename(path)]


def test_reading_with_a_schema_checks_columns_and_types(tmp_path):
    path = os.path.join(str(tmp_path), "s.parquet")
    pq.write_table(pa.table({"label": pa.array(["a"])}), path)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['price'"):
        read_parquet_shard(path, SCHEMA)
    with pytest.raises(ValueError, match="column 'label' has type string, expected int64"):
        read_parquet_shard(path, SCHEMA.select(["label"]))


def test_invalid_row_group_size_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="row_group_size must be a positive integer"):
        write_parquet_shard(os.path.join(str(tmp_path), "s.parquet"), [], SCHEMA, row_group_size=0)
