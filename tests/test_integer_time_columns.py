"""Integer, float64 and timestamp columns: exact from the log to the training tensors, never narrowed silently."""

import datetime
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparse_io import DeadLetterSink, FeatureSpec, Schema, commit_directory, read_file
from sparse_io.arrow_shards import write_arrow_shard
from sparse_io.output_files import shard_name
from sparse_io.parquet_shards import write_parquet_shard
from sparse_io.tfrecord import write_tfrecord_shard

SCHEMA = Schema([
    FeatureSpec("label", "label", "int64"),
    FeatureSpec("user", "sparse", "int64"),
    FeatureSpec("timestamp", "dense", "int64"),
    FeatureSpec("count", "dense", "int32"),
    FeatureSpec("score", "dense", "float32"),
    FeatureSpec("amount", "dense", "float64"),
])
BIG = 2**53 + 1  # no float type holds it exactly
TIMES = [875246012, BIG, None, -5]
COUNTS = [1, None, 2**31 - 1, 0]
AMOUNTS = [0.1, None, 1e300, 2.0**60 + 1024]


def _table():
    return pa.table({
        "label": pa.array([1, 0, 1, 0], pa.int64()),
        "user": pa.array([[1], [2, 3], [], [4]], pa.list_(pa.int64())),
        "timestamp": pa.array(TIMES, pa.int64()),
        "count": pa.array(COUNTS, pa.int32()),
        "score": pa.array([0.5, None, 2.0, 3.0], pa.float32()),
        "amount": pa.array(AMOUNTS, pa.float64()),
    })


@pytest.fixture(scope="module", params=["parquet", "tfrecord", "arrow"])
def shards(request, tmp_path_factory):
    directory = str(tmp_path_factory.mktemp(request.param))
    suffix = "." + request.param
    path = os.path.join(directory, shard_name(0, 1, suffix))
    if request.param == "parquet":
        write_parquet_shard(path, [_table()], SCHEMA)
        SCHEMA.save(directory)
    elif request.param == "arrow":
        write_arrow_shard(path, [_table()], SCHEMA)
        SCHEMA.save(directory)
    else:
        schema = SCHEMA.select(n for n in SCHEMA.names if n != "amount")
        write_tfrecord_shard(path, [_table().drop_columns(["amount"])], schema)
        schema.save(directory)
    commit_directory(directory)  # shards written here, not by an ingest: readers verify a manifest
    return directory


def test_integer_and_float64_dense_columns_reach_training_exactly(shards):
    import tensorflow as tf

    from transforms import MISSING_INT, make_dataset

    features, label = next(iter(make_dataset(shards, 4, output="ragged", shuffle=False)))
    assert features["timestamp"].dtype == tf.int64
    assert features["timestamp"].numpy().tolist() == [875246012, BIG, MISSING_INT, -5]
    assert features["count"].dtype == tf.int64
    assert features["count"].numpy().tolist() == [1, MISSING_INT, 2**31 - 1, 0]
    assert features["score"].dtype == tf.float32
    if shards.endswith("parquet"):  # a tf.train.Example has no float64 list (see the test below)
        assert features["amount"].dtype == tf.float64
        got = features["amount"].numpy()
        assert got[0] == 0.1 and np.isnan(got[1]) and got[2] == 1e300 and got[3] == 2.0**60 + 1024
    assert label.numpy().tolist() == [1, 0, 1, 0]


def test_tfrecord_shards_refuse_float64_rather_than_round_it(tmp_path):
    with pytest.raises(ValueError, match="'amount'.*float64"):
        write_tfrecord_shard(str(tmp_path / "x.tfrecord"), [_table()], SCHEMA)


def test_the_missing_integer_is_int64_min():
    from transforms import MISSING_INT

    assert MISSING_INT == np.iinfo(np.int64).min


def _read_text(tmp_path, text, schema, **kwargs):
    path = tmp_path / "log.csv"
    path.write_text(text, encoding="utf-8")
    sink = DeadLetterSink()
    rows = [r for b in read_file(str(path), "csv", schema, dead_letters=sink, **kwargs) for r in b.to_pylist()]
    return rows, sink


def test_integers_beyond_float32_precision_are_dead_letters_not_rounded(tmp_path):
    schema = Schema([FeatureSpec("x", "dense", "float32")])
    rows, sink = _read_text(tmp_path, "x\n16777216\n16777217\n33554432\n0.1\n1e10\n", schema)
    # 2**24 and 2**25 are exact in float32; 2**24 + 1 is not; a decimal fraction is a float by nature.
    assert [r["x"] for r in rows] == [16777216.0, 33554432.0, pytest.approx(0.1), 1e10]
    assert sink.bad == 1
    assert "16777217" in sink.letters[0].reason and "float32" in sink.letters[0].reason


