"""`to_coo`: convert_to_coo for the batch types users hold (RaggedTensor, SparseTensor, CsrBatch)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ops._coo_checks import Checks, label
from ops.convert_to_coo import convert_to_coo
from ops.coo import Coo
from sparse_io.csr import CsrBatch

__all__ = ["to_coo"]


# Plain TF ops and Python control flow on static facts only: nothing for autograph to convert,
# and converting it would multiply the tracing time.
@tf.autograph.experimental.do_not_convert
def to_coo(
    x: tf.RaggedTensor | tf.SparseTensor | CsrBatch,
    *,
    weights: tf.RaggedTensor | tf.SparseTensor | float | None = None,
    combiner: str = "sum",
    validate: bool = True,
    name: str | None = None,
) -> Coo:
    """`convert_to_coo` on a whole batch; the sample count is the batch's row count.

    Everything after `x` is keyword-only, as in `transforms.to_coo` (which
    converts a dict of features), so neither is called with the other's
    argument order.

    Args:
      x: a `[S, None]` `tf.RaggedTensor` (ragged_rank 1), a 2-D `tf.SparseTensor`
        whose indices are sorted by row, or a `sparse_io.CsrBatch`.
      weights: None (every id weighs 1.0, no weight array is made), a float
        (every id weighs that), or per-id weights shaped like `x`: a float32
        RaggedTensor with the same row_splits, or a float32 SparseTensor with
        the same indices. A CsrBatch carries its own weights, so `weights`
        must be None for it.
      combiner: "sum", "mean" or "sqrtn" (see `convert_to_coo`).
      validate: as in `convert_to_coo`; also checks that per-id weights line
        up with `x`.
      name: feature name for error messages.

    Returns:
      An `ops.Coo(row_ids int32, col_ids, gains float32, sample_count)` as
      `convert_to_coo` returns it; sample_count is the batch's row count (a
      Python int when the static shape knows it, else an int32 scalar tensor).

    Raises:
      ValueError: an unsupported type, rank or dtype, or weights whose static
        shape differs from `x`'s.
      tf.errors.InvalidArgumentError: weights whose row_splits or indices
        differ from `x`'s, and every run-time error of `convert_to_coo`.

    Example:
      >>> ids = tf.ragged.constant([[3, 3, 1], [], [2]], dtype=tf.int64)
      >>> rows, cols, gains, samples = to_coo(ids, combiner="sqrtn")
      >>> rows.numpy().tolist(), cols.numpy().tolist(), [round(float(g), 4) for g in gains]
      ([0, 0, 2], [3, 1, 2], [1.1547, 0.5774, 1.0])
    """
    where = label("to_coo", name)
    if isinstance(x, CsrBatch):
        return _from_csr(x, weights, combiner, validate, name, where)
    if isinstance(x, tf.RaggedTensor):
        return _from_ragged(x, weights, combiner, validate, name, where)
    if isinstance(x, tf.SparseTensor):
        return _from_sparse(x, weights, combiner, validate, name, where)
    raise ValueError(
        f"{where}: expected a tf.RaggedTensor, a 2-D tf.SparseTensor or a sparse_io.CsrBatch, "
        f"got {type(x).__name__}"
    )


def _from_csr(x: CsrBatch, weights, combiner, validate, name, where):
    if weights is not None:
        raise ValueError(f"{where}: a CsrBatch carries its own weights; pass weights=None")
    w = x.weights if x.has_scalar_weight else np.asarray(x.weights, dtype=np.float32)
    return convert_to_coo(
        tf.convert_to_tensor(x.row_splits),
        tf.convert_to_tensor(x.values),
        w,
        sample_count=x.num_rows,
        combiner=combiner,
        validate=validate,
        name=name,
    )


def _scalar_weight(weights, where: str):
    """The weight shared by every id, or None when `weights` is per-id."""
    if weights is None:
        return 1.0
    if isinstance(weights, (bool, np.bool_)):
        raise ValueError(f"{where}: weights must be a float, got {weights!r}")
    if isinstance(weights, (int, float, np.integer, np.floating)):
        return float(weights)
    if isinstance(weights, tf.Tensor) and weights.shape.rank == 0:
        return weights
    return None


def _sample_count(static_rows, dynamic_rows):
    return static_rows if static_rows is not None else tf.cast(dynamic_rows, tf.int32)


def _from_ragged(x: tf.RaggedTensor, weights, combiner, validate, name, where):
    if x.ragged_rank != 1 or x.flat_values.shape.rank != 1:
        raise ValueError(
            f"{where}: expected a RaggedTensor shaped [rows, None] (ragged_rank 1), got {x.shape} "
            f"with ragged_rank {x.ragged_rank}"
        )
    shared = _scalar_weight(weights, where)
    if shared is not None:
        w = shared
        checks = Checks()
    elif isinstance(weights, tf.RaggedTensor):
        if weights.ragged_rank != 1 or weights.flat_values.shape.rank != 1:
            raise ValueError(f"{where}: weights must be shaped like the ids, got {weights.shape}")
        _static_same(x.row_splits.shape, weights.row_splits.shape, "row_splits", where)
        checks = Checks()
        if validate:
            checks.add(
                lambda: _same(x.row_splits, weights.row_splits),
                f"{where}: check weights_row_splits failed: weights must have the ids' row_splits",
            )
        w = weights.flat_values
    else:
        raise ValueError(
            f"{where}: weights for a RaggedTensor must be None, a float or a RaggedTensor, "
            f"got {type(weights).__name__}"
        )
    (splits,) = checks.guard(tf.cast(x.row_splits, tf.int64))
    return convert_to_coo(
        splits,
        x.flat_values,
        w,
        sample_count=_sample_count(x.shape[0], x.nrows()),
        combiner=combiner,
        validate=validate,
        name=name,
    )


def _from_sparse(x: tf.SparseTensor, weights, combiner, validate, name, where):
    if x.shape.rank != 2:
        raise ValueError(f"{where}: expected a 2-D SparseTensor, got shape {x.shape}")
    shared = _scalar_weight(weights, where)
    checks = Checks()
    if shared is not None:
        w = shared
    elif isinstance(weights, tf.SparseTensor):
        _static_same(x.indices.shape, weights.indices.shape, "indices", where)
        if validate:
            checks.add(
                lambda: _same(x.indices, weights.indices),
                f"{where}: check weights_indices failed: weights must have the ids' indices",
            )
        w = weights.values
    else:
        raise ValueError(
            f"{where}: weights for a SparseTensor must be None, a float or a SparseTensor, "
            f"got {type(weights).__name__}"
        )
    (indices,) = checks.guard(x.indices)
    return convert_to_coo(
        indices,
        x.values,
        w,
        sample_count=_sample_count(x.shape[0], x.dense_shape[0]),
        combiner=combiner,
        validate=validate,
        name=name,
    )


def _static_same(a: tf.TensorShape, b: tf.TensorShape, what: str, where: str) -> None:
    if not a.is_compatible_with(b):
        raise ValueError(f"{where}: weights {what} shape {b} differs from the ids' {a}")


def _same(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """True when two integer tensors have the same shape and elements (any int dtypes)."""
    # int64: int32 tensors would be pinned to host memory on a GPU (and as cond arguments).
    a, b = tf.cast(a, tf.int64), tf.cast(b, tf.int64)
    return tf.cond(
        tf.reduce_all(tf.equal(tf.shape(a), tf.shape(b))),
        lambda: tf.reduce_all(tf.equal(a, b)),
        lambda: tf.constant(False),
    )
