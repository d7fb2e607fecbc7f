"""Derived features of the `features:` section: bucketize and scale a number column at ingest.

An entry of `features:` with a `source` key is a new feature, keyed by its
new name, computed from that (dense, numeric) column of the schema::

    features:
      age_bucket: {source: age, bucketize: {boundaries: [18, 25, 35, 50]}}  # one id in [0, 4]
      ts_bucket:  {source: timestamp, bucketize: {quantiles: 10}}          # boundaries computed at ingest
      price_z:    {source: price, scale: z_score}                          # also min_max, log1p

The source column stays in the shards as its own feature. `split_derived`
takes these entries out of the section (the rest are id plans of sparse
features) and checks them; `sparse_io.numeric_maps` says what each mapping
computes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pipelines import config_limits as limits
from pipelines.config_keys import section_types
from sparse_io.numeric_maps import SCALE_METHODS, BucketizeSpec, DerivedFeature, ScaleSpec, float32_boundaries
from sparse_io.schema import Schema

__all__ = ["DerivedPlan", "DerivedKeyError", "split_derived", "MAX_QUANTILES"]

# Past a few hundred buckets the sketch's rank error (<= 0.01) is wider than a bucket.
MAX_QUANTILES = 1000
_KEYS = tuple(section_types("features.<derived>"))
_BUCKETIZE_KEYS = tuple(section_types("features.<derived>.bucketize"))


class DerivedKeyError(ValueError):
    """A derived feature is misconfigured; `key` is the full config key path to name."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(message)


@dataclasses.dataclass(frozen=True)
class DerivedPlan:
    """A derived feature as configured: `boundaries` or `quantiles` to bucketize, or a `scale` method."""

    name: str
    source: str
    boundaries: tuple[float, ...] | None = None
    quantiles: int | None = None
    scale: str | None = None
    # Parameters taken from another ingest (`--vocab_from`): the feature as it was made there, not analysed again.
    reused: DerivedFeature | None = None

    @property
    def needs_analysis(self) -> bool:
        """True when parameters come from the data: quantile boundaries, z_score or min_max."""
        if self.reused is not None:
            return False
        return self.quantiles is not None or self.scale in ("z_score", "min_max")

    def fixed(self) -> DerivedFeature | None:
        """The final feature when no data is needed (given boundaries, log1p, or reused), else None."""
        if self.reused is not None:
            return self.reused
        if self.boundaries is not None:
            return DerivedFeature(self.name, self.source, BucketizeSpec(self.boundaries))
        if self.scale == "log1p":
            return DerivedFeature(self.name, self.source, ScaleSpec("log1p"))
        return None


def _is_derived(value: Any) -> bool:
    return isinstance(value, dict) and "source" in value


def split_derived(raw: Any, schema: Schema, *, histories: bool) -> tuple[Any, tuple[DerivedPlan, ...]]:
    """The `features:` section without its derived entries, and those entries checked, in config order.

    Raises:
      DerivedKeyError: naming the key: an unknown key, a source that is not a
        column (or not a dense number column), a name that clashes with a
        column, both or neither of bucketize and scale, boundaries not
        strictly increasing, quantiles below 2, an unknown scale, or derived
        features in a history ingest.
    """
    if not isinstance(raw, dict):
        return raw, ()
    plans = []
    for name, entry in raw.items():
        if not _is_derived(entry):
            continue
        path = f"features.{name}"
        if histories:
            raise DerivedKeyError(path, "derived features (source:) apply to event logs, not to a histories ingest")
        plans.append(_plan(name, entry, schema, path))
    return {k: v for k, v in raw.items() if not _is_derived(v)}, tuple(plans)


