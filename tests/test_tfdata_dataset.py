"""make_dataset end to end: exact rows, element_spec, COO output, sharding, resuming in a new process, workers."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from oracles import assert_entries, capacity_max, pad
from tfdata_data import (
    SCHEMA,
    batch_rows,
    random_rows,
    reference_coo,
    write_arrow_shards,
    write_parquet_shards,
    write_tfrecord_shards,
)

from sparse_io.manifest import commit_directory
from transforms import InputState, make_dataset
from transforms.tfdata.columnar.source import _tensor

ROWS = random_rows(150, seed=21)
HERE = os.path.dirname(os.path.abspath(__file__))


def _capacity(rows, feature, size):
    """stats.json's capacity max for `size` rows, as ComputeStats writes it."""
    return capacity_max([len(r[feature]) for r in rows], size)


@pytest.fixture(scope="module")
def shard_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    parquet, tfrecord, arrow = str(root / "parquet"), str(root / "tfrecord"), str(root / "arrow")
    write_parquet_shards(parquet, ROWS, 3, row_group_size=20)
    write_tfrecord_shards(tfrecord, ROWS, 3)
    write_arrow_shards(arrow, ROWS, 3, record_batch_size=20)
    stats = {
        "format_version": 1,
        "num_rows": len(ROWS),
        "features": {
            f: {
                "rows": len(ROWS),
                "ids_per_row": {"max": max(len(r[f]) for r in ROWS)},
                "capacity": {str(b): {"max": _capacity(ROWS, f, b), "p99_9": _capacity(ROWS, f, b)} for b in (16,)},
            }
            for f in ("user", "items")
        },
    }
    for directory in (parquet, arrow):
        with open(os.path.join(directory, "stats.json"), "w") as f:
            json.dump(stats, f)
        commit_directory(directory)
    return {"parquet": parquet, "tfrecord": tfrecord, "arrow": arrow}


def _all_rows(ds):
    out = []
    for features, label in ds:
        out += batch_rows(features, label)
    return out


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "arrow"])
@pytest.mark.parametrize("batch_size,shuffle", [(7, False), (32, True), (1000, True)])
def test_every_row_comes_out_once_per_epoch_with_ids_weights_and_label_intact(shard_dirs, fmt, batch_size, shuffle):
    ds = make_dataset(shard_dirs[fmt], batch_size, shuffle=shuffle, seed=2, num_epochs=2, output="ragged")
    rows = _all_rows(ds)
    assert len(rows) == 300
    for epoch in (rows[:150], rows[150:]):
        assert sorted(epoch, key=lambda r: r["label"]) == ROWS
    if not shuffle:
        assert [r["label"] for r in rows[:150]] == list(range(150))


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "arrow"])
def test_drop_remainder_gives_static_shapes_and_the_element_spec_is_exact(shard_dirs, fmt):
    ds = make_dataset(shard_dirs[fmt], 16, output="ragged", drop_remainder=True, shuffle=False)
    spec_features, spec_label = ds.element_spec
    assert spec_label == tf.TensorSpec([16], tf.int64)
    assert spec_features["price"] == tf.TensorSpec([16], tf.float32)
    assert spec_features["items"] == tf.RaggedTensorSpec([16, None], tf.int64, 1, tf.int64)
    assert spec_features["items__weights"] == tf.RaggedTensorSpec([16, None], tf.float32, 1, tf.int64)
    batches = list(ds)
    assert len(batches) == 150 // 16
    for element in batches:
        assert tf.type_spec_from_value(element[0]["items"]).is_compatible_with(spec_features["items"])
    sparse = make_dataset(shard_dirs[fmt], 16, output="sparse", drop_remainder=True)
    assert sparse.element_spec[0]["user"] == tf.SparseTensorSpec([16, None], tf.int64)
    loose = make_dataset(shard_dirs[fmt], 16, output="ragged")
    assert loose.element_spec[1] == tf.TensorSpec([None], tf.int64)


def test_coo_output_is_padded_to_stats_capacity_and_matches_the_reference(shard_dirs):
    ds = make_dataset(shard_dirs["parquet"], 16, capacities="stats", drop_remainder=True, shuffle=False)
    cap = _capacity(ROWS, "items", 16)
    features, label = ds.element_spec
    assert features["items"].row_ids == tf.TensorSpec([cap], tf.int32)
    assert features["user"].col_ids.shape == [_capacity(ROWS, "user", 16)]
    batches = 0
    for k, (features, label) in enumerate(ds):
        rows = ROWS[16 * k : 16 * (k + 1)]
        assert label.numpy().tolist() == [r["label"] for r in rows]
        assert_entries(features["items"], pad(reference_coo(rows, "items", weighted=True), cap, 16)[0], rtol=1e-6)
        batches += 1
    assert batches == 150 // 16


