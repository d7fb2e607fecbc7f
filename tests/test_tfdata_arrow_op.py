"""The native Arrow dataset op against the Python reader: the same elements, element by element.

The same directory is read twice, once by the op (what make_dataset picks for Arrow shards read in
order as COO) and once by the Python reader (forced with `python_arrow_reader`), over the options
the op reads: batch sizes, drop_remainder, epochs, combiners, capacities with overflow, sharding,
start= and positions. Each case first checks the op really read it, so a silent fall back to the
Python reader fails here.
"""

import contextlib
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from oracles import capacity_max
from tfdata_data import random_rows, write_arrow_shards

from ops import _native
from sparse_io.arrow_shards import ArrowShard
from sparse_io.manifest import commit_directory
from transforms import InputState, make_dataset
from transforms.tfdata.columnar.arrow_op import python_arrow_reader

pytestmark = pytest.mark.skipif(
    _native.library() is None or not hasattr(_native.library(), "sparseflow_arrow_dataset"),
    reason="the native kernels are not built here",
)

ROWS = random_rows(170, seed=8)


def _write(directory: str, rows=ROWS, files: int = 3, record_batch: int = 20, batch: int = 16,
           p99_9: int = 6) -> str:
    """Arrow shards of `rows`, with a stats.json holding each feature's capacities for `batch` rows, committed."""
    write_arrow_shards(directory, rows, files, record_batch)
    stats = {
        "format_version": 1,
        "num_rows": len(rows),
        "features": {
            f: {"rows": len(rows),
                "capacity": {str(batch): {"max": capacity_max([len(r[f]) for r in rows], batch), "p99_9": p99_9}}}
            for f in ("user", "items")
        },
    }
    with open(os.path.join(directory, "stats.json"), "w") as f:
        json.dump(stats, f)
    commit_directory(directory)
    return directory


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return _write(str(tmp_path_factory.mktemp("arrow_op")))


def _reader(ds) -> str:
    return ds._sparseflow_parquet_source.reader


def _flat(element) -> list[np.ndarray]:
    return [np.asarray(t) for t in tf.nest.flatten(element, expand_composites=True)]


def _both(path, **args):
    """(op dataset, Python reader dataset) of the same arguments; the first checked to be the op's."""
    op = make_dataset(path, **args)
    assert _reader(op) == "op"
    with python_arrow_reader():
        python = make_dataset(path, **args)
    assert _reader(python).startswith("python")
    return op, python


def _assert_same(a_ds, b_ds) -> int:
    assert a_ds.element_spec == b_ds.element_spec
    count = 0
    for a, b in zip(a_ds, b_ds, strict=True):
        for x, y in zip(_flat(a), _flat(b), strict=True):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
        count += 1
    return count


