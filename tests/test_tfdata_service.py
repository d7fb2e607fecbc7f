"""`transforms.distribute`: TFRecord and raw logs run under the tf.data service; Parquet and counters are refused."""

import pytest
import tensorflow as tf
from oracles import assert_entries
from tfdata_data import random_rows, reference_coo, write_parquet_shards, write_tfrecord_shards

import transforms
from transforms import distribute, make_dataset, make_log_dataset

PARQUET_REFUSAL = r"Parquet shards through a tf\.py_function.*TFRecord shards.*make_log_dataset"


@pytest.fixture(scope="module")
def service():
    """An in-process dispatcher with one worker: its address."""
    dispatcher = tf.data.experimental.service.DispatchServer(tf.data.experimental.service.DispatcherConfig(port=0))
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1], port=0)
    )
    yield dispatcher.target
    del worker, dispatcher


def _criteo_log(path, n):
    """n Criteo lines: label k % 2, I1 = k (the row's id), the rest empty."""
    lines = ["\t".join([str(k % 2), str(k)] + [""] * 38) for k in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_distribute_is_exported_like_the_other_public_names():
    import transforms.tfdata as tfdata

    assert transforms.distribute is tfdata.distribute
    assert "distribute" in dir(transforms)


def test_a_parquet_dataset_is_refused_naming_parquet_the_py_function_and_the_alternatives(tmp_path, service):
    write_parquet_shards(str(tmp_path), random_rows(20, seed=1), 2, row_group_size=8)
    ds = make_dataset(str(tmp_path), 4, shuffle=False)
    with pytest.raises(ValueError, match=PARQUET_REFUSAL) as refused:
        distribute(ds, service)
    assert "\n" not in str(refused.value)
    assert "output.format: tfrecord" in str(refused.value)
    # A dataset derived from it is refused too: the check follows the inputs.
    with pytest.raises(ValueError, match=PARQUET_REFUSAL):
        distribute(ds.take(3), service)
    with pytest.raises(ValueError, match=PARQUET_REFUSAL):
        distribute(ds.map(lambda features, label: label).prefetch(1), service)


def test_a_log_dataset_with_a_counter_is_refused_saying_it_would_stay_zero(tmp_path, service):
    path = _criteo_log(tmp_path / "day.tsv", 10)
    bad = tf.Variable(0, dtype=tf.int64)
    ds = make_log_dataset(path, "criteo", 4, features=["I1"], output="ragged", on_error="skip", bad_lines=bad)
    with pytest.raises(ValueError, match=r"the bad_lines counter would stay 0 .*on_error='raise'"):
        distribute(ds, service)
    with pytest.raises(ValueError, match=r"the bad_lines counter would stay 0"):
        distribute(ds.take(1), service)
    padded = tf.Variable(0, dtype=tf.int64)
    ds = make_log_dataset(path, "criteo", 4, features=["I1"], output="ragged", padded_lines=padded)
    with pytest.raises(ValueError, match=r"the padded_lines counter would stay 0"):
        distribute(ds, service)


def test_a_dropped_counter_is_refused_for_tfrecord_shards_too(tmp_path, service):
    write_tfrecord_shards(str(tmp_path), random_rows(20, seed=3), 2)
    dropped = tf.Variable(0, dtype=tf.int64)
    ds = make_dataset(
        str(tmp_path), 8, output="coo", capacities={"items": 2, "user": 1}, overflow="drop", dropped=dropped
    )
    with pytest.raises(ValueError, match=r"the dropped counter would stay 0 .*overflow='error'"):
        distribute(ds, service)


def test_a_tfrecord_dataset_arrives_whole_through_the_service(tmp_path, service):
    rows = random_rows(50, seed=4)
    write_tfrecord_shards(str(tmp_path), rows, 3)
    ds = make_dataset(str(tmp_path), 8, shuffle=True, seed=2, output="coo")
    labels = []
    for features, label in distribute(ds, service, job_name="tfrecord"):
        batch = [rows[int(y)] for y in label.numpy()]
        labels += label.numpy().tolist()
        assert_entries(features["items"], reference_coo(batch, "items", weighted=True))
        assert_entries(features["user"], reference_coo(batch, "user", weighted=False))
    assert sorted(labels) == list(range(50))


def test_a_log_dataset_without_counters_arrives_whole_through_the_service(tmp_path, service):
    path = _criteo_log(tmp_path / "day.tsv", 37)
    ds = make_log_dataset(path, "criteo", 5, features=["I1"], output="ragged", shuffle=True, seed=1)
    got = []
    for features, label in distribute(ds, service).take(100):
        ids = features["I1"].numpy().reshape(-1).tolist()
        assert label.numpy().reshape(-1).tolist() == [k % 2 for k in ids]
        got += ids
    assert sorted(got) == list(range(37))
