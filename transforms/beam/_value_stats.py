"""ValueStats: a mergeable summary of one scalar column (a dense feature or the label).

Exact: rows, missing (null or NaN), min, max, mean, and the count of each
value while a column has at most `max_counted_values` distinct values (a
label's balance). Quantiles and the histogram come from a uniform sample of
at most `sample_size` present values (bottom-k by a seeded random priority,
so merged samples stay uniform); they are exact while the column has no more
present values than that (`sample_exact`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ValueStats", "QUANTILES"]

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
_HISTOGRAM_BINS = 20
# A column whose largest magnitude is this many times its typical one is drawn on a
# signed-log scale (counts in click logs span orders of magnitude).
_LOG_SCALE_SPREAD = 20.0


class ValueStats:
    """Accumulated statistics of one scalar column; `add` record-batch columns, `merge`, then `result`.

    Example:
      >>> s = ValueStats("I1"); s.add(pa.array([1.0, None, 3.0, float("nan")]))
      >>> r = s.result(); r["rows"], r["missing"], r["min"], r["max"], r["quantiles"]["p50"]
      (4, 2, 1.0, 3.0, 2.0)
    """

    def __init__(self, name: str, *, sample_size: int = 10_000, max_counted_values: int = 32, seed: int = 0):
        self.name = name
        self.sample_size = sample_size
        self.max_counted_values = max_counted_values
        self.seed = seed
        self.rows = 0
        self.missing = 0
        self.total = 0.0
        self.low = np.inf
        self.high = -np.inf
        self.sample = np.zeros(0, np.float64)
        self.priority = np.zeros(0, np.float64)
        self.counts: dict[float, int] | None = {}

    def add(self, column: pa.Array) -> None:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or not (
            pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type)
        ):
            raise ValueError(f"ComputeStats: column {self.name!r} must be a numeric scalar column, got {column.type}")
        values = pc.drop_null(column).to_numpy(zero_copy_only=False).astype(np.float64)
        nan = np.isnan(values)
        if nan.any():
            values = values[~nan]
        self.missing += len(column) - len(values)
        if values.size:
            self.total += float(values.sum())
            self.low = min(self.low, float(values.min()))
            self.high = max(self.high, float(values.max()))
            rng = np.random.default_rng((self.seed, self.rows))
            self._keep(values, rng.random(values.size))
            if self.counts is not None:
                distinct, counts = np.unique(values, return_counts=True)
                for v, c in zip(distinct.tolist(), counts.tolist()):
                    self.counts[v] = self.counts.get(v, 0) + c
                self._cap_counts()
        self.rows += len(column)

    def merge(self, other: ValueStats) -> None:
        self.rows += other.rows
        self.missing += other.missing
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)
        self._keep(other.sample, other.priority)
        if self.counts is None or other.counts is None:
            self.counts = None
        else:
            for v, c in other.counts.items():
                self.counts[v] = self.counts.get(v, 0) + c
            self._cap_counts()

    def _keep(self, values: np.ndarray, priority: np.ndarray) -> None:
        # The sample is kept ordered by priority, so the bottom-k of it and the new values is a merge: once
        # the sample is full, only values below its largest priority can enter, and there are few of them.
        if self.sample.size >= self.sample_size:
            candidates = priority < self.priority[-1]
            values, priority = values[candidates], priority[candidates]
        if not values.size:
            return
        order = np.argsort(priority, kind="stable")
        values, priority = values[order], priority[order]
        at = np.searchsorted(self.priority, priority, side="right")
        self.sample = np.insert(self.sample, at, values)[: self.sample_size]
        self.priority = np.insert(self.priority, at, priority)[: self.sample_size]

    def _cap_counts(self) -> None:
        if self.counts is not None and len(self.counts) > self.max_counted_values:
            self.counts = None  # too many distinct values to be a class balance

    def result(self) -> dict:
        """The stats.json entry: see the module docstring (quantile keys p1 ... p99)."""
        present = self.rows - self.missing
        out = {"rows": self.rows, "missing": self.missing}
        if not present:
            return {**out, "sample_size": 0, "sample_exact": True}
        sample = np.sort(self.sample)
        out.update(
            min=self.low,
            max=self.high,
            mean=self.total / present,
            quantiles={f"p{round(q * 100)}": float(np.quantile(sample, q)) for q in QUANTILES},
            histogram=_histogram(sample),
            sample_size=int(sample.size),
            sample_exact=bool(sample.size == present),
        )
        if self.counts is not None:
            out["value_counts"] = [[_plain(v), c] for v, c in sorted(self.counts.items())]
        return out


def _plain(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _symlog(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


def _symexp(y: np.ndarray) -> np.ndarray:
    return np.sign(y) * np.expm1(np.abs(y))


def _histogram(sorted_sample: np.ndarray) -> dict:
    """Bin edges (in the column's units) and sampled counts; signed-log bins for heavy tails."""
    low, high = float(sorted_sample[0]), float(sorted_sample[-1])
    typical = float(np.abs(np.quantile(sorted_sample, 0.5))) + 1.0
    scale = "symlog" if max(abs(low), abs(high)) > _LOG_SCALE_SPREAD * typical else "linear"
    if low == high:
        edges = np.array([low - 0.5, high + 0.5])
    elif scale == "symlog":
        edges = _symexp(np.linspace(_symlog(np.array(low)), _symlog(np.array(high)), _HISTOGRAM_BINS + 1))
        edges[0], edges[-1] = low, high
    else:
        edges = np.linspace(low, high, _HISTOGRAM_BINS + 1)
    counts, _ = np.histogram(sorted_sample, bins=edges)
    return {"scale": scale, "edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
