"""Bridges between `CsrBatch` and TensorFlow's RaggedTensor / SparseTensor.

A scalar weight stays a Python float both ways: no per-id weight tensor is
created for it. Imported lazily by `sparse_io` so that Beam workers that
never touch TensorFlow do not pay for importing it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from sparse_io.csr import CsrBatch, SparseValidationError

__all__ = ["csr_to_ragged", "csr_to_sparse", "csr_from_ragged", "csr_from_sparse"]


def csr_to_ragged(csr: CsrBatch) -> tuple[tf.RaggedTensor, tf.RaggedTensor | float]:
    """Returns `(ids, weights)`: ids a `[num_rows, None]` RaggedTensor.

    `weights` is a RaggedTensor with the same row_splits, or the scalar weight.

    Example:
      >>> ids, w = csr_to_ragged(CsrBatch(np.array([0, 2, 2]), np.array([4, 5])))
      >>> ids.to_list(), w
      ([[4, 5], []], 1.0)
    """
    splits = tf.convert_to_tensor(csr.row_splits, dtype=tf.int64)
    ids = tf.RaggedTensor.from_row_splits(csr.values, splits, validate=False)
    if csr.has_scalar_weight:
        return ids, csr.weights
    return ids, ids.with_flat_values(tf.convert_to_tensor(csr.weights, dtype=tf.float32))


def csr_to_sparse(csr: CsrBatch) -> tuple[tf.SparseTensor, tf.SparseTensor | float]:
    """Returns `(ids, weights)`: ids a 2-D SparseTensor, indices row-major sorted.

    The dense shape is `[num_rows, max_row_length]`; `weights` shares the
    indices, or is the scalar weight.
    """
    lengths = csr.row_lengths()
    rows = csr.value_rowids()
    cols = np.arange(csr.nnz, dtype=np.int64) - np.repeat(csr.row_splits[:-1], lengths)
    indices = np.stack([rows, cols], axis=1) if csr.nnz else np.zeros((0, 2), np.int64)
    shape = [csr.num_rows, int(lengths.max()) if lengths.size else 0]
    ids = tf.SparseTensor(indices, csr.values, shape)
    if not isinstance(csr.weights, np.ndarray):
        return ids, csr.weights
    return ids, tf.SparseTensor(indices, csr.weights.astype(np.float32, copy=False), shape)


def _weights_values(weights, what: str) -> np.ndarray | float:
    if weights is None:
        return 1.0
    if isinstance(weights, (int, float)):
        return float(weights)
    if isinstance(weights, tf.RaggedTensor):
        return weights.flat_values.numpy().astype(np.float32, copy=False)
    if isinstance(weights, tf.SparseTensor):
        return weights.values.numpy().astype(np.float32, copy=False)
    raise SparseValidationError(f"{what}: weights must be None, a float or a {what}, got {type(weights)}")


def csr_from_ragged(ids: tf.RaggedTensor, weights: tf.RaggedTensor | float | None = None) -> CsrBatch:
    """Inverse of `csr_to_ragged` for a 2-D RaggedTensor of ids.

    Raises:
      SparseValidationError: ragged rank other than 1, or weights whose
        row_splits differ from the ids'.
    """
    if ids.ragged_rank != 1 or ids.flat_values.shape.rank != 1:
        raise SparseValidationError("RaggedTensor: expected shape [rows, None] with ragged_rank 1")
    splits = ids.row_splits.numpy().astype(np.int64, copy=False)
    if isinstance(weights, tf.RaggedTensor) and not np.array_equal(weights.row_splits.numpy(), splits):
        raise SparseValidationError("RaggedTensor: weights row_splits differ from ids row_splits")
    return CsrBatch(splits, ids.flat_values.numpy(), _weights_values(weights, "RaggedTensor"))


def csr_from_sparse(ids: tf.SparseTensor, weights: tf.SparseTensor | float | None = None) -> CsrBatch:
    """Inverse of `csr_to_sparse` for a 2-D SparseTensor in row-major order.

    Raises:
      SparseValidationError: rank other than 2, indices not sorted by row, or
        weights whose indices differ from the ids'.
    """
    if ids.shape.rank != 2:
        raise SparseValidationError(f"SparseTensor: expected rank 2, got {ids.shape.rank}")
    indices = ids.indices.numpy()
    rows = indices[:, 0]
    if rows.size and (np.diff(rows) < 0).any():
        bad = int(np.argmax(np.diff(rows) < 0)) + 1
        raise SparseValidationError(f"SparseTensor: indices are not sorted by row at position {bad}")
    if isinstance(weights, tf.SparseTensor) and not np.array_equal(weights.indices.numpy(), indices):
        raise SparseValidationError("SparseTensor: weights indices differ from ids indices")
    num_rows = int(ids.dense_shape[0])
    splits = np.searchsorted(rows, np.arange(num_rows + 1), side="left").astype(np.int64)
    return CsrBatch(splits, ids.values.numpy(), _weights_values(weights, "SparseTensor"))