def test_coo_output_without_capacities_has_the_combiner_folded_in(shard_dirs):
    ds = make_dataset(shard_dirs["tfrecord"], 50, shuffle=False, combiner={"items": "sqrtn"})
    features, label = next(iter(ds))
    rows = ROWS[:50]
    assert_entries(features["items"], reference_coo(rows, "items", weighted=True, combiner="sqrtn"))
    assert_entries(features["user"], reference_coo(rows, "user", weighted=False))


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "arrow"])
@pytest.mark.parametrize("workers", [2, 3])
def test_simulated_workers_read_disjoint_parts_that_cover_the_data(shard_dirs, fmt, workers):
    seen = []
    for index in range(workers):
        ds = make_dataset(shard_dirs[fmt], 10, num_shards=workers, index=index, shuffle=True, seed=4, output="ragged")
        labels = [r["label"] for r in _all_rows(ds)]
        assert labels, f"worker {index} read nothing"
        seen += labels
    assert sorted(seen) == list(range(150))


def test_few_files_are_split_by_rows_or_records_across_workers(shard_dirs):
    for fmt, name in (
        ("parquet", "part-00001-of-00003.parquet"),
        ("tfrecord", "part-00001-of-00003.tfrecord"),
    ):
        path = [os.path.join(shard_dirs[fmt], name)]
        seen = []
        for index in range(3):
            ds = make_dataset(path, 4, num_shards=3, index=index, output="ragged", schema=SCHEMA)
            part = [r["label"] for r in _all_rows(ds)]
            assert part
            seen += part
        assert sorted(seen) == list(range(50, 100)), fmt


def test_input_context_path_under_a_single_worker_strategy(shard_dirs):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    contexts = []

    def dataset_fn(context):
        contexts.append((context.num_input_pipelines, context.input_pipeline_id))
        return make_dataset(shard_dirs["parquet"], 25, input_context=context, shuffle=False, output="coo")

    dist = strategy.distribute_datasets_from_function(dataset_fn)
    labels = []
    for _features, label in dist:
        labels += label.numpy().tolist()
    assert contexts == [(1, 0)] and labels == list(range(150))


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _start(args, tf_config=None):
    path = os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "tfdata_workers.py"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(process, timeout=240):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == 0, err[-3000:]
    line = [x for x in out.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def test_stopping_mid_epoch_and_resuming_in_a_new_process_continues_exactly(shard_dirs, tmp_path):
    from tfdata_workers import RESUME_ARGS, labels

    whole = {fmt: labels(make_dataset(shard_dirs[fmt], **RESUME_ARGS)) for fmt in ("parquet", "tfrecord")}
    assert sorted(whole["parquet"]) == sorted(whole["tfrecord"]) == sorted(list(range(150)) * 2)
    first = {}
    iterator = iter(make_dataset(shard_dirs["parquet"], return_position=True, **RESUME_ARGS))
    taken = [next(iterator) for _ in range(12)]  # into the second epoch (10 batches per epoch)
    first["parquet_state"] = labels(taken)
    (tmp_path / "state.json").write_text(InputState.from_tensor(taken[-1][2]).to_json())
    for name, fmt in (("parquet_checkpoint", "parquet"), ("tfrecord_checkpoint", "tfrecord")):
        iterator = iter(make_dataset(shard_dirs[fmt], **RESUME_ARGS))
        first[name] = labels([next(iterator) for _ in range(5)])
        tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / name))
    rest = _result(_start(["resume", shard_dirs["parquet"], shard_dirs["tfrecord"], str(tmp_path)]))
    for name, fmt in (
        ("parquet_state", "parquet"),
        ("parquet_checkpoint", "parquet"),
        ("tfrecord_checkpoint", "tfrecord"),
    ):
        assert first[name] + rest[name] == whole[fmt], name


