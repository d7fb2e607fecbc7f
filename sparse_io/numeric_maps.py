"""How a number becomes a model input: bucketize and scale specs, applied to Arrow arrays here.

A derived feature reads one scalar (dense) source column and becomes

* `BucketizeSpec(boundaries)`: a one-id sparse feature whose id is the
  index `keras.layers.Discretization(bin_boundaries=boundaries)` gives
  (`tf.raw_ops.Bucketize`: the count of boundaries <= the value, so a value
  equal to a boundary goes to the bucket above it). Boundaries are float32,
  strictly increasing; a float64 value is compared with them in float64,
  any other value (int64, int32, float32) in float32, as the TensorFlow
  kernel does. Ids lie in `[0, len(boundaries)]`.
* `ScaleSpec(method, ...)`: a dense float32 feature:
  `z_score` `(x - mean) / std` with the population standard deviation (and
  `x - mean` where std is 0), as tf.Transform's `scale_to_z_score`;
  `min_max` `(x - min) / (max - min)` (the sigmoid of x where max == min),
  as tf.Transform's `scale_to_0_1`; `log1p` `log(1 + x)`. The arithmetic is
  float64, rounded to float32 at the end.

Missing source values (null or NaN) stay missing: a bucketized row has no
id (an empty row, not a bucket of its own), a scaled value is null (NaN in
tensors, with the dense features' missing flag). `log1p` of a value <= -1
has no real logarithm and is missing too (counted among the derived
column's `missing` in stats.json).

Each spec has two implementations that give the same output for the same
values: `apply_arrow` here (numpy over Arrow buffers, no TensorFlow: the
Beam ingest) and `transforms.tfdata.numeric.GraphNumericMap` (TensorFlow
graph ops: `make_log_dataset` and the exported serving signature).
schema.json records a derived feature's spec under its `transform` key
(`DerivedFeature.record`); `derived_of_feature` reads it back.

Example:
  >>> BucketizeSpec((18.0, 25.0)).apply_arrow(pa.array([17, 18, None, 30])).to_pylist()
  [[0], [1], [], [2]]
  >>> ScaleSpec("z_score", mean=2.0, std=2.0).apply_arrow(pa.array([4.0, None])).to_pylist()
  [1.0, None]
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.schema import FeatureSpec, SchemaError

__all__ = ["BucketizeSpec", "ScaleSpec", "NumberColumn", "DerivedFeature", "NumericSpec", "SCALE_METHODS",
           "derived_of_feature", "float32_boundaries", "append_derived_columns", "bucketize_fingerprint",
           "derived_features"]

SCALE_METHODS = ("z_score", "min_max", "log1p")


def float32_boundaries(values) -> tuple[float, ...]:
    """`values` rounded to float32 (the precision of `tf.raw_ops.Bucketize`'s boundaries) as Python floats.

    Raises:
      ValueError: a value that is not a finite number, or values not strictly increasing once rounded.
    """
    try:
        as64 = np.asarray(list(values), dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"boundaries must be numbers, got {list(values)!r}") from None
    if as64.ndim != 1 or not np.all(np.isfinite(as64)):
        raise ValueError(f"boundaries must be finite numbers, got {list(values)!r}")
    rounded = as64.astype(np.float32)
    if np.any(np.diff(rounded) <= 0):
        raise ValueError(f"boundaries must be sorted ascending without repeats (as float32), got {list(values)!r}")
    return tuple(float(b) for b in rounded)


def bucketize_fingerprint(boundaries: tuple[float, ...]) -> str:
    """The id space of a bucketized feature: its boundaries (as `sparse_io.id_space` fingerprints id spaces)."""
    head = json.dumps({"kind": "bucketize", "boundaries": list(boundaries)}).encode("utf-8")
    return "bucketize:sha256:" + hashlib.sha256(head).hexdigest()[:32]


_NUMPY_OF = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
             pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32, pa.uint64(): np.uint64,
             pa.float32(): np.float32, pa.float64(): np.float64}


@dataclasses.dataclass
class NumberColumn:
    """One number column read once for every map of it: its values and which of them are present.

    Attributes:
      values: the values in their own dtype, `[rows]`; a missing value's slot holds some number (unspecified).
      present: bool `[rows]`: not null and not NaN.
      type: the Arrow type of the column.

    `of` reads the Arrow buffers without copying them; `present_values` (float64, computed once) feeds the
    analyzers, so a source bucketized and scaled is converted once per batch.

    Example:
      >>> c = NumberColumn.of(pa.array([3, None, 5]))
      >>> c.present.tolist(), c.present_values().tolist()
      ([True, False, True], [3.0, 5.0])
    """

    values: np.ndarray
    present: np.ndarray
    type: pa.DataType
    _float64: np.ndarray | None = None
    _own: np.ndarray | None = None
    _count: int | None = None

    @classmethod
    def of(cls, column: pa.Array | pa.ChunkedArray | NumberColumn) -> NumberColumn:
        """The column's values and presence.

        Raises:
          ValueError: a column that is not of an integer or floating type.
        """
        if isinstance(column, NumberColumn):
            return column
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        dtype = _NUMPY_OF.get(column.type)
        if dtype is None:
            if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
                raise ValueError(f"a numeric map needs a number column, got {column.type}")
            # float16: widened by Arrow (no zero-copy view)
            values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False)
        else:
            data = column.buffers()[1]
            values = np.frombuffer(data, dtype)[column.offset: column.offset + len(column)] if data is not None \
                else np.zeros(len(column), dtype)
        if column.null_count:
            present = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        else:
            present = np.ones(len(column), dtype=bool)
        if pa.types.is_floating(column.type):
            present = present & ~np.isnan(values)
        return cls(values, present, column.type)

    @property
    def count(self) -> int:
        """How many values are present."""
        if self._count is None:
            self._count = int(np.count_nonzero(self.present))
        return self._count

    def present_values(self) -> np.ndarray:
        """float64 `[count]`: the present values, in row order."""
        if self._float64 is None:
            self._float64 = self.present_own().astype(np.float64)
        return self._float64

    def present_own(self) -> np.ndarray:
        """`[count]`: the present values in the column's own dtype, in row order (a view when all are present)."""
        if self._own is None:
            self._own = self.values if self.count == len(self.values) else self.values[self.present]
        return self._own


def _bitmap(present: np.ndarray, count: int) -> pa.Buffer | None:
    """An Arrow validity bitmap of `present` (None when every row is present)."""
    if count == len(present):
        return None
    return pa.py_buffer(np.packbits(present, bitorder="little"))


@dataclasses.dataclass(frozen=True)
class BucketizeSpec:
    """Ids are `keras.layers.Discretization(bin_boundaries=boundaries)`'s indices of the values (module doc).

    Attributes:
      boundaries: strictly increasing, float32-representable (`float32_boundaries`).
    """

    boundaries: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "boundaries", float32_boundaries(self.boundaries))

    @property
    def id_range(self) -> int:
        """Ids lie in `[0, id_range)`."""
        return len(self.boundaries) + 1

    def ids(self, values: np.ndarray) -> np.ndarray:
        """int64 bucket ids of present values (numpy, any int or float dtype), as `tf.raw_ops.Bucketize` gives."""
        edges = np.asarray(self.boundaries, dtype=np.float32)
        if values.dtype == np.float64:
            return np.searchsorted(edges.astype(np.float64), values, side="right").astype(np.int64)
        return np.searchsorted(edges, values.astype(np.float32), side="right").astype(np.int64)

    def apply_arrow(self, column: pa.Array | pa.ChunkedArray | NumberColumn) -> pa.Array:
        """A `list<int64>` column: one id per row with a value, an empty row where the value is missing."""
        c = NumberColumn.of(column)
        ids = self.ids(c.values if c.count == len(c.values) else c.values[c.present])
        offsets = np.zeros(len(c.values) + 1, dtype=np.int32)
        np.cumsum(c.present, out=offsets[1:])
        return pa.Array.from_buffers(pa.list_(pa.int64()), len(c.values), [None, pa.py_buffer(offsets)],
                                     null_count=0, children=[pa.array(ids, pa.int64())])


