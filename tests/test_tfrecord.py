"""TFRecord shards: framing identical to TensorFlow's writer, exact round trips, atomic writes."""

import os
import subprocess
import sys

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest
from _batches import SCHEMA, batches_of_rows, to_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import FeatureSpec, Schema, read_tfrecord_shard, shard_name, write_tfrecord_shard
from sparse_io.tfrecord import _crc32c_rows, frame_records

tf = pytest.importorskip("tensorflow")


@settings(max_examples=15)  # each example starts a tf.data pipeline; the encoder has its own property test
@given(batches_of_rows)
def test_round_trip_is_exact(tmp_path_factory, batches):
    path = str(tmp_path_factory.mktemp("tfr") / shard_name(0, 1, ".tfrecord"))
    rows = [r for b in batches for r in b]
    assert write_tfrecord_shard(path, map(to_batch, batches), SCHEMA) == len(rows)
    table = read_tfrecord_shard(path, SCHEMA, batch_size=8)
    assert table.schema == SCHEMA.arrow_schema()
    assert table.to_pylist() == rows


@settings(max_examples=30)
@given(st.lists(st.binary(max_size=40), max_size=10))
def test_framing_is_byte_identical_to_tensorflows_writer(tmp_path_factory, records):
    path = str(tmp_path_factory.mktemp("frame") / "ref.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for r in records:
            writer.write(r)
    with open(path, "rb") as f:
        assert frame_records(pa.array(records, pa.binary())) == f.read()
    if records:
        assert frame_records(pa.array(records, pa.large_binary()).slice(1)) == frame_records(
            pa.array(records[1:])
        )


def test_vectorised_crc32c_matches_the_library():
    rows = np.random.default_rng(0).integers(0, 256, size=(50, 8), dtype=np.uint8)
    assert _crc32c_rows(rows).tolist() == [google_crc32c.value(r.tobytes()) for r in rows]


def test_tensorflow_parses_the_shard_directly(tmp_path):
    path = os.path.join(str(tmp_path), "s.tfrecord")
    write_tfrecord_shard(
        path, [to_batch([{"label": 1, "items": [4, 5], "items__weights": [0.5, 2.0], "tags": ["x"]}])], SCHEMA
    )
    (serialized,) = list(tf.data.TFRecordDataset(path))
    parsed = tf.io.parse_single_example(
        serialized,
        {
            "label": tf.io.FixedLenFeature([], tf.int64),
            "items": tf.io.VarLenFeature(tf.int64),
            "items__weights": tf.io.VarLenFeature(tf.float32),
            "tags": tf.io.VarLenFeature(tf.string),
            "price": tf.io.VarLenFeature(tf.float32),
        },
    )
    assert int(parsed["label"]) == 1
    assert parsed["items"].values.numpy().tolist() == [4, 5]
    assert parsed["items__weights"].values.numpy().tolist() == [0.5, 2.0]
    assert parsed["tags"].values.numpy().tolist() == [b"x"]
    assert parsed["price"].values.numpy().tolist() == []


def test_rewriting_replaces_and_a_crash_leaves_nothing(tmp_path):
    path = os.path.join(str(tmp_path), shard_name(0, 2, ".tfrecord"))
    write_tfrecord_shard(path, [to_batch([{"label": 1}] * 3)], SCHEMA)
    write_tfrecord_shard(path, [to_batch([{"label": 2}])], SCHEMA)
    assert read_tfrecord_shard(path, SCHEMA).column("label").to_pylist() == [2]

    def crashing():
        yield to_batch([{"label": 3}] * 10)
        raise RuntimeError("worker lost")

    other = os.path.join(str(tmp_path), shard_name(1, 2, ".tfrecord"))
    with pytest.raises(RuntimeError, match="worker lost"):
        write_tfrecord_shard(other, crashing(), SCHEMA)
    with pytest.raises(RuntimeError):
        write_tfrecord_shard(path, crashing(), SCHEMA)
    assert os.listdir(str(tmp_path)) == [os.path.basename(path)]
    assert read_tfrecord_shard(path, SCHEMA).column("label").to_pylist() == [2]


def test_no_rows_write_an_empty_readable_file(tmp_path):
    path = os.path.join(str(tmp_path), "s.tfrecord")
    assert write_tfrecord_shard(path, [], SCHEMA) == 0
    assert os.path.getsize(path) == 0
    assert read_tfrecord_shard(path, SCHEMA).num_rows == 0


def test_examples_that_break_the_column_contract_are_named(tmp_path):
    path = os.path.join(str(tmp_path), "foreign.tfrecord")
    example = tf.train.Example()
    example.features.feature["price"].float_list.value.extend([1.0, 2.0])
    example.features.feature["label"].int64_list.value.append(1)
    with tf.io.TFRecordWriter(path) as w:
        w.write(example.SerializeToString())
    with pytest.raises(
        ValueError, match="feature 'price': an Example in batch row 0 has 2 values, expected 0 or 1"
    ):
        read_tfrecord_shard(path, SCHEMA)
    with pytest.raises(ValueError, match="feature 'other': .* has 0 values, expected 1"):
        read_tfrecord_shard(path, Schema([FeatureSpec("other", "label")]))


def test_corrupt_shard_is_a_data_loss_error(tmp_path):
    path = os.path.join(str(tmp_path), "s.tfrecord")
    write_tfrecord_shard(path, [to_batch([{"label": 1, "tags": ["abc"]}])], SCHEMA)
    data = bytearray(open(path, "rb").read())
    data[20] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        read_tfrecord_shard(path, SCHEMA)


def test_writing_shards_and_reading_logs_do_not_import_tensorflow(tmp_path):
    code = (
        "import sys, sparse_io, pyarrow as pa\n"
        "s = sparse_io.Schema([sparse_io.FeatureSpec('ids')])\n"
        "b = pa.record_batch({'ids': pa.array([[1, 2]], pa.list_(pa.int64()))}, schema=s.arrow_schema())\n"
        f"sparse_io.write_tfrecord_shard({os.path.join(str(tmp_path), 'a.tfrecord')!r}, [b], s)\n"
        f"sparse_io.write_parquet_shard({os.path.join(str(tmp_path), 'a.parquet')!r}, [b], s)\n"
        f"list(sparse_io.read_logs({os.path.join(str(tmp_path), 'a.parquet')!r}, 'parquet', s))\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
