"""ComputeStats: per-feature id statistics and COO capacities, written as stats.json.

stats.json (format_version 1) is what the tf.data stage reads to pad each
batch's COO tensors to a static capacity:

  {"format_version": 1, "num_rows": N,
   "features": {"<name>": {"rows": N, "empty_rows": int, "ids_per_row": {"mean", "p50", "p99", "max"},
                 "distinct_ids": int, "distinct_ids_exact": bool, "top_ids": [[id, count], ...],
                 "top_ids_exact": bool,
                 "capacity": {"<batch_size>": {"max": int, "p99_9": int}, ...}}},
   "dense": {"<name>": <value stats>, ...},          # when ComputeStats is given dense columns
   "label": {"name": "<label>", **<value stats>}}   # when it is given the label column

A <value stats> entry (`transforms.beam._value_stats.ValueStats`) holds rows,
missing (null or NaN), min, max, mean, quantiles p1..p99 and a 20-bin
histogram (from a uniform sample of up to 10,000 values: `sample_size`,
`sample_exact`), and `value_counts` ([[value, rows], ...]) when the column
has at most 32 distinct values, as a click label does.

How the capacities are bounded:
  * `max` is the sum of the `b` largest row lengths in the whole dataset. Any
    batch of `b` rows, consecutive in whatever order a reader (shuffled or
    not) produces them, holds at most that many ids, so padding to it can
    never overflow. It is computed from the exact row-length histogram.
  * `p99_9` is the 99.9th percentile of ids in a batch of `b` rows drawn at
    random without replacement, i.e. what a shuffled reader sees. With at most
    two distinct row lengths (single-valued features) it is exact (a
    hypergeometric quantile); otherwise it is simulated from the same exact
    histogram (20,000 batches, fixed seed). Never above `max`.

Percentiles of ids per row use numpy's default (linear) interpolation and are
exact. Distinct ids and top ids are exact up to `exact_limit` distinct ids per
feature; beyond it distinct ids come from a HyperLogLog sketch (0.81% standard
error, `distinct_ids_exact: false`) and top-id counts from a Misra-Gries
summary (each at most ids/(exact_limit+1) below the truth, `top_ids_exact: false`).
"""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa

from sparse_io import output_files
from sparse_io.atomic import atomic_write_text
from sparse_io.schema import WEIGHTS_SUFFIX
from sparse_io.stats_file import stats_json
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._columns import feature_names, require_columns
from transforms.beam._counts import list_values
from transforms.beam._sketches import BoundedCounts, LengthHistogram
from transforms.beam._value_stats import ValueStats
from transforms.beam.call_once import CallOnce

__all__ = ["ComputeStats", "FeatureStats", "STATS_FILE", "STATS_FORMAT_VERSION", "assemble_stats", "feature_entry"]

STATS_FILE = output_files.STATS_FILE
STATS_FORMAT_VERSION = 1
_SIMULATED_BATCHES = 20_000
# Distinct ids per feature counted exactly. Past it the id table keeps at most twice this many
# counters per feature, so the memory the stats take stops growing with the log
# (26 features x 2 x 65,536 counters: a few tens of MiB).
DEFAULT_EXACT_LIMIT = 65_536


class FeatureStats:
    """Accumulated statistics of one sparse feature (row lengths and ids); mergeable.

    Example:
      >>> s = FeatureStats("f"); s.add(pa.array([[1, 2], [], [2]]))
      >>> r = s.result([2], top_k=1)
      >>> r["rows"], r["distinct_ids"], r["top_ids"], r["capacity"]["2"]["max"]
      (3, 2, [[2, 2]], 3)
    """

    def __init__(self, feature: str, exact_limit: int = DEFAULT_EXACT_LIMIT):
        self.feature = feature
        self.lengths = LengthHistogram()
        self.ids = BoundedCounts(exact_limit)

    def add(self, column: pa.Array) -> None:
        """Counts the row lengths and ids of one batch's list column.

        Raises:
          ValueError: `column` is not a list column.
        """
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
            raise ValueError(
                f"ComputeStats: feature {self.feature!r} must be a list column of ids, got {column.type}"
            )
        lengths = np.diff(column.offsets.to_numpy()).astype(np.int64)
        if column.null_count:
            lengths[~column.is_valid().to_numpy(zero_copy_only=False)] = 0
        self.lengths.add(lengths)
        self.ids.add(list_values(column, self.feature, "ComputeStats"))

    def merge(self, other: FeatureStats) -> None:
        """Adds another partial count of the same feature (the Beam combiner's merge)."""
        self.lengths.merge(other.lengths)
        self.ids.merge(other.ids)

    def result(self, batch_sizes: Sequence[int], top_k: int = 20, seed: int = 0) -> dict:
        """The feature's stats.json entry: rows, lengths, distinct and top ids, and per-batch-size capacities.

        Args:
          batch_sizes: the batch sizes to give COO capacities for.
          top_k: how many of the most frequent ids to list.
          seed: seeds the batches sampled for the capacities.
        """
        return feature_entry(self.lengths, self.ids.distinct(), self.ids.top(top_k), self.ids.exact, batch_sizes,
                             seed)


