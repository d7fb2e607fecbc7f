"""gather_rows: the same rows as `Table.take` (the reference), whether it slices runs or takes."""

import numpy as np
import pyarrow as pa
import pytest

from transforms.beam.shard_spill import gather_rows


def _table(n):
    rng = np.random.default_rng(n)
    ids = [None if rng.random() < 0.1 else rng.integers(0, 9, rng.integers(0, 4)).tolist() for _ in range(n)]
    return pa.table({"x": np.arange(n), "ids": pa.array(ids, pa.list_(pa.int64())),
                     "s": pa.array([f"v{i}" if i % 7 else None for i in range(n)])})


@pytest.mark.parametrize("rows", [
    np.arange(5000),                                                          # one run
    np.concatenate([np.arange(3000, 5000), np.arange(0, 1000), np.arange(1000, 3000)]),  # whole batches reordered
    np.concatenate([np.arange(4000, 4500), np.arange(100, 900)]),             # a subset in runs
    np.random.default_rng(3).permutation(5000),                              # a shuffle: taken
    np.array([7]),
    np.array([], np.int64),
])
def test_gather_rows_equals_take(rows):
    table = _table(5000)
    got = gather_rows(table, rows)
    assert got.schema == table.schema
    assert got.to_pydict() == table.take(pa.array(rows, pa.int64())).to_pydict()