def test_reading_shards_in_training_code_never_imports_beam(shard_dirs):
    # Beam costs over a second and ~150 MiB to import; training input code only reads shards.
    script = (
        "import sys\n"
        "import ops, sparse_io, transforms\n"
        "from transforms import make_dataset\n"
        "for fmt in sys.argv[1:]:\n"
        "    for _ in make_dataset(fmt, 64, num_epochs=1, output='coo'):\n"
        "        pass\n"
        "print('BEAM', 'apache_beam' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, shard_dirs["parquet"], shard_dirs["tfrecord"]],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(HERE),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BEAM False" in done.stdout.splitlines()


def test_a_script_ends_with_an_endless_parquet_iterator_still_alive(shard_dirs):
    # A training script that simply stops reading. A reader call still running when the
    # interpreter finalizes never returns, and TensorFlow's iterator teardown then waits for it
    # forever: the calls are drained at exit instead.
    script = (
        "import sys\n"
        "from transforms import make_dataset\n"
        "it = iter(make_dataset(sys.argv[1], 16, num_epochs=None, output='coo'))\n"
        "for _ in range(5):\n"
        "    next(it)\n"
        "print('READ', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, shard_dirs["parquet"]],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(HERE),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["READ"]


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("SPARSEFLOW_SKIP_MULTIWORKER") == "1",
    reason="two worker processes (10-40 s on 2 busy cores); skipped on request (SPARSEFLOW_SKIP_MULTIWORKER=1)",
)
def test_two_multi_worker_mirrored_workers_on_localhost_split_the_data(shard_dirs):
    cluster = {"worker": [f"localhost:{p}" for p in _free_ports(2)]}
    procs = [
        _start(["mwms", shard_dirs["parquet"]], {"cluster": cluster, "task": {"type": "worker", "index": i}})
        for i in range(2)
    ]
    results = sorted((_result(p) for p in procs), key=lambda r: r["task"])
    assert [r["workers"] for r in results] == [2, 2]
    first, second = (set(r["labels"]) for r in results)
    assert first and second and not first & second
    assert sorted(results[0]["labels"] + results[1]["labels"]) == list(range(150))


def test_dlpack_hand_over_aliases_aligned_arrays_and_copies_others():
    from transforms.tfdata.columnar.batch_arrays import Arena

    aligned = Arena([(4, np.dtype(np.int64))]).arrays[0]
    aligned[:] = [1, 2, 3, 4]
    tensor = _tensor(aligned)
    aligned[0] = 99  # the tensor sees it: same memory, no copy
    assert tensor.numpy().tolist() == [99, 2, 3, 4]
    odd = np.arange(9, dtype=np.int64)[1:]
    copied = _tensor(odd)
    odd[0] = -1
    assert copied.numpy()[0] == 1


def test_bad_arguments_are_refused_with_clear_messages(shard_dirs, tmp_path):
    with pytest.raises(ValueError, match="output must be one of"):
        make_dataset(shard_dirs["parquet"], 8, output="dense")
    with pytest.raises(ValueError, match="capacities pad COO batches"):
        make_dataset(shard_dirs["parquet"], 8, output="ragged", capacities={"user": 4})
    with pytest.raises(ValueError, match="need Parquet or Arrow shards"):
        make_dataset(shard_dirs["tfrecord"], 8, return_position=True)
    with pytest.raises(ValueError, match="needs the seed"):
        make_dataset(shard_dirs["parquet"], 8, start=InputState(0, 0, 0, 1))
    with pytest.raises(ValueError, match="no input files match"):
        make_dataset(str(tmp_path), 8)
    with pytest.raises(ValueError, match="feature 'nope' is not in the schema"):
        make_dataset(shard_dirs["parquet"], 8, features=["nope"])
    with pytest.raises(ValueError, match="no capacity for feature"):
        make_dataset(shard_dirs["parquet"], 8, capacities={"user": 4})


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord", "arrow"])
def test_padding_of_a_last_partial_batch_points_at_its_own_row_count(shard_dirs, fmt):
    ds = make_dataset(shard_dirs[fmt], 64, shuffle=False, capacities={"user": 64, "items": 400})
    *_, (features, label) = list(ds)
    rows = int(label.shape[0])
    assert rows == 150 - 2 * 64
    assert_entries(features["items"], pad(reference_coo(ROWS[128:], "items", weighted=True), 400, rows)[0])
    assert features["items"].row_ids.shape == [400]


def _wait_until_released(ref, seconds=10.0):
    import gc
    import time

    deadline = time.monotonic() + seconds
    while ref() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return ref() is None


def test_a_dropped_parquet_dataset_releases_its_reader_and_decoded_row_groups(shard_dirs):
    import gc
    import weakref

    from transforms.tfdata.columnar.reader import ColumnarSource

    def readers():
        return {id(o): o for o in gc.get_objects() if isinstance(o, ColumnarSource)}

    before = readers()
    ds = make_dataset(shard_dirs["parquet"], 16, shuffle=False, output="ragged")
    (reader,) = [weakref.ref(o) for key, o in readers().items() if key not in before]
    it = iter(ds)
    next(it)
    next(it)
    del ds, it
    # TensorFlow keeps every eager-built py_function for the life of the process; the reader
    # (and its decoded row groups) must not ride along with it.
    assert _wait_until_released(reader)


def test_an_iterator_keeps_the_reader_of_a_dataset_it_outlives(shard_dirs):
    import gc

    it = iter(make_dataset(shard_dirs["parquet"], 16, shuffle=False, output="ragged"))
    gc.collect()
    rows = []
    for features, label in it:
        rows += batch_rows(features, label)
    assert rows == ROWS
