"""AnalyzeDerived and ApplyDerived: bucketize and scale number columns at ingest, parameters from the data.

`AnalyzeDerived(plans)` summarises each source column in one combine over
the record batches (mean and population variance, min and max, a
`QuantileSketch` for quantile boundaries) and yields one list: the final
`sparse_io.numeric_maps.DerivedFeature` of every plan, parameters filled in
(and, for the features derived at read, a late update: `transforms.beam.at_read`).
`ApplyDerived` takes that list as a side input and appends each stored
derived column to every batch with the spec's Arrow implementation.

A plan is duck-typed (`pipelines.config_derived.DerivedPlan`): `name`,
`source`, `quantiles`, `scale`, `needs_analysis` and `fixed()`.

Example:
  >>> import apache_beam as beam
  >>> from pipelines.config_derived import DerivedPlan
  >>> plans = [DerivedPlan("x_z", "x", scale="z_score")]
  >>> with beam.Pipeline() as p:  # doctest: +SKIP
  ...     batches = p | beam.Create([pa.record_batch({"x": [1.0, 3.0]})])
  ...     derived, _ = batches | AnalyzeDerived(plans)  # [[DerivedFeature("x_z", "x", ScaleSpec("z_score", 2.0, 1.0))]]
  ...     out = batches | ApplyDerived(derived)      # x_z: [-1.0, 1.0]
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa

from sparse_io import number_summary
from sparse_io.numeric_maps import (
    BucketizeSpec,
    DerivedFeature,
    NumberColumn,
    ScaleSpec,
    append_derived_columns,
    float32_boundaries,
)
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._quantile_sketch import QuantileSketch

__all__ = ["AnalyzeDerived", "ApplyDerived", "SourceSummary", "derive", "derived_schema_updates"]


class SourceSummary:
    """Mergeable moments, range and (optionally) quantile sketch of one number column's present values.

    The mean and the sum of squared deviations merge by Chan et al.'s
    pairwise rule, so the population variance is as exact as float64 allows
    in any merge order.
    """

    def __init__(self, sketch: bool) -> None:
        self.float64 = False  # a float64 source: bucketized in float64, any other in float32 (BucketizeSpec.ids)
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.low = np.inf
        self.high = -np.inf
        self.sketch = QuantileSketch() if sketch else None

    def add(self, column: pa.Array | pa.ChunkedArray | NumberColumn) -> None:
        """Adds a batch's column (its present values: not null, not NaN)."""
        if not isinstance(column, NumberColumn) and column.type == pa.float32() and number_summary.native_available():
            self._add_summary(number_summary.float32_summary(column))
            return
        number = NumberColumn.of(column)
        self.float64 = self.float64 or number.values.dtype == np.float64
        own = number.present_own()
        if own.size == 0:
            return
        values = number.present_values()
        mean = float(values.mean())
        deviations = values - mean
        self._merge_moments(int(values.size), mean, float(deviations @ deviations), float(own.min()), float(own.max()))
        if self.sketch is not None:
            # float32 values are sorted as float32 (twice as fast, and exact); any other dtype as float64.
            self.sketch.add(own if own.dtype == np.float32 else values)

    def _add_summary(self, summary: number_summary.NumberSummary) -> None:
        """Adds a float32 column summarised natively: the same moments, range and sketch as the numpy path."""
        if summary.count == 0:
            return
        self._merge_moments(summary.count, summary.mean, summary.m2, summary.low, summary.high)
        if self.sketch is not None:
            self.sketch.add(summary.sorted, ascending=True)

    def merge(self, other: SourceSummary) -> None:
        self.float64 = self.float64 or other.float64
        self._merge_moments(other.count, other.mean, other.m2, other.low, other.high)
        if self.sketch is not None and other.sketch is not None:
            self.sketch.merge(other.sketch)

    def _merge_moments(self, count: int, mean: float, m2: float, low: float, high: float) -> None:
        """Adds the moments and range of `count` more values (Chan et al.'s pairwise rule)."""
        if count == 0:
            return
        total = self.count + count
        delta = mean - self.mean
        self.mean += delta * count / total
        self.m2 += m2 + delta * delta * self.count * count / total
        self.count = total
        self.low, self.high = min(self.low, low), max(self.high, high)

    @property
    def std(self) -> float:
        """The population standard deviation (ddof 0), as tf.Transform's `scale_to_z_score` uses; 0 for none."""
        return float(np.sqrt(self.m2 / self.count)) if self.count else 0.0


def derive(plan, summary: SourceSummary | None) -> DerivedFeature:
    """The final feature of `plan`: its fixed spec, or one whose parameters come from `summary`.

    No value at all: z_score takes mean 0 and std 0 (the values pass through), min_max takes low = high = 0
    (the sigmoid, tf.Transform's rule for a single value), quantiles one boundary at 0.
    """
    fixed = plan.fixed()
    if fixed is not None:
        return fixed
    if plan.quantiles is not None:
        if summary.count == 0:
            return DerivedFeature(plan.name, plan.source, BucketizeSpec((0.0,)), plan.quantiles)
        cuts = summary.sketch.quantiles(np.arange(1, plan.quantiles) / plan.quantiles)
        # Ties can give equal cuts; a repeated boundary would only name an empty bucket.
        boundaries = float32_boundaries(np.unique(cuts.astype(np.float32)))
        return DerivedFeature(plan.name, plan.source, BucketizeSpec(boundaries), plan.quantiles)
    if plan.scale == "z_score":
        mean = summary.mean if summary.count else 0.0
        return DerivedFeature(plan.name, plan.source, ScaleSpec("z_score", mean=mean, std=summary.std))
    low, high = (summary.low, summary.high) if summary.count else (0.0, 0.0)
    return DerivedFeature(plan.name, plan.source, ScaleSpec("min_max", low=low, high=high))