CASES = {
    "in order": dict(batch_size=16),
    "batch 7, drop_remainder, 3 epochs": dict(batch_size=7, drop_remainder=True, num_epochs=3),
    "batch larger than a file": dict(batch_size=64, num_epochs=2),
    "mean combiner": dict(batch_size=16, combiner="mean"),
    "sqrtn combiner, items only": dict(batch_size=9, combiner="sqrtn", features=["items"]),
    "capacities, static shapes": dict(batch_size=16, capacities="stats", drop_remainder=True),
    "capacities p99_9, overflow drop": dict(batch_size=16, capacities="stats", capacity_kind="p99_9",
                                           overflow="drop"),
    "no label": dict(batch_size=16, label=False),
    "worker 1 of 2 (whole files)": dict(batch_size=16, num_shards=2, index=1),
    "worker 3 of 4 (row ranges)": dict(batch_size=8, num_shards=4, index=3),
    "balanced rows": dict(batch_size=8, num_shards=2, index=0, balance="rows"),
    "positions": dict(batch_size=16, return_position=True, num_epochs=2),
    "shuffled, two epochs": dict(batch_size=16, shuffle=True, seed=4, num_epochs=2),
    "shuffled worker 3 of 4 (row ranges), drop_remainder": dict(batch_size=8, shuffle=True, seed=5, num_shards=4,
                                                                index=3, drop_remainder=True, num_epochs=2),
    "shuffled positions": dict(batch_size=16, shuffle=True, seed=9, return_position=True, num_epochs=2),
    "verify checksums": dict(batch_size=16, verify="checksums"),
    "verify none": dict(batch_size=16, verify="none"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_op_gives_the_python_readers_elements(shards, case):
    op, python = _both(shards, **{"shuffle": False, **CASES[case]})
    assert _assert_same(op, python) > 0


@pytest.fixture(scope="module")
def large_shards(tmp_path_factory):
    """Batches of 4,500 rows x 4 columns: past the cells the op writes on one thread (arrow_dataset_op.cc)."""
    directory = str(tmp_path_factory.mktemp("arrow_op_large"))
    return _write(directory, random_rows(9_500, seed=3), 2, 2_000, 4_500, 9_000)


@pytest.mark.parametrize(
    "args",
    [dict(), dict(shuffle=True, seed=6, combiner="mean", num_epochs=2),
     dict(capacities="stats", capacity_kind="p99_9", overflow="drop", drop_remainder=True)],
    ids=["in order", "shuffled, mean, 2 epochs", "capacities, drop"],
)
def test_batches_written_by_several_threads_are_the_python_readers(large_shards, args):
    op, python = _both(large_shards, **{"batch_size": 4_500, "shuffle": False, **args})
    assert _assert_same(op, python) >= 2


def test_an_overflow_in_a_batch_written_by_several_threads_names_the_feature(large_shards):
    ds = make_dataset(large_shards, 4_500, shuffle=False, capacities={"user": 4_500, "items": 100})
    assert _reader(ds) == "op"
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"feature 'items' has \d+ COO entries, more than its "
                                                             r"capacity 100 \(raise the capacity"):
        next(iter(ds))


def test_dropped_entries_are_counted_alike(shards):
    counts = []
    for forced in (False, True):
        dropped = tf.Variable(0, dtype=tf.int64)
        args = dict(capacities="stats", capacity_kind="p99_9", overflow="drop", dropped=dropped, shuffle=False)
        if forced:
            with python_arrow_reader():
                ds = make_dataset(shards, 16, **args)
        else:
            ds = make_dataset(shards, 16, **args)
            assert _reader(ds) == "op"
        for _ in ds:
            pass
        counts.append(int(dropped.numpy()))
    assert counts[0] == counts[1] > 0


def test_endless_epochs_go_on_as_the_python_readers(shards):
    op, python = _both(shards, batch_size=16, shuffle=False, num_epochs=None)
    assert op.cardinality() == tf.data.INFINITE_CARDINALITY
    assert _assert_same(op.take(40), python.take(40)) == 40  # 11 batches an epoch: into the fourth


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_resumed_op_dataset_goes_on_where_it_stopped(shards, shuffle):
    args = dict(batch_size=16, shuffle=shuffle, seed=6, num_epochs=2, return_position=True)
    whole = [_flat(e) for e in make_dataset(shards, **args)]
    iterator = iter(make_dataset(shards, **args))
    for _ in range(14):
        *_, position = next(iterator)
    start = InputState.from_tensor(position)
    op, python = _both(shards, start=start, **args)
    rest = [_flat(e) for e in op]
    assert len(rest) == len(whole) - 14 == _assert_same(op, python)
    for x, y in zip(whole[14:], rest, strict=True):
        for a, b in zip(x, y, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shuffle", [False, True])
def test_an_op_iterator_checkpoint_restores_the_rest(shards, tmp_path, shuffle):
    # Shuffled without a seed: each dataset draws its own; the checkpoint carries the first one's.
    args = dict(batch_size=16, shuffle=shuffle, num_epochs=2)
    first = make_dataset(shards, **args)
    assert _reader(first) == "op"
    iterator = iter(first)
    for _ in range(5):
        next(iterator)
    tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "ckpt"))
    expected = [_flat(e) for e in iterator]
    again = iter(make_dataset(shards, **args))
    tf.train.Checkpoint(iterator=again).read(str(tmp_path / "ckpt")).assert_consumed()
    got = [_flat(e) for e in again]
    assert len(got) == len(expected) == 22 - 5
    for x, y in zip(expected, got, strict=True):
        for a, b in zip(x, y, strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_input_graph_holds_the_op_and_no_python(shards):
    ds = make_dataset(shards, 16, shuffle=False)
    graph = tf.compat.v1.GraphDef.FromString(ds._as_serialized_graph().numpy())
    ops = {node.op for node in graph.node}
    ops |= {node.op for function in graph.library.function for node in function.node_def}
    assert "SparseflowArrowDataset" in ops
    assert not {op for op in ops if "PyFunc" in op}


@pytest.mark.parametrize(
    "args, why",
    [
        (dict(shuffle=False, output="ragged"), "CSR output"),
    ],
)
def test_what_the_op_does_not_read_falls_back_to_the_python_reader_saying_why(shards, args, why):
    ds = make_dataset(shards, 16, **args)
    assert _reader(ds).startswith("python (") and why in _reader(ds)
    assert sum(1 for _ in ds) == 11


def _copy(shards, tmp_path) -> str:
    directory = str(tmp_path / "copy")
    shutil.copytree(shards, directory)
    return directory


def test_a_shard_replaced_after_the_dataset_was_made_is_refused(shards, tmp_path):
    directory = _copy(shards, tmp_path)
    ds = make_dataset(directory, 16, shuffle=False)
    path = os.path.join(directory, sorted(f for f in os.listdir(directory) if f.endswith(".arrow"))[1])
    shutil.copyfile(path, path + ".new")
    os.replace(path + ".new", path)  # the same bytes, another file
    with pytest.raises(tf.errors.FailedPreconditionError, match="replaced or changed since it was verified"):
        for _ in ds:
            pass


def _flip_a_price(path: str, record_batch: int) -> None:
    """Flips a bit of a value of `price` in a record batch: the same size, another value."""
    with ArrowShard(path) as shard:
        base, _ = shard.mapped_range()
        array = shard.read_unit(record_batch, ["price"])["price"].chunk(0)
        at = array.buffers()[1].address - base
    data = bytearray(open(path, "rb").read())
    data[at + 1] ^= 0x10
    open(path, "wb").write(bytes(data))


def test_a_damaged_record_batch_is_refused_with_the_python_readers_message(shards, tmp_path):
    directory = _copy(shards, tmp_path)
    path = os.path.join(directory, sorted(f for f in os.listdir(directory) if f.endswith(".arrow"))[0])
    _flip_a_price(path, 1)
    messages = []
    for forced in (False, True):
        with python_arrow_reader() if forced else contextlib.nullcontext():
            ds = make_dataset(directory, 16, shuffle=False)  # nothing read yet: the damage is found at the read
        assert _reader(ds).startswith("python") == forced
        read = []
        with pytest.raises(tf.errors.InvalidArgumentError) as refused:
            for _, label in ds:
                read += label.numpy().tolist()
        assert read == list(range(16))  # the batch of record batch 0 only: the next reads record batch 1
        messages.append(refused.value.message)
    expected = re.escape(path) + r": record batch 1: checksum [0-9a-f]{8} differs from the stored [0-9a-f]{8}"
    found = [re.search(expected, m) for m in messages]
    assert all(found) and found[0].group(0) == found[1].group(0)


def test_a_shard_replaced_between_two_iterators_of_one_dataset_is_refused_by_the_second(shards, tmp_path):
    directory = _copy(shards, tmp_path)
    ds = make_dataset(directory, 16, shuffle=False)
    assert sum(1 for _ in ds) == 11  # maps and checks every shard, for the dataset's life
    path = os.path.join(directory, sorted(f for f in os.listdir(directory) if f.endswith(".arrow"))[1])
    shutil.copyfile(path, path + ".new")
    os.replace(path + ".new", path)
    with pytest.raises(tf.errors.FailedPreconditionError, match="replaced or changed since it was verified"):
        for _ in ds:
            pass


@pytest.mark.parametrize("forced", [False, True], ids=["op", "python reader"])
def test_a_record_batch_damaged_in_place_between_two_iterators_is_refused_by_the_second(shards, tmp_path, forced):
    """Written in place with its mtime set back: the pin (size, mtime, inode) holds, the bytes do not."""
    directory = _copy(shards, tmp_path)
    with python_arrow_reader() if forced else contextlib.nullcontext():
        ds = make_dataset(directory, 16, shuffle=False)
    assert _reader(ds).startswith("python") == forced
    assert sum(1 for _ in ds) == 11
    path = os.path.join(directory, sorted(f for f in os.listdir(directory) if f.endswith(".arrow"))[0])
    before = os.stat(path)
    _flip_a_price(path, 1)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(path) + r": record batch 1: checksum"):
        for _ in ds:
            pass