def feature_entry(lengths: LengthHistogram, distinct: int, top: list, exact: bool, batch_sizes: Sequence[int],
                  seed: int = 0) -> dict:
    """A sparse feature's stats.json entry from its exact row-length histogram and its id counts.

    `exact` says whether `distinct` and `top` (`[[id, count], ...]`, most frequent first) are exact.
    """
    h = lengths
    rows = h.rows
    capacity = {}
    for b in batch_sizes:
        bound = h.top_sum(b)
        typical = h.random_batch_quantile(b, 0.999, _SIMULATED_BATCHES, seed + b)
        capacity[str(b)] = {"max": bound, "p99_9": min(typical, bound)}
    return {
        "rows": rows,
        "empty_rows": int(h.counts[h.lengths == 0].sum()),
        "ids_per_row": {
            "mean": h.total / rows if rows else 0.0,
            "p50": h.quantile(0.5),
            "p99": h.quantile(0.99),
            "max": int(h.lengths[-1]) if rows else 0,
        },
        "distinct_ids": distinct,
        "distinct_ids_exact": exact,
        "top_ids": top,
        "top_ids_exact": exact,
        "capacity": capacity,
    }


class _FeatureStatsFn(beam.CombineFn):
    def __init__(self, batch_sizes: list[int], top_k: int, exact_limit: int, seed: int):
        self._batch_sizes = batch_sizes
        self._top_k = top_k
        self._exact_limit = exact_limit
        self._seed = seed

    def create_accumulator(self):
        return None  # created on the first input, when the feature name is known

    def add_input(self, accumulator, element):
        feature, column = element
        if feature == _ROWS:  # the row count rides along as one more key
            return (accumulator or 0) + column
        if accumulator is None:
            accumulator = FeatureStats(feature, self._exact_limit)
        accumulator.add(column)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = None
        for acc in accumulators:
            if acc is None:
                continue
            if merged is None:
                merged = acc
            elif isinstance(merged, int):
                merged += acc
            else:
                merged.merge(acc)
        return merged

    def extract_output(self, accumulator):
        if accumulator is None or isinstance(accumulator, int):
            return accumulator
        return accumulator.result(self._batch_sizes, self._top_k, self._seed)


def _empty_feature(batch_sizes: Sequence[int], rows: int) -> dict:
    return {
        "rows": rows,
        "empty_rows": rows,
        "ids_per_row": {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0},
        "distinct_ids": 0,
        "distinct_ids_exact": True,
        "top_ids": [],
        "top_ids_exact": True,
        "capacity": {str(b): {"max": 0, "p99_9": 0} for b in batch_sizes},
    }


def assemble_stats(
    num_rows: int,
    per_feature: dict,
    features: Sequence[str] | None,
    batch_sizes: Sequence[int],
    per_value: dict | None = None,
    dense: Sequence[str] = (),
    label: str | None = None,
) -> dict:
    """The stats.json document from per-feature results (features never seen get zero stats).

    `features` None: every feature in `per_feature`, by name. `per_value`:
    `ValueStats` results of the `dense` columns and the `label` column.
    """
    if features is None:
        features = sorted(per_feature)
    stats = {
        "format_version": STATS_FORMAT_VERSION,
        "num_rows": int(num_rows),
        "features": {f: per_feature.get(f) or _empty_feature(batch_sizes, int(num_rows)) for f in features},
    }
    per_value = per_value or {}
    if dense:
        stats["dense"] = {d: per_value.get(d) or ValueStats(d).result() for d in dense}
    if label is not None:
        stats["label"] = {"name": label, **(per_value.get(label) or ValueStats(label).result())}
    return stats


_ROWS = ""  # key of the row count; never a feature name (names are non-empty)


def _columns_by_feature(batch: pa.RecordBatch, features: Sequence[str] | None):
    yield _ROWS, (_ROWS, batch.num_rows)
    if features is None:
        features = _list_columns(batch.schema)
    require_columns(batch, features, "ComputeStats")
    for name in features:
        yield name, (name, batch.column(name))


