"""A plain-Python reference of the convert_to_coo contract, and hypothesis batches to feed it.

Written from the contract text, one id at a time, with float64 sums; it
shares no code with `ops`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import strategies as st

# Dyadic weights (and zero) sum exactly in float32 and float64, so "the row sum is 0"
# means the same thing to the reference and to the code under test.
EXACT_WEIGHTS = (-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0)


def reference_coo(rows, ids, weights, sample_count: int, combiner: str):
    """rows: the row of each id; weights: one float per id. Returns (rows, ids, gains) arrays."""
    out_rows, out_ids, out_gains = [], [], []
    row_total = [0.0] * sample_count
    for r, i, w in zip(rows, ids, weights):
        r, i, w = int(r), int(i), float(w)
        row_total[r] += w if combiner == "mean" else w * w
        if out_rows and out_rows[-1] == r and out_ids[-1] == i:
            out_gains[-1] += w
        else:
            out_rows.append(r)
            out_ids.append(i)
            out_gains.append(w)
    if combiner != "sum":
        scale = []
        for total in row_total:
            if total == 0:
                scale.append(0.0)
            else:
                scale.append(1.0 / total if combiner == "mean" else 1.0 / math.sqrt(total))
        out_gains = [g * scale[r] for r, g in zip(out_rows, out_gains)]
    return (
        np.array(out_rows, dtype=np.int64),
        np.array(out_ids, dtype=np.int64),
        np.array(out_gains, dtype=np.float64),
    )


def assert_coo_equal(got, expected, id_dtype) -> None:
    """Ids exactly (and their dtypes), gains within float32 rounding."""
    rows, cols, gains = (t.numpy() if hasattr(t, "numpy") else np.asarray(t) for t in got)
    want_rows, want_cols, want_gains = expected
    assert rows.dtype == np.int32
    assert cols.dtype == np.dtype(id_dtype)
    assert gains.dtype == np.float32
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(cols, want_cols)
    np.testing.assert_allclose(gains, want_gains, rtol=1e-5, atol=1e-6)


@dataclasses.dataclass
class Batch:
    """A random id batch described once, convertible to every input kind."""

    lengths: list[int]
    ids: np.ndarray
    weights: np.ndarray  # one float32 per id (a shared weight repeated, when `shared` is set)
    shared: float | None  # the single weight every id has, or None for per-id weights

    @property
    def sample_count(self) -> int:
        return len(self.lengths)

    @property
    def rows(self) -> np.ndarray:
        return np.repeat(np.arange(self.sample_count), self.lengths)

    def row_splits(self, dtype=np.int64) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(dtype)

    def sparse_indices(self, dtype=np.int64) -> np.ndarray:
        rows = self.rows
        cols = np.arange(len(rows)) - np.repeat(self.row_splits()[:-1], self.lengths)
        return np.stack([rows, cols], axis=1).astype(dtype).reshape(-1, 2)

    def reference(self, combiner: str):
        return reference_coo(self.rows, self.ids, self.weights, self.sample_count, combiner)


@st.composite
def batches(draw, *, dense: bool = False, max_rows: int = 8) -> Batch:
    """Small batches rich in the cases that matter: runs of equal ids, empty rows, zero-weight rows."""
    sample_count = draw(st.integers(0, max_rows))
    if dense:
        lengths = [1] * sample_count
    else:
        lengths = draw(st.lists(st.integers(0, 6), min_size=sample_count, max_size=sample_count))
    n = sum(lengths)
    id_dtype = draw(st.sampled_from([np.int32, np.int64]))
    # A 3-letter alphabet makes adjacent duplicates (within and across rows) common;
    # the offset puts ids near the top of the dtype's range.
    offset = (
        draw(st.sampled_from([0, 2**31 - 8])) if id_dtype == np.int32 else draw(st.sampled_from([0, 2**40]))
    )
    ids = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64) + offset
    ids = ids.astype(id_dtype)
    exact = draw(st.booleans())
    if draw(st.booleans()):
        w = draw(st.sampled_from(EXACT_WEIGHTS)) if exact else draw(st.floats(0.015625, 100.0, width=32))
        return Batch(lengths, ids, np.full(n, w, dtype=np.float32), float(w))
    if exact:
        weights = draw(st.lists(st.sampled_from(EXACT_WEIGHTS), min_size=n, max_size=n))
    else:
        weights = draw(st.lists(st.floats(0.015625, 100.0, width=32), min_size=n, max_size=n))
    weights = np.array(weights, dtype=np.float32)
    zero_rows = draw(st.sets(st.integers(0, max(sample_count - 1, 0)), max_size=2))
    splits = np.concatenate([[0], np.cumsum(lengths)])
    for r in zero_rows:
        if r < sample_count:
            weights[splits[r] : splits[r + 1]] = 0.0
    return Batch(lengths, ids, weights, None)
