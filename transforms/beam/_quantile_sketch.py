"""QuantileSketch: a mergeable summary of a number column whose quantiles have a stated rank error.

A stack of compactors (as in Manku-Rajagopalan-Lindsay and KLL, with a
deterministic choice): level h holds values that each stand for 2**h
values seen. New values enter level 0; a level holding `k` or more values is
sorted and every other one (alternately the odd and the even positions)
moves up a level with twice the weight. Merging two sketches concatenates
their levels and compacts again, so the summary is a Beam combiner
accumulator and the order of adds and merges does not matter to the bound.

Rank error. Compacting sorted values of weight w changes the weight counted
at or below any number by at most w. A compaction of level h consumes at
least k values of weight 2**h, so level h compacts at most n / (k 2**h)
times and adds at most n / k of error; with H levels above level 0, the
weight below any number is off by at most H n / k. A quantile query returns
a held value whose weight may add one more value of the top level's weight
(at most 2 n / k), so the rank of each returned q-quantile is within
`rank_error()` * n of q n, `rank_error()` = (H + 2) / k. With k = 4096 and
H <= log2(n / k) + 1 that is <= 0.0076 for n up to 2**40 values (<= 0.01,
the bound the ingest documents); below k values the sketch is exact.

Example:
  >>> s = QuantileSketch(); s.add(np.arange(1000, dtype=np.float64))
  >>> s.quantiles([0.5]).tolist(), s.rank_error()
  ([499.0], 0.0)
"""

from __future__ import annotations

import numpy as np

__all__ = ["QuantileSketch", "DEFAULT_COMPACTOR_SIZE"]

DEFAULT_COMPACTOR_SIZE = 4096


class QuantileSketch:
    """Mergeable quantiles of float64 values (module doc); `add` numpy arrays of present values, `merge`, `quantiles`.

    Args:
      k: values a level holds before it compacts (even, >= 2); the rank error is about log2(n/k) / k.
    """

    def __init__(self, k: int = DEFAULT_COMPACTOR_SIZE) -> None:
        if k < 2 or k % 2:
            raise ValueError(f"k must be an even integer >= 2, got {k!r}")
        self.k = k
        self.count = 0
        self.levels: list[np.ndarray] = [np.zeros(0, np.float64)]
        self._flips: list[int] = [0]  # compactions so far, per level: the parity of the next one's kept positions
        self._runs0 = True  # level 0 holds sorted runs only (values added `ascending`): merged, not sorted

    def add(self, values: np.ndarray, *, ascending: bool = False) -> None:
        """Adds present (non-NaN) values; NaN is refused, since it has no rank.

        float32 values wait at level 0 as float32 (sorted in it, exactly: a float32 is a float64); any
        other dtype is taken as float64. Levels above hold float64. `ascending`: the values come sorted
        (`sparse_io.number_summary`), so level 0 is a few sorted runs, merged rather than sorted.
        """
        values = np.asarray(values).ravel()
        if values.dtype != np.float32:
            values = values.astype(np.float64)
        if values.size == 0:
            return
        if np.isnan(values).any():
            raise ValueError("QuantileSketch.add: NaN has no rank; drop missing values first")
        # A new array either way (the caller's, a view of a record batch maybe, is never held), with -0.0 made
        # 0.0: one zero, whichever path summarised the values.
        values = values + values.dtype.type(0)
        self._runs0 = (self.levels[0].size == 0 or self._runs0) and ascending
        self.levels[0] = values if self.levels[0].size == 0 else np.concatenate([self.levels[0], values])
        self.count += int(values.size)
        self._compact()

    def merge(self, other: QuantileSketch) -> None:
        """Adds every value `other` summarises (its levels join this sketch's, then compact)."""
        if other.k != self.k:
            raise ValueError(f"cannot merge sketches of k={self.k} and k={other.k}")
        while len(self.levels) < len(other.levels):
            self.levels.append(np.zeros(0, np.float64))
            self._flips.append(0)
        for h, values in enumerate(other.levels):
            self.levels[h] = np.concatenate([self.levels[h], values])
        self._runs0 = self._runs0 and other._runs0
        self.count += other.count
        self._compact()

    def _compact(self) -> None:
        h = 0
        while h < len(self.levels):
            values = self.levels[h]
            if values.size >= self.k:
                # Above level 0 a level holds a few sorted runs (each compaction's kept half): a stable sort
                # (a merge of runs) orders them in about linear time.
                values = np.sort(values) if h == 0 and not self._runs0 else np.sort(values, kind="stable")
                even = values.size - values.size % 2
                kept = values[self._flips[h] % 2:even:2]
                self._flips[h] += 1
                self.levels[h] = values[even:]  # an odd one out waits at this level
                if h == 0:
                    self._runs0 = True  # one value, or none: a sorted run
                if h + 1 == len(self.levels):
                    self.levels.append(np.zeros(0, np.float64))
                    self._flips.append(0)
                self.levels[h + 1] = np.concatenate([self.levels[h + 1], kept.astype(np.float64)])
            h += 1

    def rank_error(self) -> float:
        """The bound on |rank(returned q-quantile) - q n| / n (module doc); 0.0 while nothing was compacted."""
        compacted = len(self.levels) - 1
        return 0.0 if compacted == 0 else (compacted + 2) / self.k

    def bucket_counts(self, boundaries, in_float32: bool = False) -> np.ndarray:
        """int64 `[len(boundaries) + 1]`: the held weight per bucket, a value in bucket `searchsorted(b, v, "right")`.

        They sum to `count`. The weight at or below any number is off by at most `rank_error() * count`
        (module doc), so each bucket's count is within twice that of the truth; exact while nothing was
        compacted. `in_float32` compares values rounded to float32, as `BucketizeSpec.ids` does for any
        source but float64.
        """
        edges = np.asarray(boundaries, dtype=np.float64)
        counts = np.zeros(len(edges) + 1, np.int64)
        for h, values in enumerate(self.levels):
            if values.size:
                if in_float32:
                    values = values.astype(np.float32)
                counts += np.bincount(np.searchsorted(edges.astype(values.dtype), values, side="right"),
                                      minlength=len(counts)) << h
        return counts

    def quantiles(self, qs) -> np.ndarray:
        """The held value at (about) each rank q n: the smallest whose weight at or below it reaches q n.

        Raises:
          ValueError: an empty sketch, or a q outside [0, 1].
        """
        qs = np.asarray(qs, dtype=np.float64)
        if self.count == 0:
            raise ValueError("QuantileSketch.quantiles: no values were added")
        if np.any((qs < 0) | (qs > 1)):
            raise ValueError(f"quantiles must lie in [0, 1], got {qs.tolist()}")
        values = np.concatenate(self.levels)
        weights = np.concatenate([np.full(v.size, 1 << h, np.int64) for h, v in enumerate(self.levels)])
        order = np.argsort(values, kind="stable")
        values, cumulative = values[order], np.cumsum(weights[order])
        # A compaction keeps half its values at twice the weight: the levels hold weight `count` exactly.
        targets = qs * self.count
        index = np.minimum(np.searchsorted(cumulative, targets, side="left"), values.size - 1)
        return values[index]
