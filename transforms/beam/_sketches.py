"""Mergeable summaries for id statistics: row-length histograms, Misra-Gries counts, HyperLogLog.

All three are updated a batch at a time with numpy / pyarrow and merge
associatively, so they serve as Beam combiner accumulators. Where the native
helpers build, HyperLogLog's registers are updated by `sparseflow_hll_add`
(`sparse_io/native/raw_value_sums.cc`, numpy staying its reference) and the
counts live in a native id table (`transforms.beam._counts`).
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import pyarrow as pa

from sparse_io.hashing import fingerprint64
from transforms.beam._counts import CountTable

__all__ = ["LengthHistogram", "HyperLogLog", "BoundedCounts"]


class LengthHistogram:
    """Exact histogram of row lengths: sorted distinct lengths and their row counts.

    Example:
      >>> h = LengthHistogram(); h.add(np.array([0, 2, 2, 5]))
      >>> h.quantile(0.5), h.top_sum(2)
      (2.0, 7)
    """

    def __init__(self) -> None:
        self.lengths = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)

    @classmethod
    def of_counts(cls, lengths, counts) -> LengthHistogram:
        """The histogram of `counts[i]` rows of length `lengths[i]` each, without the rows."""
        lengths, counts = np.asarray(lengths, np.int64), np.asarray(counts, np.int64)
        h = cls()
        h._merge(lengths[counts > 0], counts[counts > 0])  # as `add` keeps them: only lengths some row has
        return h

    def add(self, row_lengths: np.ndarray) -> None:
        if row_lengths.size:
            counts = np.bincount(row_lengths)
            present = np.flatnonzero(counts)
            self._merge(present.astype(np.int64), counts[present].astype(np.int64))

    def merge(self, other: LengthHistogram) -> None:
        self._merge(other.lengths, other.counts)

    def _merge(self, lengths: np.ndarray, counts: np.ndarray) -> None:
        both = np.concatenate([self.lengths, lengths])
        unique, inverse = np.unique(both, return_inverse=True)
        self.lengths = unique
        self.counts = np.bincount(
            inverse, weights=np.concatenate([self.counts, counts]), minlength=len(unique)
        )
        self.counts = self.counts.astype(np.int64)

    @property
    def rows(self) -> int:
        return int(self.counts.sum())

    @property
    def total(self) -> int:
        return int((self.lengths * self.counts).sum())

    def quantile(self, q: float) -> float:
        """`np.percentile(all_row_lengths, 100 q)` (linear interpolation) without expanding the rows."""
        rows = self.rows
        if rows == 0:
            return 0.0
        position = q * (rows - 1)
        below, above = int(np.floor(position)), int(np.ceil(position))
        ends = np.cumsum(self.counts)
        low = self.lengths[np.searchsorted(ends, below, side="right")]
        high = self.lengths[np.searchsorted(ends, above, side="right")]
        return float(low + (high - low) * (position - below))

    def top_sum(self, b: int) -> int:
        """Sum of the `b` largest row lengths: no `b` rows, in any order, hold more ids."""
        lengths, counts = self.lengths[::-1], self.counts[::-1]
        taken = np.minimum(counts, np.maximum(b - (np.cumsum(counts) - counts), 0))
        return int((lengths * taken).sum())

    def random_batch_quantile(self, b: int, q: float, samples: int, seed: int) -> int:
        """The q-quantile of ids in `b` rows drawn at random without replacement.

        With at most two distinct row lengths (single-valued features: 0 or 1
        id) the count of longer rows is hypergeometric and the quantile is
        exact. Otherwise `samples` batches are drawn from the exact histogram
        (multivariate hypergeometric: how many rows of each length a batch holds).
        """
        rows = self.rows
        if rows == 0:
            return 0
        if b >= rows:
            return self.total
        if len(self.lengths) == 1:
            return int(self.lengths[0]) * b
        if len(self.lengths) == 2:
            short, long = (int(v) for v in self.lengths)
            k = _hypergeometric_quantile(int(self.counts[1]), rows, b, q)
            return short * b + (long - short) * k
        rng = np.random.default_rng(seed)
        totals = []
        chunk = max(1, 2_000_000 // max(len(self.counts), 1))
        for start in range(0, samples, chunk):
            size = min(chunk, samples - start)
            drawn = rng.multivariate_hypergeometric(self.counts, b, size=size)
            totals.append(drawn @ self.lengths)
        return int(np.quantile(np.concatenate(totals), q, method="higher"))


def _hypergeometric_quantile(successes: int, population: int, draws: int, q: float) -> int:
    """Smallest k with P(X <= k) >= q, X ~ Hypergeometric(population, successes, draws); exact pmf."""
    failures = population - successes
    lo, hi = max(0, draws - failures), min(draws, successes)
    k = np.arange(lo, hi, dtype=np.float64)
    # log P(k+1) - log P(k), accumulated from the lowest support point.
    step = np.log((successes - k) * (draws - k)) - np.log((k + 1) * (failures - draws + k + 1))
    log_pmf = np.concatenate([[0.0], np.cumsum(step)])
    pmf = np.exp(log_pmf - log_pmf.max())
    cdf = np.cumsum(pmf) / pmf.sum()
    return lo + int(np.searchsorted(cdf, q - 1e-12, side="left"))


def _mix64(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def sketch_keys(values: pa.Array) -> np.ndarray:
    """uint64 per value, before mixing: an integer's own bits, a string's Fingerprint64."""
    if pa.types.is_integer(values.type):
        return values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False).view(np.uint64)
    return fingerprint64(values)


@functools.cache
def _native_hll_add():
    from sparse_io import native_build

    p, i64 = ctypes.c_void_p, ctypes.c_int64
    return native_build.function("sparseflow_hll_add", [p, i64, p, i64], None)


class HyperLogLog:
    """Distinct-count sketch, 2**precision registers (precision 14: 0.81% standard error).

    Example:
      >>> s = HyperLogLog(); s.add(pa.array(np.arange(100_000)))
      >>> abs(s.estimate() - 100_000) < 3_000
      True
    """

    def __init__(self, precision: int = 14) -> None:
        self.precision = precision
        self.registers = np.zeros(1 << precision, dtype=np.uint8)

    @property
    def relative_error(self) -> float:
        return 1.04 / np.sqrt(len(self.registers))

    def add(self, values: pa.Array, *, native: bool = True) -> None:
        """Counts `values` (integers or strings, no nulls). `native=False` runs the numpy reference."""
        if not len(values):
            return
        keys = np.ascontiguousarray(sketch_keys(values))
        function = _native_hll_add() if native else None
        if function is not None:  # the same registers as the numpy below (tests/test_sketches.py)
            function(self.registers.ctypes.data, self.precision, keys.ctypes.data, len(keys))
            return
        h = _mix64(keys)
        p = np.uint64(self.precision)
        index = (h >> (np.uint64(64) - p)).astype(np.int64)
        rest = (h << p) | (np.uint64(1) << (p - np.uint64(1)))  # the guard bit bounds the rank
        # rank = leading zeros of `rest` + 1, from the bit length of its top 32 bits or, if zero, the low 32.
        high = (rest >> np.uint64(32)).astype(np.float64)
        low = (rest & np.uint64(0xFFFFFFFF)).astype(np.float64)
        high_bits = np.frexp(high)[1]
        low_bits = np.frexp(low)[1]
        rank = np.where(high > 0, 33 - high_bits, 65 - low_bits).astype(np.uint8)
        np.maximum.at(self.registers, index, rank)

    def merge(self, other: HyperLogLog) -> None:
        np.maximum(self.registers, other.registers, out=self.registers)

    def estimate(self) -> int:
        m = len(self.registers)
        alpha = 0.7213 / (1 + 1.079 / m)
        raw = alpha * m * m / np.sum(np.ldexp(1.0, -self.registers.astype(np.int64)))
        zeros = int((self.registers == 0).sum())
        if raw <= 2.5 * m and zeros:
            return int(round(m * np.log(m / zeros)))  # linear counting for small cardinalities
        return int(round(raw))


_COMPACT_IDS = 1 << 16


class BoundedCounts:
    """Id counts: exact up to `capacity` distinct ids, then a Misra-Gries summary plus HyperLogLog.

    While exact, `top` counts and `distinct` are exact. Past `capacity`
    distinct ids, the table keeps `capacity` counters: whenever it reaches
    twice that, the (capacity+1)-th largest count is subtracted from all and
    the non-positive ones dropped (a mergeable Misra-Gries summary), so each
    reported count is at most `max_undercount` below the truth
    (`max_undercount` <= ids / (capacity + 1)); `distinct` then comes from a
    HyperLogLog that saw every id.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.table = CountTable()
        self.sketch: HyperLogLog | None = None
        self.max_undercount = 0
        self._pending = 0

    @property
    def exact(self) -> bool:
        return self.sketch is None

    def add(self, values: pa.Array) -> None:
        if self.sketch is not None:
            self.sketch.add(values)
        self.table.add(values)
        self._pending += len(values)
        self._bound()

    def merge(self, other: BoundedCounts) -> None:
        if other.sketch is not None:
            self._start_sketch()
            self.sketch.merge(other.sketch)
        elif self.sketch is not None:
            table = other.table.table()
            if table is not None:
                self.sketch.add(table.column("value").combine_chunks())
        self.table.merge(other.table)
        self.max_undercount += other.max_undercount
        self._pending += other._pending
        self._bound()

    def _start_sketch(self) -> None:
        if self.sketch is None:
            self.sketch = HyperLogLog()
            table = self.table.table()
            if table is not None:
                self.sketch.add(table.column("value").combine_chunks())

    def _bound(self) -> None:
        # Compacting merges every part into one table (a hash aggregation) and costs O(table): only
        # once enough new ids arrived to matter. Up to _COMPACT_IDS ids wait, so a small summary is
        # not merged once per record batch; its memory stays O(max(capacity, _COMPACT_IDS)).
        if self._pending < max(2 * self.capacity, min(16 * self.capacity, _COMPACT_IDS)):
            return
        self._pending = 0
        if len(self.table) <= 2 * self.capacity:
            return
        self._start_sketch()
        self.max_undercount += self.table.subtract_and_prune(self.capacity)

    def distinct(self) -> int:
        return len(self.table) if self.sketch is None else self.sketch.estimate()

    def top(self, k: int) -> list[list]:
        table = self.table.sorted(limit=k)
        return [[v, c] for v, c in zip(table.column("value").to_pylist(), table.column("count").to_pylist())]