@dataclasses.dataclass(frozen=True)
class ScaleSpec:
    """A dense float32 feature scaled from its source: `method` with the ingest's parameters (module doc).

    Attributes:
      method: "z_score" (needs mean, std), "min_max" (low, high) or "log1p" (none).
    """

    method: str
    mean: float | None = None
    std: float | None = None
    low: float | None = None
    high: float | None = None

    def __post_init__(self) -> None:
        if self.method not in SCALE_METHODS:
            raise ValueError(f"scale must be one of {', '.join(SCALE_METHODS)}, got {self.method!r}")
        needed = {"z_score": ("mean", "std"), "min_max": ("low", "high"), "log1p": ()}[self.method]
        for key in ("mean", "std", "low", "high"):
            value = getattr(self, key)
            if key in needed and (value is None or not np.isfinite(value)):
                raise ValueError(f"scale {self.method}: {key} must be a finite number, got {value!r}")
            if key not in needed and value is not None:
                raise ValueError(f"scale {self.method}: takes no {key}")
            if value is not None:
                object.__setattr__(self, key, float(value))
        mean, std, low, high = self.parameters()
        if self.method == "z_score" and std < 0 or self.method == "min_max" and high < low:
            raise ValueError(f"scale {self.method}: parameters out of order: {self}")

    def parameters(self) -> tuple[float, float, float, float]:
        """(mean, std, low, high), 0.0 for those the method does not take."""
        def given(value: float | None) -> float:
            return 0.0 if value is None else value

        return given(self.mean), given(self.std), given(self.low), given(self.high)

    def scale(self, values: np.ndarray) -> np.ndarray:
        """float32 scaled values of float64 `values` (NaN stays NaN; log1p of x <= -1 is NaN)."""
        return self.scale64(values).astype(np.float32)

    def scale64(self, values: np.ndarray) -> np.ndarray:
        """`scale` before its rounding to float32: float64."""
        x = values.astype(np.float64)
        mean, std, low, high = self.parameters()
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if self.method == "z_score":
                out = (x - mean) / std if std > 0 else x - mean
            elif self.method == "min_max":
                out = (x - low) / (high - low) if high > low else 1.0 / (1.0 + np.exp(-x))
            else:
                out = np.where(x > -1.0, np.log1p(np.where(x > -1.0, x, 0.0)), np.nan)
        return out

    def apply_arrow(self, column: pa.Array | pa.ChunkedArray | NumberColumn) -> pa.Array:
        """A nullable float32 column: the scaled values, null where the value is missing (or has no log1p)."""
        c = NumberColumn.of(column)
        out = self.scale(c.values)
        present, count = c.present, c.count
        # z_score and min_max of a present (finite or infinite) value is never NaN; log1p of x <= -1 is.
        if self.method == "log1p":
            present = present & ~np.isnan(out)
            count = int(np.count_nonzero(present))
        return pa.Array.from_buffers(pa.float32(), len(out), [_bitmap(present, count), pa.py_buffer(out)],
                                     null_count=len(out) - count)


