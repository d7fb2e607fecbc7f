"""The crosses of an ingest config: `features:` entries with a `cross:` key, keyed by the cross's new name.

    features:
      user_x_occ: {cross: [user_id, occupation], hash_buckets: 100000}
      site_x_app: {cross: [site_id, app_id], hash_buckets: 1000000, max_per_row: 64}

A cross is a new sparse feature whose ids are `keras.layers.HashedCrossing(
num_bins=hash_buckets)` of its sources' raw values (before their own hashing or
lookup; `sparse_io.crosses`). Sources are sparse columns (strings or integers)
or integer dense columns, listed in order (the order changes the ids). List
sources cross as the Cartesian product of a row's lists, at most
`max_per_row` crosses a row (default `sparse_io.crosses.DEFAULT_MAX_CROSSES_PER_ROW`);
what the cap drops is counted in stats.json (`cross_overflow`).

Example:
  >>> from sparse_io.schema import FeatureSpec, Schema
  >>> schema = Schema([FeatureSpec("u", dtype="string"), FeatureSpec("o", "dense", "int64")])
  >>> rest, crosses = split_crosses({"u": {"hash_buckets": 10}, "x": {"cross": ["u", "o"], "hash_buckets": 7}},
  ...                               schema, None)
  >>> sorted(rest), crosses[0].spec.sources
  (['u'], ('u', 'o'))
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pipelines import config_limits as limits
from pipelines.config_keys import section_types
from sparse_io.crosses import DEFAULT_MAX_CROSSES_PER_ROW, CrossSpec
from sparse_io.id_space import cross_fingerprint
from sparse_io.schema import FeatureSpec, Schema

__all__ = ["CrossPlan", "CrossKeyError", "split_crosses", "cross_feature_spec"]

_KEYS = tuple(section_types("features.<cross>"))


@dataclasses.dataclass(frozen=True)
class CrossPlan:
    """One cross of the config: its new feature `name` and how its ids are made (`spec`)."""

    name: str
    spec: CrossSpec


class CrossKeyError(ValueError):
    """A cross entry is invalid: `path` is the config key at fault, the message says why."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


def _fail(path: str, message: str) -> CrossKeyError:
    return CrossKeyError(path, message)


def _count(settings: dict, key: str, path: str, default: int | None, high: int | None = None) -> int:
    value = settings.get(key, default)
    if value is None:
        raise _fail(f"{path}.{key}", "is required (the number of buckets the crosses are hashed into)")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"{path}.{key}", limits.not_an_integer(value))
    if value <= 0:
        raise _fail(f"{path}.{key}", f"must be positive, got {value}")
    if high is not None:
        try:
            limits.check_at_most(value, high)
        except ValueError as e:
            raise _fail(f"{path}.{key}", str(e)) from None
    return value


def _check_source(schema: Schema, column: Any, path: str) -> str:
    if not isinstance(column, str) or column not in schema:
        raise _fail(path, f"names {column!r}, which is not a column of the schema ({', '.join(schema.names)})")
    spec = schema[column]
    if spec.kind == "label":
        raise _fail(path, f"{column!r} is the label; a cross takes ids (sparse columns, integer dense columns)")
    if spec.kind == "dense" and spec.dtype not in ("int64", "int32"):
        raise _fail(path, f"{column!r} is a dense {spec.dtype} column; a cross takes ids (sparse columns, "
                          "integer dense columns): bucketize it first")
    if spec.kind == "sparse" and spec.dtype not in ("string", "int64", "int32"):
        raise _fail(path, f"{column!r} holds {spec.dtype} values; a cross takes strings or integers")
    return column


def split_crosses(raw: Any, schema: Schema, histories) -> tuple[Any, tuple[CrossPlan, ...]]:
    """(`raw` without its cross entries, the crosses) of the config's `features:` mapping.

    Raises:
      CrossKeyError: (`pipelines.config` makes it a ConfigError) a cross entry with an
        unknown key, fewer than two sources, a source that is not a column, the label, a float column, a repeated
        source, a name already a column, no or a bad `hash_buckets`, or
        crosses in a history ingest.
    """
    if not isinstance(raw, dict):
        return raw, ()
    rest, plans = {}, []
    for name, settings in raw.items():
        if not (isinstance(settings, dict) and "cross" in settings):
            rest[name] = settings
            continue
        path = f"features.{name}"
        unknown = sorted(set(settings) - set(_KEYS))
        if unknown:
            raise _fail(f"{path}.{unknown[0]}", f"unknown key of a cross (allowed: {', '.join(_KEYS)})")
        if histories is not None:
            raise _fail(f"{path}.cross", "crosses are computed on flat logs; a history ingest cannot take them yet")
        bad = limits.check_feature_names([name])
        if bad is not None:
            raise _fail(path, bad[1])
        if name in schema:
            raise _fail(path, f"a cross is a new feature; {name!r} is already a column of the schema")
        sources = settings["cross"]
        if not isinstance(sources, list) or len(sources) < 2:
            raise _fail(f"{path}.cross", f"must list at least two columns, got {sources!r}")
        for i, column in enumerate(sources):
            _check_source(schema, column, f"{path}.cross[{i}]")
            if sources.index(column) != i:
                raise _fail(f"{path}.cross[{i}]", f"{column!r} is listed twice")
        spec = CrossSpec(tuple(sources), _count(settings, "hash_buckets", path, None, limits.MAX_HASH_BUCKETS),
                         _count(settings, "max_per_row", path, DEFAULT_MAX_CROSSES_PER_ROW))
        plans.append(CrossPlan(name, spec))
    return rest, tuple(plans)


def cross_feature_spec(plan: CrossPlan) -> FeatureSpec:
    """The schema.json entry of a cross: a sparse int64 feature with its buckets, sources and cap."""
    spec = plan.spec
    return FeatureSpec(plan.name, "sparse", "int64", hash_buckets=spec.num_bins, cross=spec.sources,
                       cross_max_per_row=spec.max_per_row, id_space=cross_fingerprint(spec))
