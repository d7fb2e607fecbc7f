"""make_dataset over Arrow shards: every feature equal, element by element, to the Parquet path on the same rows.

Both directories hold the same rows in the same files with the same unit size
(Parquet row groups, Arrow record batches of 20 rows), so the two readers plan
the same units and must deliver the same batches, whatever the options.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from oracles import capacity_max
from tfdata_data import SCHEMA, random_rows, write_arrow_shards, write_parquet_shards

from sparse_io.manifest import commit_directory
from transforms import InputState, distribute, make_dataset

ROWS = random_rows(170, seed=8)
UNIT = 20


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("arrow_vs_parquet")
    out = {}
    for fmt, write in (("parquet", write_parquet_shards), ("arrow", write_arrow_shards)):
        directory = str(root / fmt)
        write(directory, ROWS, 3, UNIT)
        stats = {
            "format_version": 1,
            "num_rows": len(ROWS),
            "features": {
                f: {
                    "rows": len(ROWS),
                    # A p99_9 far below the max, so that overflow="drop" drops.
                    "capacity": {"16": {"max": capacity_max([len(r[f]) for r in ROWS], 16), "p99_9": 6}},
                }
                for f in ("user", "items")
            },
        }
        with open(os.path.join(directory, "stats.json"), "w") as f:
            json.dump(stats, f)
        commit_directory(directory)
        out[fmt] = directory
    return out


def _flat(element) -> list[np.ndarray]:
    return [np.asarray(t) for t in tf.nest.flatten(element, expand_composites=True)]


def _assert_same(parquet_ds, arrow_ds, *, positions: bool = False) -> int:
    assert arrow_ds.element_spec == parquet_ds.element_spec
    count = 0
    for a, b in zip(parquet_ds, arrow_ds, strict=True):
        count += 1
        if positions:
            # The position's last field fingerprints the plan, file names included: it differs by
            # format on purpose (a position resumes the files it was read from); the rest must agree.
            *a, position_a = a
            *b, position_b = b
            np.testing.assert_array_equal(np.asarray(position_a)[:3], np.asarray(position_b)[:3])
        for x, y in zip(_flat(a), _flat(b), strict=True):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
    return count


OPTIONS = {
    "coo ordered": dict(batch_size=16, shuffle=False),
    "coo shuffled two epochs": dict(batch_size=16, shuffle=True, seed=4, num_epochs=2),
    "ragged shuffled": dict(batch_size=7, output="ragged", seed=11),
    "sparse": dict(batch_size=32, output="sparse", shuffle=False),
    "mean combiner, one feature": dict(batch_size=16, features=["items"], combiner="mean", seed=2),
    "capacities, static shapes": dict(batch_size=16, capacities="stats", drop_remainder=True, seed=3),
    "worker 1 of 2 (whole files)": dict(batch_size=16, num_shards=2, index=1, seed=5),
    "worker 3 of 4 (row ranges)": dict(batch_size=8, num_shards=4, index=3, seed=5),
    "positions": dict(batch_size=16, return_position=True, seed=9),
    "no label": dict(batch_size=16, label=False, shuffle=False),
}


@pytest.mark.parametrize("case", list(OPTIONS))
def test_arrow_batches_equal_parquet_batches(dirs, case):
    args = OPTIONS[case]
    batches = _assert_same(
        make_dataset(dirs["parquet"], **args),
        make_dataset(dirs["arrow"], **args),
        positions=args.get("return_position", False),
    )
    assert batches > 0


def test_dropped_entries_are_counted_alike(dirs):
    counts = {}
    for fmt in ("parquet", "arrow"):
        dropped = tf.Variable(0, dtype=tf.int64)
        ds = make_dataset(dirs[fmt], 16, capacities="stats", capacity_kind="p99_9", overflow="drop",
                          dropped=dropped, seed=1)
        for _ in ds:
            pass
        counts[fmt] = int(dropped.numpy())
    assert counts["arrow"] == counts["parquet"] > 0


def test_a_resumed_arrow_dataset_goes_on_where_it_stopped(dirs):
    args = dict(batch_size=16, seed=6, num_epochs=2, return_position=True, output="ragged")
    whole = [_flat(e) for e in make_dataset(dirs["arrow"], **args)]
    iterator = iter(make_dataset(dirs["arrow"], **args))
    for _ in range(7):
        *_, position = next(iterator)
    rest = [_flat(e) for e in make_dataset(dirs["arrow"], start=InputState.from_tensor(position), **args)]
    assert len(rest) == len(whole) - 7
    for x, y in zip(whole[7:], rest, strict=True):
        for a, b in zip(x, y, strict=True):
            np.testing.assert_array_equal(a, b)


def test_an_arrow_iterator_checkpoint_restores_the_rest(dirs, tmp_path):
    args = dict(batch_size=16, seed=6, num_epochs=2, output="ragged")
    iterator = iter(make_dataset(dirs["arrow"], **args))
    for _ in range(5):
        next(iterator)
    tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "ckpt"))
    expected = [_flat(e) for e in iterator]
    again = iter(make_dataset(dirs["arrow"], **args))
    tf.train.Checkpoint(iterator=again).read(str(tmp_path / "ckpt")).assert_consumed()
    got = [_flat(e) for e in again]
    assert len(got) == len(expected) > 0
    for x, y in zip(expected, got, strict=True):
        for a, b in zip(x, y, strict=True):
            np.testing.assert_array_equal(a, b)


def test_format_arrow_is_taken_by_name_and_schema_json_may_be_absent(dirs, tmp_path):
    files = sorted(os.path.join(dirs["arrow"], f) for f in os.listdir(dirs["arrow"]) if f.endswith(".arrow"))
    named = make_dataset(files, 16, format="arrow", shuffle=False, verify="none", schema=SCHEMA)
    _assert_same(make_dataset(dirs["parquet"], 16, shuffle=False), named)
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in files:
        os.link(path, bare / os.path.basename(path))
    # Without schema.json the schema comes from the files' Arrow schema, as for Parquet.
    guessed = make_dataset(str(bare), 16, shuffle=False, verify="none", features=["user", "items"])
    assert set(guessed.element_spec[0]) == {"user", "items"}


def test_distribute_refuses_arrow_shards_the_python_reader_reads(dirs):
    # Decided from what make_dataset recorded: no service is contacted. (CSR output: the op reads COO only.)
    ds = make_dataset(dirs["arrow"], 16, output="ragged")
    with pytest.raises(ValueError, match=r"reads Arrow shards through a tf.py_function \(CSR output"):
        distribute(ds, "grpc://localhost:1")
