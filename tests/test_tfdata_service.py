"""`transforms.distribute`: TFRecord and raw logs run under the tf.data service; Parquet and counters are refused."""

import contextlib
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import tensorflow as tf
from oracles import assert_entries
from tensorflow.python.data.experimental.ops import testing  # a per-element sleep; no public equivalent
from tfdata_data import random_rows, reference_coo, write_parquet_shards, write_tfrecord_shards

import transforms
from transforms import distribute, make_dataset, make_log_dataset

PARQUET_REFUSAL = r"Parquet shards through a tf\.py_function.*TFRecord shards.*make_log_dataset"
HERE = os.path.dirname(os.path.abspath(__file__))
POLICY = tf.data.experimental.service.ShardingPolicy
STARTUP_S = 120  # a worker process imports TensorFlow and transforms: seconds, more on a loaded machine



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
    with pytest.raises(ValueError, match=r"the bad_lines counter would stay 0"):
        distribute(ds, service, processing_mode="distributed_epoch")
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _ready_pid(process: subprocess.Popen, deadline: float) -> int:
    """The pid a worker process prints on its READY line (bounded by `deadline`)."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = process.stdout.readline()
            if not line:
                break
            if line.startswith("READY "):
                return int(line.split()[1])
    raise AssertionError(f"service worker {process.pid} did not start (exit status {process.poll()})")


@contextlib.contextmanager
def _cluster(workers: int, *, static: bool = False):
    """A dispatcher here and `workers` worker processes on loopback: yields (address, worker pids).

    `static`: fixed worker ports listed in the dispatcher, as static (FILE) sharding needs.
    """
    ports = [_free_port() for _ in range(workers)] if static else [0] * workers
    addresses = [f"localhost:{p}" for p in ports] if static else None
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0, worker_addresses=addresses)
    )
    address = dispatcher.target.split("://")[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])}
    logs = tempfile.TemporaryFile(mode="w+")
    processes = []
    try:
        for port in ports:
            processes.append(
                subprocess.Popen(
                    [sys.executable, os.path.join(HERE, "tfdata_workers.py"), "service-worker", address, str(port)],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=logs,
                    text=True,
                )
            )
        deadline = time.monotonic() + STARTUP_S
        pids = [_ready_pid(p, deadline) for p in processes]
        while dispatcher._num_workers() < workers:  # private, but the only way to see registrations
            assert time.monotonic() < deadline, f"{dispatcher._num_workers()} of {workers} workers registered"
            time.sleep(0.05)
        yield dispatcher.target, pids
    finally:
        for p in processes:
            with contextlib.suppress(OSError):
                p.stdin.close()
        for p in processes:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)
        logs.close()
        del dispatcher


@pytest.fixture(scope="module")
def two_workers():
    """A dispatcher with two worker processes: (address, their pids)."""
    with _cluster(2) as cluster:
        yield cluster


def _producers(dataset: tf.data.Dataset, rows, *, paced: bool = True) -> tf.data.Dataset:
    """`(rows(*element), pid)` per batch: the pid of the process that made it (a service worker, when distributed).

    `paced` (a sleep per batch, read-ahead not autotuned): the worker that
    learns of a dynamically split job first cannot read every file before
    the other starts. Which files each worker reads is what the tests look
    at, never how long it takes. (Static sharding needs no pacing, and
    tf.data's auto-shard cannot walk through the sleep.)
    """

    def tag(*element):
        # Read where the map runs: in a service worker's process when distributed.
        pid = tf.strings.split(tf.io.read_file("/proc/self/stat"), " ")[0]
        return rows(*element), tf.strings.to_number(pid, tf.int64)

    tagged = dataset.map(tag)
    if not paced:
        return tagged
    options = tf.data.Options()
    options.autotune.enabled = False
    return tagged.apply(testing.sleep(PACE_US)).with_options(options)


def _labels(features, label):
    return label


def _read_per_worker(dataset: tf.data.Dataset) -> dict[int, list[int]]:
    per_worker: dict[int, list[int]] = {}
    for label, pid in dataset:
        per_worker.setdefault(int(pid), []).extend(label.numpy().reshape(-1).tolist())
    return per_worker


def _files_per_worker(per_worker: dict[int, list[int]], file_of) -> dict[int, set[int]]:
    return {pid: {file_of(r) for r in rows} for pid, rows in per_worker.items()}


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="tells workers apart by /proc/self/stat")

# Workers learn of a job at their heartbeat, one before the other: enough batches, paced (PACE_US),
# that the first cannot read every file before the other starts, and a shuffle buffer far smaller
# than the epoch (one that holds the epoch pulls every file into the first worker that asks).
SPLIT_FILES, SPLIT_ROWS, SPLIT_BATCH, SPLIT_BUFFER = 16, 300, 16, 64
PACE_US = 8000


@needs_proc
@pytest.mark.parametrize("shuffle", [True, False])
def test_distributed_epoch_splits_a_tfrecord_epoch_by_files_between_worker_processes(tmp_path, two_workers, shuffle):
    target, pids = two_workers
    rows = random_rows(SPLIT_FILES * SPLIT_ROWS, seed=5)
    write_tfrecord_shards(str(tmp_path), rows, SPLIT_FILES)
    ds = make_dataset(
        str(tmp_path), SPLIT_BATCH, shuffle=shuffle, num_epochs=1, output="coo", shuffle_buffer=SPLIT_BUFFER
    )
    per_worker = _read_per_worker(distribute(_producers(ds, _labels), target, processing_mode="distributed_epoch"))
    assert sorted(r for got in per_worker.values() for r in got) == list(range(len(rows)))
    files = _files_per_worker(per_worker, lambda r: r // SPLIT_ROWS)
    # Both worker processes read, and each file was read whole by one of them.
    assert set(files) == set(pids), (files, pids)
    assert all(files.values())
    assert not files[pids[0]] & files[pids[1]], files


def _criteo_logs(directory, files: int, rows: int) -> list[str]:
    """`files` Criteo logs of `rows` lines each; I1 is the line's global number, the label its parity."""
    directory.mkdir()
    paths = []
    for f in range(files):
        lines = ["\t".join([str(k % 2), str(k)] + [""] * 38) for k in range(f * rows, (f + 1) * rows)]
        path = directory / f"day_{f:02d}.tsv"
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    return paths


@needs_proc
def test_distributed_epoch_splits_a_log_epoch_by_files_between_worker_processes(tmp_path, two_workers):
    target, pids = two_workers
    _criteo_logs(tmp_path / "logs", SPLIT_FILES, SPLIT_ROWS)
    ds = make_log_dataset(
        str(tmp_path / "logs"), "criteo", SPLIT_BATCH, features=["I1"], shuffle=True, shuffle_buffer=SPLIT_BUFFER
    )
    tagged = _producers(ds, lambda features, label: features["I1"])
    per_worker = _read_per_worker(distribute(tagged, target, processing_mode="distributed_epoch"))
    assert sorted(r for got in per_worker.values() for r in got) == list(range(SPLIT_FILES * SPLIT_ROWS))
    files = _files_per_worker(per_worker, lambda r: r // SPLIT_ROWS)
    assert set(files) == set(pids), (files, pids)
    assert all(files.values())
    assert not files[pids[0]] & files[pids[1]], files


@needs_proc
def test_static_file_sharding_gives_each_worker_process_a_fixed_half_of_the_files(tmp_path):
    rows = random_rows(SPLIT_FILES * SPLIT_ROWS, seed=6)
    write_tfrecord_shards(str(tmp_path), rows, SPLIT_FILES)
    ds = make_dataset(str(tmp_path), SPLIT_BATCH, shuffle=True, seed=4, output="ragged", shuffle_buffer=SPLIT_BUFFER)
    with _cluster(2, static=True) as (target, pids):
        tagged = _producers(ds, _labels, paced=False)
        per_worker = _read_per_worker(distribute(tagged, target, processing_mode=POLICY.FILE))
    assert sorted(r for got in per_worker.values() for r in got) == list(range(len(rows)))
    files = _files_per_worker(per_worker, lambda r: r // SPLIT_ROWS)
    assert set(files) == set(pids), (files, pids)
    assert sorted(len(f) for f in files.values()) == [SPLIT_FILES // 2] * 2
    assert not files[pids[0]] & files[pids[1]], files


@pytest.mark.parametrize("mode", ["distributed_epoch", POLICY.DYNAMIC, POLICY.FILE, POLICY.FILE_OR_DATA])
@pytest.mark.parametrize("source", ["tfrecord", "log"])
def test_splitting_by_files_is_refused_for_more_than_one_epoch(tmp_path, service, mode, source):
    if source == "tfrecord":
        write_tfrecord_shards(str(tmp_path), random_rows(20, seed=3), 2)
        ds = make_dataset(str(tmp_path), 8, num_epochs=2, output="ragged")
    else:
        ds = make_log_dataset(_criteo_log(tmp_path / "day.tsv", 10), "criteo", 4, features=["I1"], num_epochs=None)
    with pytest.raises(ValueError, match=r"splits an epoch between the workers by files only .*num_epochs=1") as e:
        distribute(ds.take(2), service, processing_mode=mode)
    assert "\n" not in str(e.value)
    # Every worker reading everything (parallel_epochs) or every n-th batch (DATA) holds for any epochs.
    distribute(ds, service, processing_mode="parallel_epochs")
    distribute(ds, service, processing_mode=POLICY.DATA)


def test_splitting_by_files_is_refused_for_an_input_shard_of_every_nth_record(tmp_path, service):
    write_tfrecord_shards(str(tmp_path), random_rows(20, seed=3), 2)
    ds = make_dataset(str(tmp_path), 4, num_epochs=1, num_shards=3, index=1, output="ragged")
    for mode in ("distributed_epoch", POLICY.FILE):
        with pytest.raises(ValueError, match=r"every num_shards-th record of all the files .*ShardingPolicy\.DATA"):
            distribute(ds, service, processing_mode=mode)
    # With whole files per input worker the shard splits fine.
    ds = make_dataset(str(tmp_path), 4, num_epochs=1, num_shards=2, index=1, output="ragged")
    distribute(ds, service, processing_mode="distributed_epoch")


def test_more_epochs_under_a_file_split_come_from_repeating_the_distributed_dataset(tmp_path, service):
    # What the num_epochs refusal tells the caller to do instead.
    write_tfrecord_shards(str(tmp_path), random_rows(30, seed=8), 3)
    ds = make_dataset(str(tmp_path), 4, num_epochs=1, output="ragged", shuffle=True, seed=1)
    distributed = distribute(ds, service, processing_mode="distributed_epoch").repeat(2)
    labels = [int(y) for _, label in distributed for y in label.numpy()]
    assert sorted(labels) == sorted(list(range(30)) * 2)