class _AnalyzeFn(beam.CombineFn):
    """One SourceSummary per analysed source column (shared by its plans); `extract_output` gives every final feature.

    A source both bucketized and scaled is read and summarised once per batch: the moments and the sketch
    are those each plan would get on its own.
    """

    def __init__(self, plans, at_read=()):
        self._plans = list(plans)
        self._at_read = frozenset(at_read)
        self._sketched: dict[str, bool] = {}
        for p in self._plans:
            if p.needs_analysis:
                self._sketched[p.source] = self._sketched.get(p.source, False) or p.quantiles is not None

    def create_accumulator(self):
        return {source: SourceSummary(sketch) for source, sketch in self._sketched.items()}

    def add_input(self, accumulator, batch: pa.RecordBatch):
        for source, summary in accumulator.items():
            summary.add(batch.column(source))
        return accumulator

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for other in accumulators:
            for source, summary in other.items():
                merged[source].merge(summary)
        return merged

    def extract_output(self, accumulator):
        """(final features in plan order, {name: (bucket counts, exact)} of the at-read bucketized ones)."""
        features = [derive(p, accumulator.get(p.source) if p.needs_analysis else None) for p in self._plans]
        buckets = {}
        for plan, feature in zip(self._plans, features):
            if plan.name in self._at_read and isinstance(feature.spec, BucketizeSpec):
                summary = accumulator[plan.source]
                counts = summary.sketch.bucket_counts(feature.spec.boundaries, in_float32=not summary.float64) \
                    if summary.count else np.zeros(feature.spec.id_range, np.int64)
                exact = summary.sketch is None or summary.sketch.rank_error() == 0.0
                buckets[plan.name] = ([int(c) for c in counts], bool(exact))
        return features, buckets


class AnalyzeDerived(beam.PTransform):
    """PCollection[pa.RecordBatch] -> (the final `DerivedFeature`s, the at-read features' late update).

    Args:
      plans: the derived features as configured (`DerivedPlan`).
      at_read: names of plans the shards will not hold (readers derive them):
        for those the second output is one late update `(AT_READ, ...)`
        (`transforms.beam.at_read`) with their schema.json entries and the
        bucket counts the quantile sketch gives; without any, it is empty.
      batch_sizes: the batch sizes stats.json gives COO capacities for (`stats.batch_sizes`).

    Output: a pair of PCollections: one element, the list of final features in plan order; and the late update.
    """

    def __init__(self, plans, at_read=(), batch_sizes=()):
        super().__init__()
        self._plans = list(plans)
        self._at_read = tuple(at_read)
        self._batch_sizes = [int(b) for b in batch_sizes]

    def expand(self, batches):
        if not any(p.needs_analysis for p in self._plans):
            analysed = batches.pipeline | "Fixed" >> beam.Create([([p.fixed() for p in self._plans], {})])
        else:
            analysed = batches | "Summarise" >> beam.CombineGlobally(_AnalyzeFn(self._plans, self._at_read))
        features = analysed | "Features" >> beam.Map(_features_of)
        if not self._at_read:
            return features, batches.pipeline | "NoAtRead" >> beam.Create([])
        update = analysed | "AtRead" >> beam.Map(_at_read_of, frozenset(self._at_read), self._batch_sizes)
        return features, update


def _features_of(analysed):
    return analysed[0]


def _at_read_of(analysed, names: frozenset, batch_sizes: list[int]):
    from transforms.beam.at_read import at_read_update

    features, buckets = analysed
    return at_read_update([f for f in features if f.name in names], buckets, batch_sizes)


def _appended(batch: pa.RecordBatch, derived: list[DerivedFeature], names: frozenset | None = None
              ) -> pa.RecordBatch:
    """`batch` with each derived column appended, in `derived` order (those in `names`, when given)."""
    kept = derived if names is None else [f for f in derived if f.name in names]
    return append_derived_columns(batch, kept) if kept else batch


class ApplyDerived(beam.PTransform):
    """Appends each derived column (name, Arrow spec of its source) to every batch; `derived` is AnalyzeDerived's.

    Args:
      derived: AnalyzeDerived's features (a one-element PCollection).
      names: the features to append (default: all); the others are derived at read.
    """

    def __init__(self, derived, names=None):
        super().__init__()
        self._derived = derived
        self._names = None if names is None else frozenset(names)

    def expand(self, batches):
        return batches | "Append" >> beam.Map(_appended, beam.pvalue.AsSingleton(self._derived),
                                              self._names).with_output_types(pa.RecordBatch)


def derived_schema_updates(derived: list[DerivedFeature], names=None):
    """(feature, schema.json fields: id range, id space, `transform`) of each final feature (of `names`, if given)."""
    for feature in derived:
        if names is None or feature.name in names:
            yield feature.name, feature.schema_fields()