def test_integer_columns_beyond_float32_precision_from_parquet_are_dead_letters(tmp_path):
    path = str(tmp_path / "log.parquet")
    pq.write_table(pa.table({"x": pa.array([875246012, 875246016, 7], pa.int64())}), path)
    sink = DeadLetterSink()
    rows = [r for b in read_file(path, "parquet", Schema([FeatureSpec("x", "dense", "float32")]), dead_letters=sink)
            for r in b.to_pylist()]
    assert [r["x"] for r in rows] == [875246016.0, 7.0]
    assert sink.bad == 1 and "875246012" in sink.letters[0].reason


def test_values_outside_a_declared_integer_type_are_dead_letters_with_a_reason(tmp_path):
    schema = Schema([FeatureSpec("x", "dense", "int32")])
    rows, sink = _read_text(tmp_path, "x\n2147483647\n2147483648\n", schema)
    assert [r["x"] for r in rows] == [2147483647]
    assert sink.bad == 1 and "2147483648" in sink.letters[0].reason and "int32" in sink.letters[0].reason


def test_float64_columns_keep_their_precision(tmp_path):
    schema = Schema([FeatureSpec("x", "dense", "float64")])
    rows, sink = _read_text(tmp_path, "x\n0.1\n9007199254740993\n", schema)
    assert sink.bad == 0
    assert rows[0]["x"] == 0.1 and rows[1]["x"] == float("9007199254740993")


def _unix(text: str, scale: int) -> int:
    """Independent reference: Python's datetime, UTC, to whole units."""
    when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    delta = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86400 + delta.seconds) * scale + delta.microseconds * scale // 1_000_000


@pytest.mark.parametrize("unit,scale", [("s", 1), ("ms", 1000)])
def test_timestamps_parse_unix_numbers_and_iso_8601(tmp_path, unit, scale):
    schema = Schema([FeatureSpec("t", "dense", "int64", time_unit=unit)])
    texts = ["2016-01-03", "2014-04-01T05:26:12Z", "2014-04-01 05:26:12", "2002-11-24T01:02:03+02:00", "956703932"]
    rows, sink = _read_text(tmp_path, "t\n" + "\n".join(texts) + "\n", schema)
    assert sink.bad == 0, sink.letters
    expected = [_unix(t, scale) for t in texts[:4]] + [956703932]
    assert [r["t"] for r in rows] == expected


def test_iso_timestamps_finer_than_the_unit_are_dead_letters(tmp_path):
    text = "t\n2014-04-01T05:26:12.539Z\n"
    rows, sink = _read_text(tmp_path, text, Schema([FeatureSpec("t", "dense", "int64", time_unit="s")]))
    assert rows == [] and sink.bad == 1 and "unit 's'" in sink.letters[0].reason
    rows, sink = _read_text(tmp_path, text, Schema([FeatureSpec("t", "dense", "int64", time_unit="ms")]))
    assert [r["t"] for r in rows] == [_unix("2014-04-01T05:26:12.539Z", 1000)] == [1396329972539]


def test_a_bad_timestamp_is_a_dead_letter_naming_it(tmp_path):
    rows, sink = _read_text(tmp_path, "t\nyesterday\n2014-13-01\n", Schema([FeatureSpec("t", "dense", "int64",
                                                                                         time_unit="ms")]))
    assert rows == [] and sink.bad == 2 and "'yesterday'" in sink.letters[0].reason


def test_the_time_unit_is_stated_in_schema_json():
    spec = FeatureSpec("t", "dense", "int64", time_unit="ms")
    assert json.loads(Schema([spec]).to_json())["features"][0]["time_unit"] == "ms"
    assert Schema.from_json(Schema([spec]).to_json())["t"].time_unit == "ms"
    with pytest.raises(ValueError, match="time_unit"):
        FeatureSpec("t", "dense", "float32", time_unit="ms")


def test_the_config_declares_a_timestamp_column():
    from pipelines.config import parse_config

    config = parse_config({"input": {"format": "csv", "schema": [
        {"name": "t", "kind": "dense", "dtype": "timestamp", "unit": "ms"},
        {"name": "u", "kind": "dense", "dtype": "timestamp"}]}})
    assert config.schema["t"] == FeatureSpec("t", "dense", "int64", time_unit="ms")
    assert config.schema["u"].time_unit == "s"


# --- labels ---------------------------------------------------------------------------------------


def test_click_labels_outside_0_and_1_are_dead_letters_naming_the_value(tmp_path):
    schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("x", "dense", "float32")])
    rows, sink = _read_text(tmp_path, "label,x\n1,1\n2,1\n-1,1\n0,1\n", schema)
    assert [r["label"] for r in rows] == [1, 0]
    assert sink.bad == 2
    assert "label" in sink.letters[0].reason and "2" in sink.letters[0].reason
    assert "-1" in sink.letters[1].reason