def _list_columns(schema: pa.Schema) -> list[str]:
    """The sparse feature columns of a batch: list columns other than `<f>__weights`."""
    names = set(schema.names)
    return [
        f.name
        for f in schema
        if (pa.types.is_list(f.type) or pa.types.is_large_list(f.type))
        and not (f.name.endswith(WEIGHTS_SUFFIX) and f.name[: -len(WEIGHTS_SUFFIX)] in names)
    ]


class _ValueStatsFn(beam.CombineFn):
    def __init__(self, seed: int):
        self._seed = seed

    def create_accumulator(self):
        return None

    def add_input(self, accumulator, element):
        name, column = element
        if accumulator is None:
            accumulator = ValueStats(name, seed=self._seed)
        accumulator.add(column)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = None
        for acc in accumulators:
            if acc is None:
                continue
            if merged is None:
                merged = acc
            else:
                merged.merge(acc)
        return merged

    def extract_output(self, accumulator):
        return None if accumulator is None else accumulator.result()


def _scalar_columns(batch: pa.RecordBatch, names: Sequence[str]):
    require_columns(batch, names, "ComputeStats")
    for name in names:
        yield name, (name, batch.column(name))


def _assemble(found, values, features, sizes, dense, label) -> dict:
    """assemble_stats over the per-key summaries (side-input views, copied before the row count is taken out)."""
    found = dict(found)
    return assemble_stats(found.pop(_ROWS, 0), found, features, sizes, dict(values), dense, label)


def _write_stats(stats: dict, path: str) -> dict:
    atomic_write_text(path, stats_json(stats))
    return stats


class ComputeStats(beam.PTransform):
    """Per-feature row/id statistics and the COO capacity each batch size needs.

    Args:
      features: sparse (list) columns to describe; None: every list column
        of the batches except `<f>__weights` ones.
      batch_size: one batch size or several; each gets a `capacity` entry.
      output_path: if given, the stats are also written there (atomically),
        e.g. `<shard dir>/stats.json`.
      top_k: how many of the most frequent ids to list.
      exact_limit: distinct ids per feature counted exactly (see the module doc).
      seed: seeds the p99_9 simulation and the value samples (deterministic output).
      dense: scalar columns to describe under "dense" (missing share,
        quantiles, histogram).
      label: the label column, described under "label" (with its balance).

    Input: PCollection[pa.RecordBatch]. Output: a PCollection holding one
    dict, the stats.json document (see the module docstring for its format
    and how `capacity` is bounded).

    Example:
      >>> stats = hashed | ComputeStats(["C1", "C2"], batch_size=[1024, 4096],
      ...                               output_path="/tmp/shards/stats.json")  # doctest: +SKIP
    """

    def __init__(
        self,
        features: str | Sequence[str] | None,
        batch_size: int | Sequence[int],
        *,
        output_path: str | None = None,
        top_k: int = 20,
        exact_limit: int = DEFAULT_EXACT_LIMIT,
        seed: int = 0,
        dense: Sequence[str] = (),
        label: str | None = None,
    ):
        super().__init__()
        self._dense = list(dense)
        self._label = label
        self._features = (
            None if features is None else feature_names(features, "ComputeStats", allow_empty=True)
        )
        sizes = [batch_size] if isinstance(batch_size, int) else list(batch_size)
        if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
            raise ValueError(f"ComputeStats: batch_size must be positive integer(s), got {batch_size!r}")
        for name, value in (("top_k", top_k), ("exact_limit", exact_limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ComputeStats: {name} must be a positive integer, got {value!r}")
        self._batch_sizes = sorted(set(sizes))
        self._output_path = output_path
        self._top_k = top_k
        self._exact_limit = exact_limit
        self._seed = seed

    def expand(self, batches):
        features, sizes = self._features, self._batch_sizes
        per_feature = (
            batches
            | "ColumnsByFeature" >> beam.FlatMap(_columns_by_feature, features)
            | "Summarise"
            >> beam.CombinePerKey(_FeatureStatsFn(sizes, self._top_k, self._exact_limit, self._seed))
        )
        dense, label = self._dense, self._label
        scalars = dense + ([label] if label is not None else [])
        per_value = (
            batches
            | "ScalarColumns" >> beam.FlatMap(_scalar_columns, scalars)
            | "SummariseScalars" >> beam.CombinePerKey(_ValueStatsFn(self._seed))
        )
        stats = batches.pipeline | "Assemble" >> CallOnce(
            _assemble, beam.pvalue.AsDict(per_feature), beam.pvalue.AsDict(per_value), features, sizes, dense, label
        )
        if self._output_path:
            stats = stats | "Write" >> beam.Map(_write_stats, self._output_path)
        return stats
