"""Arrow shards read by the native op run under the tf.data service: in this process and in worker processes."""

import os

import numpy as np
import pytest
import tensorflow as tf
from test_tfdata_arrow_op import ROWS, _flat, _reader, _write
from test_tfdata_service import _cluster, _labels, _producers, _read_per_worker, needs_proc
from tfdata_data import random_rows, write_arrow_shards

from ops import _native
from transforms import distribute, make_dataset

pytestmark = pytest.mark.skipif(
    _native.library() is None or not hasattr(_native.library(), "sparseflow_arrow_dataset"),
    reason="the native kernels are not built here",
)
POLICY = tf.data.experimental.service.ShardingPolicy


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return _write(str(tmp_path_factory.mktemp("arrow_op_service")))



@pytest.mark.parametrize("mode", ["parallel_epochs", POLICY.OFF])
def test_an_op_dataset_arrives_whole_through_the_service(shards, service, mode):
    ds = make_dataset(shards, 16, shuffle=True, seed=3, num_epochs=2)
    assert _reader(ds) == "op"
    local = [_flat(e) for e in ds]
    remote = [_flat(e) for e in distribute(ds, service, processing_mode=mode)]
    assert len(remote) == len(local) == 22  # one worker: the dataset's order
    for x, y in zip(local, remote, strict=True):
        for a, b in zip(x, y, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", [POLICY.FILE, POLICY.FILE_OR_DATA])
def test_static_file_sharding_of_an_op_dataset_is_refused_naming_the_alternatives(shards, service, mode):
    ds = make_dataset(shards, 16, shuffle=False, num_epochs=1)
    with pytest.raises(ValueError, match=r"shards by files statically.*native Arrow op.*'distributed_epoch'"):
        distribute(ds, service, processing_mode=mode)


@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_epoch_hands_out_units_one_worker_reads_every_row_once(shards, service, shuffle):
    ds = make_dataset(shards, 16, shuffle=shuffle, seed=4, num_epochs=1, return_position=True)
    labels = []
    for _, label, _ in distribute(ds, service, processing_mode="distributed_epoch"):
        labels += label.numpy().tolist()
    assert sorted(labels) == list(range(len(ROWS)))
    if not shuffle:  # one worker takes the units in order: the rows in order
        assert labels == list(range(len(ROWS)))


@needs_proc
def test_worker_processes_read_every_row_once_sharding_by_data(shards):
    ds = make_dataset(shards, 8, shuffle=True, seed=2, num_epochs=1)

    def tag(features, label):
        pid = tf.strings.split(tf.io.read_file("/proc/self/stat"), " ")[0]
        return label, tf.strings.to_number(pid, tf.int64)

    with _cluster(2, static=True) as (target, pids):  # DATA sharding needs the workers listed
        per_worker: dict[int, list[int]] = {}
        for label, pid in distribute(ds.map(tag), target, processing_mode=POLICY.DATA):
            per_worker.setdefault(int(pid), []).extend(label.numpy().tolist())
    assert sorted(r for got in per_worker.values() for r in got) == list(range(len(ROWS)))
    assert set(per_worker) == set(pids) and os.getpid() not in per_worker


@needs_proc
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_epoch_splits_an_arrow_epoch_by_units_between_worker_processes(tmp_path_factory, shuffle):
    files, rows_per_file, unit = 16, 300, 100
    directory = str(tmp_path_factory.mktemp("arrow_split"))
    write_arrow_shards(directory, random_rows(files * rows_per_file, seed=5), files, unit)
    ds = make_dataset(directory, 16, shuffle=shuffle, seed=3, num_epochs=1)
    assert _reader(ds) == "op"
    with _cluster(2) as (target, pids):
        per_worker = _read_per_worker(distribute(_producers(ds, _labels), target, processing_mode="distributed_epoch"))
    assert sorted(r for got in per_worker.values() for r in got) == list(range(files * rows_per_file))
    units = {pid: {r // unit for r in got} for pid, got in per_worker.items()}  # record batches of 100 rows
    # Both worker processes read, and each unit was read whole by one of them.
    assert set(units) == set(pids), (units, pids)
    assert all(units.values())
    assert not units[pids[0]] & units[pids[1]], units