def test_criteo_labels_outside_0_and_1_are_dead_letters(tmp_path):
    line = "\t".join(["{}"] + [""] * 13 + ["05db9164"] + [""] * 25)
    path = tmp_path / "day.tsv"
    path.write_text("\n".join(line.format(v) for v in (0, 1, 2)) + "\n")
    sink = DeadLetterSink()
    rows = [r for b in read_file(str(path), "criteo", dead_letters=sink) for r in b.to_pylist()]
    assert [r["label"] for r in rows] == [0, 1] and sink.bad == 1 and "2" in sink.letters[0].reason


def test_a_declared_label_type_accepts_other_values(tmp_path):
    schema = Schema([FeatureSpec("label", "label", "int64", label_type="integer")])
    rows, sink = _read_text(tmp_path, "label\n5\n-1\n", schema)
    assert [r["label"] for r in rows] == [5, -1] and sink.bad == 0
    rows, sink = _read_text(tmp_path, "label\n4.5\n", Schema([FeatureSpec("label", "label", "float32")]))
    assert [r["label"] for r in rows] == [4.5] and sink.bad == 0
    with pytest.raises(ValueError, match="label_type"):
        FeatureSpec("x", "dense", "int64", label_type="integer")


def test_the_click_model_casts_integer_columns_and_flags_their_missing_values():
    import tensorflow as tf

    from pipelines.model import normalise_dense
    from transforms import MISSING_INT

    value, missing = normalise_dense(tf.constant([3, MISSING_INT, 0, -7], tf.int64))
    assert value.dtype == tf.float32
    assert value.numpy().tolist() == pytest.approx([np.log1p(3.0), 0.0, 0.0, 0.0])
    assert missing.numpy().tolist() == [0.0, 1.0, 0.0, 0.0]
    value, missing = normalise_dense(tf.constant([np.nan, 1.0], tf.float64))
    assert value.dtype == tf.float32 and missing.numpy().tolist() == [1.0, 0.0]


def test_the_click_model_leaves_timestamp_columns_out():
    from types import SimpleNamespace

    from pipelines.tasks import resolve_task

    schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("c", "sparse", "int64", hash_buckets=10),
                     FeatureSpec("n", "dense", "int64"), FeatureSpec("t", "dense", "int64", time_unit="ms")])
    args = SimpleNamespace(embedding_dim=4, density=0.5, block_size=8, seed=0)
    model = resolve_task(schema, "ctr").make_model(schema, args, (16,))
    assert model.dense_features == ["n"]


def test_the_log_dataset_delivers_integer_columns_as_the_shards_do(tmp_path):
    from transforms import MISSING_INT, make_log_dataset

    path = tmp_path / "log.tsv"
    path.write_text("label\tn\tx\n1\t875246012\t0.5\n0\t\t\n1\t9007199254740993\t2\n")
    schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("n", "dense", "int64"),
                     FeatureSpec("x", "dense", "float32")])
    features, label = next(iter(make_log_dataset(str(path), "tsv", 3, schema=schema, output="ragged")))
    assert features["n"].numpy().tolist() == [875246012, MISSING_INT, 2**53 + 1]
    assert features["x"].numpy()[0] == 0.5 and np.isnan(features["x"].numpy()[1])
    with pytest.raises(ValueError, match="timestamp"):
        make_log_dataset(str(path), "tsv", 3, schema=Schema([FeatureSpec("n", "dense", "int64", time_unit="s")]),
                         label=False)


def test_jsonl_timestamps_and_float64_values(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"t": "2014-04-01T05:26:12.539Z", "x": 0.1}\n{"t": 1396329972539, "x": 2}\n'
                    '{"t": "2016-01-03", "x": null}\n{"t": 5, "x": 9007199254740993}\n')
    schema = Schema([FeatureSpec("t", "dense", "int64", time_unit="ms"), FeatureSpec("x", "dense", "float64")])
    sink = DeadLetterSink()
    rows = [r for b in read_file(str(path), "jsonl", schema, dead_letters=sink) for r in b.to_pylist()]
    assert [r["t"] for r in rows] == [1396329972539, 1396329972539, _unix("2016-01-03", 1000)]
    assert rows[0]["x"] == 0.1 and rows[2]["x"] is None
    assert sink.bad == 1 and "9007199254740993" in sink.letters[0].reason  # float64 would round it


def test_an_inferred_shard_schema_keeps_float64_scalars():
    from transforms.beam import infer_schema

    schema = infer_schema(pa.schema([("w", pa.float64()), ("ws", pa.list_(pa.float64())), ("t", pa.int64())]))
    assert [(f.name, f.kind, f.dtype) for f in schema] == [
        ("w", "dense", "float64"), ("ws", "sparse", "float32"), ("t", "dense", "int64")]