NumericSpec = BucketizeSpec | ScaleSpec


@dataclasses.dataclass(frozen=True)
class DerivedFeature:
    """A feature computed from one source column: its name, the source, and the spec (final, with parameters)."""

    name: str
    source: str
    spec: NumericSpec
    quantiles: int | None = None  # the boundaries came from this many quantiles of the source

    def record(self) -> dict:
        """The `transform` entry of schema.json: the source and every parameter needed to apply it again."""
        if isinstance(self.spec, BucketizeSpec):
            bucketize: dict = {"boundaries": list(self.spec.boundaries)}
            if self.quantiles is not None:
                bucketize["quantiles"] = self.quantiles
            return {"source": self.source, "bucketize": bucketize}
        params = {k: getattr(self.spec, k) for k in ("mean", "std", "low", "high") if getattr(self.spec, k) is not None}
        return {"source": self.source, "scale": self.spec.method, **params}

    def schema_fields(self) -> dict:
        """The FeatureSpec fields of the derived column in schema.json."""
        if isinstance(self.spec, BucketizeSpec):
            return {"kind": "sparse", "dtype": "int64", "vocabulary_size": self.spec.id_range,
                    "id_space": bucketize_fingerprint(self.spec.boundaries), "transform": self.record()}
        return {"kind": "dense", "dtype": "float32", "transform": self.record()}

    def feature_spec(self) -> FeatureSpec:
        """The derived column's schema.json entry."""
        return FeatureSpec(self.name, **self.schema_fields())


def append_derived_columns(table: pa.Table | pa.RecordBatch, derived) -> pa.Table | pa.RecordBatch:
    """`table` with a column per `DerivedFeature` of `derived` appended (named by the feature), in order.

    Each source is read once, however many features derive from it; a name the table already holds is
    refused (ValueError), as is a source it lacks (KeyError naming it).
    """
    sources: dict[str, NumberColumn] = {}
    out = table
    for feature in derived:
        if feature.name in table.column_names:
            raise ValueError(f"derived feature {feature.name!r} is already a column")
        if feature.source not in sources:
            if feature.source not in table.column_names:
                raise KeyError(f"derived feature {feature.name!r}: no source column {feature.source!r}")
            sources[feature.source] = NumberColumn.of(table.column(feature.source))
        column = feature.spec.apply_arrow(sources[feature.source])
        out = out.append_column(pa.field(feature.name, column.type), column)
    return out


def derived_of_feature(spec: FeatureSpec) -> DerivedFeature | None:
    """The derived feature schema.json records for `spec` (its `transform` key), or None for a read column.

    Raises:
      SchemaError: a `transform` entry that is malformed, naming the feature.
    """
    record = spec.transform
    if record is None:
        return None
    try:
        source = record["source"]
        if "bucketize" in record:
            bucketize = record["bucketize"]
            return DerivedFeature(spec.name, source, BucketizeSpec(tuple(bucketize["boundaries"])),
                                  bucketize.get("quantiles"))
        params = {k: record[k] for k in ("mean", "std", "low", "high") if k in record}
        return DerivedFeature(spec.name, source, ScaleSpec(record["scale"], **params))
    except (KeyError, TypeError, ValueError) as e:
        raise SchemaError(f"feature {spec.name!r}: schema.json's transform {record!r} is malformed ({e})") from None


def derived_features(schema) -> list[DerivedFeature]:
    """Every derived feature an ingest recorded in its schema.json (a `Schema`), in schema order.

    Raises:
      SchemaError: a malformed `transform` entry.
    """
    found = (derived_of_feature(spec) for spec in schema)
    return [f for f in found if f is not None]
