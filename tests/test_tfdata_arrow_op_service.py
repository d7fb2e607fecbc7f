"""Arrow shards read by the native op run under the tf.data service: in this process and in worker processes."""

import os

import numpy as np
import pytest
import tensorflow as tf
from test_tfdata_arrow_op import ROWS, _flat, _reader, _write
from test_tfdata_service import _cluster, needs_proc

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


@pytest.fixture(scope="module")
def service():
    """An in-process dispatcher with one worker: its address."""
    dispatcher = tf.data.experimental.service.DispatchServer(tf.data.experimental.service.DispatcherConfig(port=0))
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1], port=0)
    )
    yield dispatcher.target
    del worker, dispatcher


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


@pytest.mark.parametrize("mode", ["distributed_epoch", POLICY.DYNAMIC, POLICY.FILE])
def test_splitting_an_op_dataset_by_files_is_refused_naming_the_alternative(shards, service, mode):
    ds = make_dataset(shards, 16, shuffle=False, num_epochs=1)
    with pytest.raises(ValueError, match=r"splits by files, which the native Arrow op does not offer.*DATA"):
        distribute(ds, service, processing_mode=mode)


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