def _plan(name: str, entry: dict, schema: Schema, path: str) -> DerivedPlan:
    unknown = sorted(set(entry) - set(_KEYS))
    if unknown:
        raise DerivedKeyError(f"{path}.{unknown[0]}", f"unknown key of a derived feature (allowed: {', '.join(_KEYS)})")
    try:
        limits.check_feature_name(name)
    except ValueError as e:
        raise DerivedKeyError(path, str(e)) from None
    if name in schema:
        raise DerivedKeyError(path, f"{name!r} is a column of the schema; a derived feature needs a new name")
    source = entry["source"]
    if not isinstance(source, str) or source not in schema:
        raise DerivedKeyError(f"{path}.source", f"names {source!r}, which is not a column of the schema "
                                                f"({', '.join(schema.names)})")
    spec = schema[source]
    if "bucketize" in entry and "scale" in entry:
        raise DerivedKeyError(path, "give either bucketize or scale, not both")
    if "bucketize" not in entry and "scale" not in entry:
        raise DerivedKeyError(path, "needs bucketize: {boundaries: [...]} or {quantiles: N}, or scale: "
                                    f"{' | '.join(SCALE_METHODS)}")
    key = "bucketize" if "bucketize" in entry else "scale"
    if spec.kind != "dense":
        raise DerivedKeyError(f"{path}.source", f"{source!r} is {spec.kind}; a derived feature reads a dense "
                                                "column (one number per row)")
    if spec.dtype == "string":
        raise DerivedKeyError(f"{path}.{key}", f"{source!r} is a string column; {key} takes a number column")
    if key == "scale":
        method = entry["scale"]
        if method not in SCALE_METHODS:
            raise DerivedKeyError(f"{path}.scale", f"must be one of {', '.join(SCALE_METHODS)}, got {method!r}")
        return DerivedPlan(name, source, scale=method)
    return _bucketize(name, source, entry["bucketize"], f"{path}.bucketize")


def _bucketize(name: str, source: str, value: Any, path: str) -> DerivedPlan:
    if not isinstance(value, dict) or len(set(value) & set(_BUCKETIZE_KEYS)) != 1:
        raise DerivedKeyError(path, f"must be {{boundaries: [...]}} or {{quantiles: N}}, got {value!r}")
    unknown = sorted(set(value) - set(_BUCKETIZE_KEYS))
    if unknown:
        raise DerivedKeyError(f"{path}.{unknown[0]}", f"unknown key (allowed: {', '.join(_BUCKETIZE_KEYS)})")
    if "quantiles" in value:
        n = value["quantiles"]
        if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= MAX_QUANTILES:
            raise DerivedKeyError(f"{path}.quantiles", f"must be an integer from 2 to {MAX_QUANTILES}, got {n!r}")
        return DerivedPlan(name, source, quantiles=n)
    boundaries = value["boundaries"]
    if not isinstance(boundaries, list) or not boundaries or any(
            isinstance(b, bool) or not isinstance(b, (int, float)) for b in boundaries):
        raise DerivedKeyError(f"{path}.boundaries", f"must be a non-empty list of numbers, got {boundaries!r}")
    try:
        return DerivedPlan(name, source, boundaries=float32_boundaries(boundaries))
    except ValueError as e:
        raise DerivedKeyError(f"{path}.boundaries", str(e)) from None


def reuse_derived(plans: tuple[DerivedPlan, ...], source: Schema) -> tuple[DerivedPlan, ...]:
    """`plans` with the features another ingest (whose schema.json is `source`) made: its parameters, not new ones.

    Bucket boundaries and scale parameters belong to the training data, as
    vocabularies do: a held-out ingest applies them as they are.

    Raises:
      ValueError: a plan's feature is absent from `source`, was not derived
        there, or was derived from another column or by another mapping.
    """
    from sparse_io.numeric_maps import derived_of_feature

    out = []
    for plan in plans:
        if plan.name not in source:
            raise ValueError(f"derived feature {plan.name!r} is not in its schema.json")
        made = derived_of_feature(source[plan.name])
        if made is None:
            raise ValueError(f"feature {plan.name!r} has no transform in its schema.json (it was not derived there)")
        wanted = "bucketize" if plan.scale is None else plan.scale
        there = "bucketize" if isinstance(made.spec, BucketizeSpec) else made.spec.method
        if made.source != plan.source or wanted != there:
            raise ValueError(f"feature {plan.name!r} was made there from {made.source!r} by {there}, "
                             f"the config asks {plan.source!r} by {wanted}")
        out.append(dataclasses.replace(plan, reused=made))
    return tuple(out)


def with_derived_columns(schema: Schema, plans: tuple[DerivedPlan, ...]) -> Schema:
    """`schema` with a column for each derived feature appended: a one-id sparse int64 list or a dense float32.

    Their id ranges and parameters are known once the data was analysed; the
    ingest adds them to schema.json then (`DerivedFeature.schema_fields`).
    """
    from sparse_io.schema import FeatureSpec

    added = [FeatureSpec(p.name, "dense", "float32") if p.scale else FeatureSpec(p.name, "sparse", "int64")
             for p in plans]
    return Schema([*schema.features, *added])
