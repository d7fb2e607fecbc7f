"""BatchLayout: the Parquet reader's flat hand-over, named; RowPlan: batches as rows of units."""

import doctest
import importlib

import numpy as np
import pytest

from transforms.tfdata.columnar.batch_layout import BatchLayout, BatchParts
from transforms.tfdata.columnar.row_plan import RowPlan
from transforms.tfdata.core.columns import Column

A = Column("a", "sparse", "int64", weighted=True)
B = Column("b", "sparse", "int32")
X = Column("x", "dense", "float32")
T = Column("t", "dense", "int64")
Y = Column("y", "label", "float32")


def _parts(groups, dense, label):
    return BatchParts(groups, dense, label, np.array([2], np.int64), np.arange(4, dtype=np.int64))


@pytest.mark.parametrize("coo", [False, True])
def test_flatten_then_unflatten_gives_every_part_back_with_the_declared_dtypes(coo):
    layout = BatchLayout([A, B, X, T], Y, [[A], [B]], coo=coo)
    if coo:
        groups = [
            [np.array([0, 1], np.int32), np.array([5, 6], np.int64), np.ones(2, np.float32), np.array([2], np.int64)],
            [np.array([1], np.int32), np.array([7], np.int32), np.ones(1, np.float32), np.array([1], np.int64)],
        ]
    else:
        groups = [
            [np.array([0, 1, 2], np.int64), np.array([5, 6], np.int64), np.ones(2, np.float32)],
            [np.array([0, 0, 1], np.int64), np.array([7], np.int32)],
        ]
    dense = [np.array([0.5, 1.5], np.float32), np.array([3, 4], np.int64)]
    parts = _parts(groups, dense, np.array([1.0, 0.0], np.float32))
    flat = layout.flatten(parts)
    assert [a.dtype for a in flat] == layout.dtypes()
    back = layout.unflatten(flat)
    assert all(g is h for got, want in zip(back.groups, groups) for g, h in zip(got, want))
    assert back.dense[0] is dense[0] and back.dense[1] is dense[1]
    assert back.label is parts.label and back.rows is parts.rows and back.position is parts.position
    assert [d for d, _ in layout.dense_blocks] == ["float32", "int64"]


def test_without_a_label_there_is_no_label_array_and_a_wrong_length_is_refused():
    layout = BatchLayout([B], None, [[B]], coo=False)
    flat = layout.flatten(_parts([[np.array([0, 0, 1], np.int64), np.array([7], np.int32)]], [], None))
    assert len(flat) == 4 and layout.unflatten(flat).label is None
    with pytest.raises(ValueError, match="expected 4 arrays, got 3"):
        layout.unflatten(flat[:3])


def _rows_of(plan, epoch, begin, end):
    """The (unit, row) pairs of rows [begin, end) of an epoch, as the plan lays them out."""
    return [
        (unit, int(r))
        for unit, _, rows in plan.segments(epoch, begin, end)
        for r in (range(rows.start, rows.stop) if isinstance(rows, slice) else rows)
    ]


@pytest.mark.parametrize("shuffle", [False, True])
def test_an_epochs_batches_cover_every_row_of_every_unit_once(shuffle):
    unit_rows = np.array([3, 5, 2], np.int64)
    plan = RowPlan(unit_rows, 4, shuffle=shuffle, seed=7, drop_remainder=False, fingerprint=1)
    assert plan.num_batches(2) == 6
    seen = []
    for i in range(3):
        epoch, begin, end = plan.locate(i)
        assert epoch == 0 and end - begin == (4 if i < 2 else 2)
        seen += _rows_of(plan, epoch, begin, end)
    assert sorted(seen) == [(u, r) for u, n in enumerate(unit_rows) for r in range(n)]
    if not shuffle:
        assert seen[:4] == [(0, 0), (0, 1), (0, 2), (1, 0)]


def test_a_position_resumes_at_the_next_row():
    unit_rows = np.array([3, 5, 2], np.int64)
    plan = RowPlan(unit_rows, 4, shuffle=True, seed=3, drop_remainder=False, fingerprint=9)
    epoch, _, end = plan.locate(1)
    resumed = RowPlan(
        unit_rows, 4, shuffle=True, seed=3, drop_remainder=False, fingerprint=9, start=plan.position(epoch, end)
    )
    assert _rows_of(resumed, *resumed.locate(0)) == _rows_of(plan, *plan.locate(2))
    with pytest.raises(ValueError, match="another reading plan"):
        RowPlan(
            unit_rows, 4, shuffle=True, seed=3, drop_remainder=False, fingerprint=8, start=plan.position(epoch, end)
        )


def test_docstring_examples_run():
    for name in ("transforms.tfdata.columnar.batch_layout", "transforms.tfdata.columnar.batch_arrays"):
        results = doctest.testmod(importlib.import_module(name))
        assert results.attempted > 0 and results.failed == 0, name
