"""Shard names and Parquet shards: exact round trips, row groups, atomic and repeatable writes."""

import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _batches import SCHEMA, batches_of_rows, to_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import (
    CorruptFileError,
    FeatureSpec,
    Schema,
    read_parquet_shard,
    shard_name,
    write_parquet_shard,
)
from sparse_io.parquet_shards import DICTIONARY_PAGE_LIMIT, PARQUET_CODECS


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
    assert write_parquet_shard(path, map(to_batch, batches), SCHEMA, row_group_size=row_group_size) == len(rows)
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


@pytest.mark.parametrize("codec", PARQUET_CODECS)
def test_every_codec_is_written_as_asked_and_reads_back_exactly(tmp_path, codec):
    rows = [{"label": i, "price": i / 7, "items": list(range(i % 5)), "items__weights": [1.5] * (i % 5),
             "tags": [f"t{i % 3}"]} for i in range(300)]
    path = os.path.join(str(tmp_path), shard_name(0, 1, ".parquet"))
    write_parquet_shard(path, [to_batch(rows)], SCHEMA, row_group_size=128, compression=codec)
    meta = pq.ParquetFile(path).metadata
    codecs = {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
              for c in range(meta.num_columns)}
    assert codecs == {"UNCOMPRESSED" if codec == "none" else codec.upper()}
    assert read_parquet_shard(path, SCHEMA).to_pylist() == to_batch(rows).to_pylist()


def test_an_unknown_codec_is_rejected_naming_the_choices(tmp_path):
    with pytest.raises(ValueError, match="compression must be one of zstd, lz4, snappy, none, got 'gzip'"):
        write_parquet_shard(os.path.join(str(tmp_path), "s.parquet"), [], SCHEMA, compression="gzip")
    assert not os.listdir(tmp_path)


def _shard(tmp_path) -> tuple[str, pa.Table]:
    rows = [
        {"label": i, "price": i / 3, "items": list(range(i % 4)), "items__weights": [0.5] * (i % 4), "tags": [f"t{i}"]}
        for i in range(60)
    ]
    path = os.path.join(str(tmp_path), shard_name(0, 1, ".parquet"))
    write_parquet_shard(path, [to_batch(rows)], SCHEMA, row_group_size=16)
    return path, read_parquet_shard(path, SCHEMA)


def test_shards_are_written_with_page_checksums(tmp_path):
    path, _ = _shard(tmp_path)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start + chunk.total_compressed_size - 1] ^= 0x01  # the last byte of the chunk: page data
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(CorruptFileError, match="damaged Parquet file"):
        read_parquet_shard(path, SCHEMA)


@settings(max_examples=60)
@given(st.data())
def test_a_flipped_byte_anywhere_is_an_error_naming_the_shard_or_changes_nothing(tmp_path_factory, data):
    path, table = _shard(tmp_path_factory.mktemp("flip"))
    with open(path, "rb") as f:
        content = bytearray(f.read())
    position = data.draw(st.integers(0, len(content) - 1))
    content[position] ^= data.draw(st.integers(1, 255))
    with open(path, "wb") as f:
        f.write(bytes(content))
    try:
        got = read_parquet_shard(path, SCHEMA)
    except ValueError as e:  # CorruptFileError, or a column name or type the flip changed
        assert str(e).startswith(path)
    else:  # statistics, unused metadata: the data read is still exactly right
        assert got.equals(table)


@pytest.mark.parametrize("keep", [0, 3, 100, 0.5, -8, -1])
def test_a_truncated_shard_is_a_corrupt_file_error_naming_it(tmp_path, keep):
    path, _ = _shard(tmp_path)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    with pytest.raises(CorruptFileError, match="damaged Parquet file") as info:
        read_parquet_shard(path)
    assert info.value.path == path and str(info.value).startswith(path)


def test_many_valued_columns_fall_back_from_a_dictionary_and_few_valued_ones_keep_it(tmp_path):
    rng = np.random.default_rng(0)
    rows = 50_000
    schema = Schema([FeatureSpec("few", "sparse", "int64"), FeatureSpec("many", "sparse", "int64")])
    batch = pa.record_batch(
        {
            "few": pa.ListArray.from_arrays(np.arange(rows + 1, dtype=np.int32), rng.integers(0, 100, rows)),
            "many": pa.ListArray.from_arrays(np.arange(rows + 1, dtype=np.int32), rng.integers(0, 1 << 40, rows)),
        }
    )
    path = str(tmp_path / shard_name(0, 1, ".parquet"))
    write_parquet_shard(path, [batch], schema)
    group = pq.ParquetFile(path).metadata.row_group(0)
    few, many = (group.column(i) for i in range(2))
    assert few.has_dictionary_page
    # 50,000 distinct ids would make a dictionary page of ~400 kB; it stops at the limit and goes plain.
    assert many.has_dictionary_page
    assert many.data_page_offset - many.dictionary_page_offset <= DICTIONARY_PAGE_LIMIT + 1024
    assert read_parquet_shard(path, schema).equals(pa.Table.from_batches([batch]).cast(schema.arrow_schema()))
