"""Features derived at read: their schema.json and stats.json entries, made without their column.

A derived feature whose parameters the ingest computes from the data
(quantile boundaries, z_score, min_max) can only be written once every
event was analysed, so storing it makes every batch wait on disk for the
analysis. With `output.derived: at_read` (the default for Parquet and Arrow
shards) the shards hold only its source column; schema.json holds its
entry with the final parameters and `at_read: true`, and readers compute
it from the source as each unit is read (`transforms.tfdata.make_dataset`,
with the same Arrow code the ingest applies to the features it stores).

Its stats.json entry comes from what the ingest counts anyway:

* scaled (dense): the source's entry (`dense.<source>`), every value mapped
  by the spec. z_score and min_max are increasing maps (affine, or the
  sigmoid of a constant column), so the mapped min, max, mean, quantiles,
  histogram edges and counted values are exactly the derived column's; the
  entry names the source under `derived_from`.
* bucketized (sparse, one id per row with a value): rows, empty rows (the
  source's missing values), ids per row and the COO capacities exactly as
  a stored column's (`transforms.beam.stats.feature_entry`); the ids'
  counts from the analysis's quantile sketch, each within twice its rank
  error (<= 0.0076) times the rows of the truth, so `distinct_ids_exact`
  and `top_ids_exact` are false once the sketch compacted (true below 4,096
  values, where it is exact).

`AnalyzeDerived(..., at_read=names)` emits one late update `(AT_READ, ...)`;
`apply_at_read` (called by `transforms.beam.late_updates`) adds the
entries to the schema and the stats.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sparse_io.numeric_maps import DerivedFeature, ScaleSpec, derived_of_feature
from sparse_io.schema import FeatureSpec, Schema
from transforms.beam._sketches import LengthHistogram
from transforms.beam.stats import feature_entry

__all__ = ["AT_READ", "at_read_update", "apply_at_read", "mapped_value_stats"]

AT_READ = "__at_read__"
_TOP_IDS = 20


def at_read_update(features: Sequence[DerivedFeature], buckets: dict, batch_sizes: Sequence[int]):
    """The late update of the at-read `features`: their schema.json entries, bucket counts and batch sizes.

    `buckets` maps a bucketized feature's name to `(counts per id, exact)` (`QuantileSketch.bucket_counts`).
    """
    return AT_READ, {
        "features": [{"name": f.name, **f.schema_fields(), "at_read": True} for f in features],
        "buckets": {name: {"counts": list(counts), "exact": bool(exact)} for name, (counts, exact) in buckets.items()},
        "batch_sizes": [int(b) for b in batch_sizes],
    }


def apply_at_read(schema: Schema, stats: dict, updates: Sequence[dict]) -> tuple[Schema, dict]:
    """`schema` with each at-read feature appended, `stats` with its entry (module doc).

    Raises:
      ValueError: a feature the schema already holds, or a source without a dense entry in `stats`.
    """
    features = dict(stats.get("features", {}))
    dense = dict(stats.get("dense", {}))
    added = []
    for update in updates:
        sizes = update["batch_sizes"]
        for entry in update["features"]:
            spec = FeatureSpec.from_dict(entry)
            if spec.name in schema.names:
                raise ValueError(f"at-read feature {spec.name!r} is already a column of the shards")
            derived = derived_of_feature(spec)
            source = dense.get(derived.source)
            if source is None:
                raise ValueError(f"at-read feature {spec.name!r}: stats.json has no dense entry for its source "
                                 f"{derived.source!r}")
            if isinstance(derived.spec, ScaleSpec):
                dense[spec.name] = mapped_value_stats(source, derived.spec, derived.source)
            else:
                counted = update["buckets"][spec.name]
                features[spec.name] = _bucket_entry(source, counted["counts"], counted["exact"], sizes)
            added.append(spec)
    if not added:
        return schema, stats
    return Schema([*schema.features, *added]), {**stats, "features": features, "dense": dense}


def _bucket_entry(source: dict, counts: Sequence[int], exact: bool, batch_sizes: Sequence[int]) -> dict:
    rows, missing = int(source["rows"]), int(source["missing"])
    lengths = LengthHistogram.of_counts([0, 1], [missing, rows - missing])
    counts = np.asarray(counts, np.int64)
    ids = np.flatnonzero(counts)
    order = ids[np.lexsort((ids, -counts[ids]))]  # count descending, then id ascending
    top = [[int(i), int(counts[i])] for i in order[:_TOP_IDS]]
    return feature_entry(lengths, int(ids.size), top, exact, batch_sizes)


def mapped_value_stats(entry: dict, spec: ScaleSpec, source: str) -> dict:
    """A dense stats.json entry (`transforms.beam._value_stats`) of the values `spec` maps `entry`'s to.

    Raises:
      ValueError: a method that is not an increasing map of the values (log1p changes their mean).
    """
    if spec.method == "log1p":
        raise ValueError("log1p is not derived at read: the mean of the logarithms is not the source's")

    def f(x):  # a value the column holds: rounded to float32, as the column's values are
        return float(spec.scale(np.asarray([x], np.float64))[0])

    out = {k: v for k, v in entry.items() if k not in ("min", "max", "mean", "quantiles", "histogram", "value_counts")}
    out["derived_from"] = source
    for key in ("min", "max"):
        if entry.get(key) is not None:
            out[key] = f(entry[key])
    if entry.get("mean") is not None:  # a mean of float32 values, computed in float64
        out["mean"] = float(spec.scale64(np.asarray([entry["mean"]], np.float64))[0])
    if "quantiles" in entry:
        out["quantiles"] = {k: f(v) for k, v in entry["quantiles"].items()}
    if "histogram" in entry:
        h = entry["histogram"]
        out["histogram"] = {**h, "edges": [f(e) for e in h["edges"]]}
    if "value_counts" in entry:
        out["value_counts"] = [[f(v), c] for v, c in entry["value_counts"]]
    return out