def test_the_real_criteo_sample_reads_alike_through_the_op_and_the_python_reader(criteo_data_dir, tmp_path):
    from transforms.testing import ingest_in_memory

    lines = []
    for path in sorted(criteo_data_dir.glob("criteo_paddlerec*.tsv")):
        lines += [line for line in path.read_text().splitlines() if line]
    directory = str(tmp_path / "criteo")
    config = {
        "input": {"format": "criteo"},
        "features": {"C*": {"hash_buckets": 1000}},
        "output": {"format": "arrow", "num_shards": 2, "row_group_size": 64},
    }
    ingest_in_memory(lines, config, output_dir=directory)
    for args in (dict(shuffle=False, combiner="mean"), dict(shuffle=True, seed=7, num_epochs=2, drop_remainder=True)):
        op, python = _both(directory, batch_size=48, **args)
        assert _assert_same(op, python) >= 6


def test_compressed_shards_fall_back_to_the_python_reader_saying_why(tmp_path):
    from tfdata_data import SCHEMA, to_table

    from sparse_io import shard_name, write_arrow_shard

    directory = tmp_path / "lz4"
    directory.mkdir()
    write_arrow_shard(str(directory / shard_name(0, 1, ".arrow")), [to_table(ROWS)], SCHEMA, record_batch_size=50,
                      compression="lz4")
    SCHEMA.save(str(directory))
    commit_directory(str(directory))
    ds = make_dataset(str(directory), 16, shuffle=False)
    assert _reader(ds).startswith("python (") and "compressed" in _reader(ds)
    with python_arrow_reader():
        assert _assert_same(ds, make_dataset(str(directory), 16, shuffle=False)) == 11


