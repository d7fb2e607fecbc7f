"""Plain references for the three rules the input stage implements: COO, padding and capacity.

Each function is written from the contract text (the docstrings of
`ops.convert_to_coo`, `ops.pad_coo`, `transforms.beam.stats` and
`transforms.capacity_from_stats`) with Python loops over Python numbers,
float64 sums and exact fractions, so that it is slow and obviously right. It
imports nothing from the package: a test that compares a fast path with an
oracle compares it with the contract, not with another fast path.

The COO rule, for one feature of a batch of rows:
  walk the rows in order and the ids of each row in order; an id equal to
  the id just before it in the same row merges into that entry (its gain is
  the sum of their weights); otherwise it starts a new entry (row, id,
  weight). Only adjacent duplicates merge. Row ids are positions within the
  batch (0..B-1), whatever feature or piece of a shard the row came from.
  "sum" scales nothing; "mean" multiplies every gain of row r by 1 / sum(w),
  "sqrtn" by 1 / sqrt(sum(w^2)), the sums over all of row r's weights
  before merging, and 0 where that sum is 0.

The padding rule: the first `capacity` entries are kept (more is an error
with overflow="error"; with "drop" the rest are dropped and counted), then
padding entries (row = sample_count, col = 0, gain = 0) fill up to capacity.

The capacity rule (stats.json): `max` for batches of b rows is the sum of
the b largest row lengths; `p99_9` is the 0.999 quantile (the smallest total
t with P(total <= t) >= 0.999) of the ids in b rows drawn without
replacement. When stats.json has no entry for b, the capacity used is the
smallest of: a larger size's max, ceil(b / size) times a smaller size's max,
and b times the most ids in a row (`capacity_for`).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

import numpy as np

COMBINERS = ("sum", "mean", "sqrtn")


class Entries(NamedTuple):
    """COO entries as Python lists: row ids, col ids, gains (float64)."""

    row_ids: list
    col_ids: list
    gains: list


def _row_weights(rows: Sequence[Sequence[int]], weights) -> list[list[float]]:
    """Per-id weights as lists shaped like `rows`: None means 1.0, a number means that weight for every id."""
    if weights is None or isinstance(weights, numbers.Real):
        w = 1.0 if weights is None else float(weights)
        return [[w] * len(row) for row in rows]
    if len(weights) != len(rows):
        raise ValueError(f"{len(weights)} weight rows for {len(rows)} id rows")
    out = []
    for r, (row, ws) in enumerate(zip(rows, weights)):
        if len(ws) != len(row):
            raise ValueError(f"row {r}: {len(ws)} weights for {len(row)} ids")
        out.append([float(w) for w in ws])
    return out


def _scale(ws: list[float], combiner: str) -> float:
    """The factor every gain of a row with weights `ws` is multiplied by."""
    if combiner == "sum":
        return 1.0
    if combiner == "mean":
        total = 0.0
        for w in ws:
            total += w
        return 0.0 if total == 0 else 1.0 / total
    total = 0.0
    for w in ws:
        total += w * w
    return 0.0 if total == 0 else 1.0 / math.sqrt(total)


def coo(rows: Sequence[Sequence[int]], weights=None, combiner: str = "sum") -> Entries:
    """The COO entries of one feature for a batch of rows.

    Args:
      rows: the ids of each row, in order (a list of lists of ints).
      weights: None (every id weighs 1.0), one number (every id weighs it),
        or per-id weights shaped like `rows`.
      combiner: "sum", "mean" or "sqrtn".

    Example: `coo([[7, 7, 2], [], [5]], None, "mean")` is rows [0, 0, 2],
    cols [7, 2, 5], gains [2/3, 1/3, 1.0].
    """
    if combiner not in COMBINERS:
        raise ValueError(f"unknown combiner {combiner!r}")
    out = Entries([], [], [])
    for r, (row, ws) in enumerate(zip(rows, _row_weights(rows, weights))):
        scale = _scale(ws, combiner)
        start = len(out.row_ids)
        previous = None
        for position, (i, w) in enumerate(zip(row, ws)):
            i = int(i)
            if position > 0 and i == previous:
                out.gains[-1] += w
            else:
                out.row_ids.append(r)
                out.col_ids.append(i)
                out.gains.append(w)
            previous = i
        for k in range(start, len(out.gains)):
            out.gains[k] = out.gains[k] * scale
    return out


def csr_rows(row_splits: Sequence[int], values: Sequence) -> list[list]:
    """CSR (row_splits [S + 1], values [N]) as a list of S rows of values."""
    rows = []
    for r in range(len(row_splits) - 1):
        rows.append([values[k] for k in range(int(row_splits[r]), int(row_splits[r + 1]))])
    return rows


def coo_of_csr(row_splits: Sequence[int], ids: Sequence[int], weights=None, combiner: str = "sum") -> Entries:
    """`coo` of a CSR batch; `weights` None, one number, or per-id `[N]` weights."""
    rows = csr_rows(row_splits, [int(i) for i in ids])
    if weights is None or isinstance(weights, numbers.Real):
        return coo(rows, weights, combiner)
    return coo(rows, csr_rows(row_splits, [float(w) for w in weights]), combiner)


def coo_of_row_lengths(lengths: Sequence[int], ids: Sequence[int], weights=None, combiner: str = "sum") -> Entries:
    """`coo` of rows given by their lengths over flat ids (and flat per-id weights, or one number)."""
    splits = [0]
    for n in lengths:
        splits.append(splits[-1] + int(n))
    return coo_of_csr(splits, ids, weights, combiner)


def pad(entries, capacity: int, sample_count: int, overflow: str = "error") -> tuple[Entries, int]:
    """The padding rule: `(padded entries, dropped count)`.

    Raises:
      OverflowError: more entries than `capacity` with overflow="error".
    """
    row_ids, col_ids, gains = (list(t) for t in entries[:3])
    if len(row_ids) > capacity and overflow == "error":
        raise OverflowError(f"{len(row_ids)} entries, capacity {capacity}")
    kept = min(len(row_ids), capacity)
    out = Entries([int(v) for v in row_ids[:kept]], [int(v) for v in col_ids[:kept]], [float(g) for g in gains[:kept]])
    for _ in range(capacity - kept):
        out.row_ids.append(int(sample_count))
        out.col_ids.append(0)
        out.gains.append(0.0)
    return out, len(row_ids) - kept


def bags(table, entries, sample_count: int) -> list[list[float]]:
    """Embedding bags of COO entries: out[r] = sum of gain * table[col] over the entries of row r < sample_count."""
    dim = len(table[0]) if len(table) else 0
    out = [[0.0] * dim for _ in range(sample_count)]
    for r, c, g in zip(*entries[:3]):
        if int(r) < sample_count:
            for d in range(dim):
                out[int(r)][d] += float(g) * float(table[int(c)][d])
    return out


def capacity_max(row_lengths: Sequence[int], batch_size: int) -> int:
    """stats.json's `max`: the sum of the `batch_size` largest row lengths."""
    return sum(sorted((int(n) for n in row_lengths), reverse=True)[:batch_size])


