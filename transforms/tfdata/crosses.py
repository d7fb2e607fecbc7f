"""`GraphCross`: the TensorFlow graph implementation of a `sparse_io.crosses.CrossSpec`.

The Arrow side (`CrossSpec.apply_arrow`) is what the Beam ingest runs; this
is what the exported serving signature runs on the same raw values. Both give
`keras.layers.HashedCrossing(num_bins)`'s ids, because this one calls the op
that layer calls (`tf.sparse.cross_hashed`) on the raw values.
"""

from __future__ import annotations

import tensorflow as tf

from sparse_io.crosses import CrossSpec
from transforms.tfdata.core.columns import MISSING_INT
from transforms.tfdata.ids import truncate

__all__ = ["GraphCross"]


def _as_sparse(values) -> tf.SparseTensor:
    """A `[B, None]` SparseTensor (int64 or string) of a dense `[B]` column or a ragged / sparse list column.

    A dense integer equal to `MISSING_INT` (the input pipeline's missing value) and a dense empty
    string are missing: their row holds no value, as a null cell does at ingest.
    """
    if isinstance(values, tf.SparseTensor):
        ragged = tf.RaggedTensor.from_sparse(values)
    elif isinstance(values, tf.RaggedTensor):
        ragged = values
    else:
        values = tf.convert_to_tensor(values)
        present = tf.not_equal(values, "") if values.dtype == tf.string else tf.not_equal(
            values, tf.cast(MISSING_INT, values.dtype) if values.dtype == tf.int64 else values.dtype.min)
        ragged = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(values, present),
                                                  tf.cast(present, tf.int64))
    flat = ragged.flat_values
    if flat.dtype.is_integer and flat.dtype != tf.int64:
        ragged = ragged.with_flat_values(tf.cast(flat, tf.int64))
    elif flat.dtype != tf.int64 and flat.dtype != tf.string:
        raise ValueError(f"GraphCross: only strings and integers can be crossed, got {flat.dtype.name}")
    return ragged.to_sparse()


class GraphCross(tf.Module):
    """Cross ids of raw columns: `[B, None]` int64 RaggedTensor, equal to `CrossSpec.apply_arrow`'s rows.

    Call it with the source columns in `spec.sources` order, each a dense `[B]`
    tensor (one value per row) or a RaggedTensor / SparseTensor `[B, None]`
    (a list per row), strings or integers.

    Example:
      >>> cross = GraphCross(CrossSpec(("user", "occupation"), 1000))
      >>> cross([tf.constant(["a", "b"]), tf.constant([1, 2], tf.int64)]).to_list()
      [[485], [357]]
    """

    def __init__(self, spec: CrossSpec, name: str | None = None):
        super().__init__(name=name)
        if not isinstance(spec, CrossSpec):
            raise ValueError(f"GraphCross: not a CrossSpec: {spec!r}")
        self.spec = spec

    def __call__(self, columns):
        """`[B, None]` int64 cross ids of `columns` (one per source, in order)."""
        if len(columns) != len(self.spec.sources):
            raise ValueError(f"GraphCross: {len(self.spec.sources)} columns expected ({list(self.spec.sources)}), "
                             f"got {len(columns)}")
        crossed = tf.sparse.cross_hashed([_as_sparse(c) for c in columns], num_buckets=self.spec.num_bins)
        # from_sparse takes the row count from dense_shape, which is the batch's: trailing empty rows stay.
        return truncate(tf.RaggedTensor.from_sparse(crossed), self.spec.max_per_row, keep="first")
