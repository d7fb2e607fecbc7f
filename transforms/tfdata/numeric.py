"""`GraphNumericMap`: the TensorFlow graph implementation of a bucketize or scale spec (`sparse_io.numeric_maps`).

The Beam ingest applies a derived feature's spec to Arrow arrays
(`spec.apply_arrow`); `make_log_dataset` and the exported serving signature
apply the same spec here, in graph ops, so the three give a value the same
bucket id or the same scaled float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from sparse_io.numeric_maps import BucketizeSpec, DerivedFeature, NumericSpec, ScaleSpec
from sparse_io.schema import Schema
from transforms.tfdata.core.columns import MISSING_INT, Column

__all__ = ["GraphNumericMap", "missing_mask", "derived_columns"]


def missing_mask(values: tf.Tensor, missing_int: int = MISSING_INT) -> tf.Tensor:
    """True where a parsed dense value is missing: NaN for floats, `missing_int` (the int64 minimum) for ints."""
    if values.dtype.is_floating:
        return tf.math.is_nan(values)
    return tf.equal(values, tf.cast(missing_int, values.dtype))


class GraphNumericMap(tf.Module):
    """Applies a `BucketizeSpec` or `ScaleSpec` to a `[B]` tensor of source values, as `spec.apply_arrow` does.

    Called with the values (int64, int32, float32 or float64, in the dtype
    the ingest read the source column as) and a `[B]` bool mask of the
    missing ones, it returns:
      a bucketize spec: a `[B, None]` int64 RaggedTensor, one id per present
        row (`tf.raw_ops.Bucketize`, what `keras.layers.Discretization` runs),
        an empty row where the value is missing;
      a scale spec: `[B]` float32, NaN where the value is missing (or, for
        log1p, <= -1).

    Example:
      >>> m = GraphNumericMap(BucketizeSpec((18.0, 25.0)))
      >>> m(tf.constant([17, 18, 30], tf.int64), tf.constant([False, True, False])).to_list()
      [[0], [], [2]]
    """

    def __init__(self, spec: NumericSpec, name: str | None = None):
        super().__init__(name=name)
        if not isinstance(spec, (BucketizeSpec, ScaleSpec)):
            raise ValueError(f"GraphNumericMap: not a numeric spec: {spec!r}")
        self.spec = spec

    def __call__(self, values: tf.Tensor, missing: tf.Tensor):
        """The derived feature of `[B]` source `values`, `missing` `[B]` bool marking the absent ones (class doc)."""
        values = tf.convert_to_tensor(values)
        present = tf.logical_not(missing)
        if values.dtype.is_floating:
            present = tf.logical_and(present, tf.logical_not(tf.math.is_nan(values)))
        if isinstance(self.spec, BucketizeSpec):
            kept = tf.boolean_mask(values, present)
            # The int64 kernel compares in float32, as numpy does after astype(float32): the same ids.
            ids = tf.cast(tf.raw_ops.Bucketize(input=kept, boundaries=list(self.spec.boundaries)), tf.int64)
            return tf.RaggedTensor.from_row_lengths(ids, tf.cast(present, tf.int64), validate=False)
        scaled = tf.cast(self._scale(tf.cast(values, tf.float64)), tf.float32)
        return tf.where(present, scaled, tf.constant(float("nan"), tf.float32))

    def _scale(self, x: tf.Tensor) -> tf.Tensor:
        spec = self.spec
        mean, std, low, high = spec.parameters()
        if spec.method == "z_score":
            centred = x - tf.constant(mean, tf.float64)
            return centred / tf.constant(std, tf.float64) if std > 0 else centred
        if spec.method == "min_max":
            if high > low:
                return (x - tf.constant(low, tf.float64)) / tf.constant(high - low, tf.float64)
            return 1.0 / (1.0 + tf.exp(-x))
        defined = x > -1.0
        return tf.where(defined, tf.math.log1p(tf.where(defined, x, tf.zeros_like(x))),
                        tf.constant(float("nan"), tf.float64))


def derived_columns(derived: Sequence[DerivedFeature], schema: Schema, features: Sequence[str] | None
                    ) -> tuple[list[str] | None, list[str], list[Column], Callable]:
    """What a log source needs to deliver `derived` features beside the schema's own columns.

    Returns `features` less the derived names (None stays None), the source
    columns to parse, the derived features' output `Column`s (one-id sparse
    int64, or dense float32), and a function that adds the derived columns
    to a dict of parsed columns (the sources' `[B]` values, NaN or
    `MISSING_INT` where missing).

    Raises:
      ValueError: a source that is not a dense number column of `schema`, or
        a derived name that is a column of `schema`.
    """
    names = {f.name for f in derived}
    for feature in derived:
        if feature.name in schema:
            raise ValueError(f"derived feature {feature.name!r} is a column of the schema; it needs a new name")
        spec = schema[feature.source] if feature.source in schema else None
        if spec is None or spec.kind != "dense" or spec.dtype == "string":
            raise ValueError(f"derived feature {feature.name!r}: its source {feature.source!r} is not a dense number "
                             "column of the schema")
    maps = [(f, GraphNumericMap(f.spec)) for f in derived]
    out = [Column(f.name, "sparse", "int64") if isinstance(f.spec, BucketizeSpec) else Column(f.name, "dense",
                                                                                              "float32")
           for f in derived]

    def add(raw: dict) -> dict:
        raw = dict(raw)
        for feature, graph_map in maps:
            values = raw[feature.source]
            raw[feature.name] = graph_map(values, missing_mask(values, MISSING_INT))
        return raw

    kept = None if features is None else [n for n in features if n not in names]
    return kept, sorted({f.source for f in derived}), out, add