def capacity_quantile(row_lengths: Sequence[int], batch_size: int, q: Fraction = Fraction(999, 1000)) -> int:
    """The exact q-quantile of the ids in `batch_size` rows drawn without replacement.

    Enumerates every subset of rows, so it is for a handful of rows only.
    """
    lengths = [int(n) for n in row_lengths]
    if batch_size >= len(lengths):
        return sum(lengths)
    totals = sorted(sum(c) for c in itertools.combinations(lengths, batch_size))
    for k, total in enumerate(totals):
        if Fraction(k + 1, len(totals)) >= q:
            return total
    return totals[-1]


def capacity_for(entry: dict, batch_size: int, kind: str = "max") -> int:
    """The capacity of one stats.json feature entry for batches of `batch_size` rows.

    The exact entry when stats.json has one; for "max" otherwise the
    smallest of the bounds the other sizes and `ids_per_row.max` give.

    Raises:
      KeyError: `kind` other than "max" with no exact entry, or nothing to derive from.
    """
    table = {int(size): value for size, value in entry.get("capacity", {}).items()}
    if batch_size in table:
        return int(table[batch_size][kind])
    if kind != "max":
        raise KeyError(f"no {kind} entry for {batch_size}")
    bounds = []
    for size, value in table.items():
        windows = 1 if size >= batch_size else -(-batch_size // size)
        bounds.append(windows * int(value["max"]))
    most = entry.get("ids_per_row", {}).get("max")
    if most is not None:
        bounds.append(batch_size * int(most))
    if not bounds:
        raise KeyError("nothing to derive a capacity from")
    return min(bounds)


def assert_entries(got, want: Entries, *, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Row and col ids exactly, gains within float32 rounding; `got` holds tensors, arrays or lists."""
    rows, cols, gains = (np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in got[:3])
    assert rows.tolist() == list(want.row_ids), f"row ids {rows.tolist()} != {list(want.row_ids)}"
    assert cols.tolist() == list(want.col_ids), f"col ids {cols.tolist()} != {list(want.col_ids)}"
    np.testing.assert_allclose(gains.astype(np.float64), np.asarray(want.gains, np.float64), rtol=rtol, atol=atol)