def test_more_shards_than_the_plan_keeps_open_read_alike(tmp_path):
    directory = str(tmp_path / "many")
    write_arrow_shards(directory, ROWS, 12, 8)  # 12 shards: the plan holds 8 open at once
    for args in (dict(shuffle=False), dict(shuffle=True, seed=1, num_shards=2, index=1, balance="rows")):
        op, python = _both(directory, batch_size=10, **args)
        assert _assert_same(op, python) > 0


def test_a_plan_naming_bytes_past_a_file_is_refused_by_the_op(shards):
    from transforms.tfdata.columnar import arrow_op

    source = make_dataset(shards, 16, shuffle=False)._sparseflow_parquet_source
    plan = arrow_op._plan(source, None)
    element = arrow_op.OpElement(None, "error", False, None)
    dataset, reader = arrow_op.arrow_op_batches(source, None, 1, element)
    assert reader == "op" and sum(1 for _ in dataset) == 11
    size = int(plan["identities"][0, 0])
    bad = dict(plan, lists=plan["lists"].copy())
    bad["lists"][0, 0, 5] = size - 4  # the first unit's first feature's ids: their last bytes past the file
    bad["settings"] = np.array([16, 0, 1, 0, 0, 0, 0, 0, 0], np.int64)
    attrs = dataset._attrs
    good = dict(plan, settings=bad["settings"])
    assert sum(1 for _ in arrow_op._ArrowOpDataset(arrow_op._library(), good, attrs, dataset.element_spec)) == 11
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"record batch 0: column 'user': the plan names ids past"):
        arrow_op._ArrowOpDataset(arrow_op._library(), bad, attrs, dataset.element_spec)


def test_int32_ids_float64_and_int64_dense_columns_with_nulls_and_a_real_label_read_alike(tmp_path):
    import pyarrow as pa

    from sparse_io import shard_name, write_arrow_shard
    from sparse_io.schema import FeatureSpec, Schema

    schema = Schema([
        FeatureSpec("y", "label", "float32", label_type="real"),
        FeatureSpec("a", "sparse", "int32"),
        FeatureSpec("d", "dense", "float64"),
        FeatureSpec("n", "dense", "int64"),
    ])
    rng = np.random.default_rng(4)
    rows = 90
    columns = {
        "y": [float(v) for v in rng.random(rows)],
        "a": [rng.integers(0, 30, int(k)).tolist() for k in rng.integers(0, 4, rows)],
        "d": [None if rng.random() < 0.3 else float(v) for v in rng.random(rows)],
        "n": [None if rng.random() < 0.3 else int(v) for v in rng.integers(-5, 5, rows)],
    }
    directory = tmp_path / "types"
    directory.mkdir()
    table = pa.table(columns, schema=schema.arrow_schema())
    write_arrow_shard(str(directory / shard_name(0, 1, ".arrow")), [table], schema, record_batch_size=25)
    schema.save(str(directory))
    commit_directory(str(directory))
    for args in (dict(shuffle=False, combiner="sqrtn"), dict(shuffle=True, seed=2, drop_remainder=True)):
        op, python = _both(str(directory), batch_size=16, **args)
        assert _assert_same(op, python) >= 5
    features, _ = next(iter(make_dataset(str(directory), 16, shuffle=False)))
    assert features["a"].col_ids.dtype == tf.int32 and features["n"].dtype == tf.int64
    assert features["d"].dtype == tf.float64 and np.isnan(features["d"].numpy()).any()
    assert (features["n"].numpy() == np.iinfo(np.int64).min).any()  # a missing integer
