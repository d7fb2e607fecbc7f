"""Zero-copy bridges between Arrow list columns and `CsrBatch`.

An Arrow list array is CSR already: its offsets are row_splits and its child
array holds the ids. `csr_from_arrow` hands out a numpy view of the child
values buffer (no copy) for a single-chunk array; only the row_splits may be
copied (int32 offsets widen to int64, sliced arrays rebase to 0).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparse_io.csr import CsrBatch, SparseValidationError

__all__ = ["csr_from_arrow", "csr_to_arrow"]

_LIST_TYPES = (pa.ListArray, pa.LargeListArray)


def _combine(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks == 1:
            return array.chunk(0)
        if array.num_chunks == 0:
            return pa.array([], type=array.type)
        # Several chunks cannot share one values buffer: one copy here.
        return array.combine_chunks()
    return array


def _offsets_and_values(array: pa.Array, feature: str | None) -> tuple[np.ndarray, pa.Array]:
    """Returns (row_splits int64 rebased to 0, child values sliced to them)."""
    if not isinstance(array, _LIST_TYPES):
        found = getattr(array, "type", type(array))
        raise SparseValidationError(f"{_name(feature)}: expected a list or large_list array, got {found}")
    offsets = array.offsets.to_numpy(zero_copy_only=True)
    start, end = int(offsets[0]), int(offsets[-1])
    if array.null_count:
        # A null list is an empty row. Arrow lets a null slot span values;
        # where one does, those values must not leak into the row.
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        lengths = np.diff(offsets)
        if lengths[~valid].any():
            lengths = np.where(valid, lengths, 0)
            flat = array.flatten()  # drops values under null slots (copies)
            splits = np.zeros(len(array) + 1, dtype=np.int64)
            np.cumsum(lengths, out=splits[1:])
            return splits, flat
    splits = offsets.astype(np.int64, copy=offsets.dtype != np.int64 or start != 0)
    if start:
        splits -= start
    return splits, array.values.slice(start, end - start)


def _name(feature: str | None) -> str:
    return f"feature {feature!r}" if feature else "list array"


def _numpy_view(values: pa.Array, feature: str | None, what: str) -> np.ndarray:
    if values.null_count:
        pos = int(np.argmax(~values.is_valid().to_numpy(zero_copy_only=False)))
        raise SparseValidationError(f"{_name(feature)}: {what} has a null at position {pos}")
    return values.to_numpy(zero_copy_only=True)


def csr_from_arrow(
    list_array: pa.Array | pa.ChunkedArray,
    weights: pa.Array | pa.ChunkedArray | float | None = None,
    *,
    num_rows: int | None = None,
    feature: str | None = None,
) -> CsrBatch:
    """Views an Arrow list column of ids (and optional weights) as a `CsrBatch`.

    Args:
      list_array: `pa.ListArray` / `pa.LargeListArray` of int32 or int64, or a
        `pa.ChunkedArray` of them. A null list is an empty row.
      weights: None (scalar 1.0), a float (scalar weight), or a list array of
        float32 with the same row lengths as `list_array`.
      num_rows: if given, must equal the number of rows.
      feature: used in error messages.

    Returns:
      A `CsrBatch` whose `values` is a view of the Arrow values buffer when the
      input is a single chunk (no copy); `row_splits` is int64.

    Raises:
      SparseValidationError: wrong array type, null ids, weights whose row
        lengths differ from the ids', or a `num_rows` mismatch.

    Example:
      >>> ids = pa.array([[3, 1], None, [2]], type=pa.list_(pa.int64()))
      >>> b = csr_from_arrow(ids)
      >>> b.row_splits.tolist(), b.values.tolist()
      ([0, 2, 2, 3], [3, 1, 2])
    """
    array = _combine(list_array)
    splits, values = _offsets_and_values(array, feature)
    ids = _numpy_view(values, feature, "ids")
    if ids.dtype not in (np.int32, np.int64):
        raise SparseValidationError(f"{_name(feature)}: ids must be int32 or int64, got {ids.dtype}")
    if weights is None:
        w: np.ndarray | float = 1.0
    elif isinstance(weights, (int, float, np.integer, np.floating)):
        w = float(weights)
    else:
        w_array = _combine(weights)
        w_splits, w_values = _offsets_and_values(w_array, feature)
        if len(w_splits) != len(splits) or not np.array_equal(w_splits, splits):
            raise SparseValidationError(
                f"{_name(feature)}: weights row lengths do not match ids row lengths"
                + _first_mismatch(splits, w_splits)
            )
        w = _numpy_view(w_values, feature, "weights")
        if w.dtype != np.float32:
            w = w.astype(np.float32)
    if num_rows is not None and num_rows != len(splits) - 1:
        raise SparseValidationError(
            f"{_name(feature)}: num_rows={num_rows} but the array has {len(splits) - 1} rows"
        )
    return CsrBatch(splits, ids, w)


def _first_mismatch(a: np.ndarray, b: np.ndarray) -> str:
    if len(a) != len(b):
        return f" ({len(a) - 1} rows vs {len(b) - 1})"
    row = int(np.argmax(a != b)) - 1
    return f" (first at row {max(row, 0)})"


def csr_to_arrow(csr: CsrBatch, *, large: bool = False) -> tuple[pa.Array, pa.Array | float]:
    """Inverse of `csr_from_arrow`: returns `(ids_list_array, weights)`.

    `weights` is a float32 list array with the same offsets when the batch has
    per-id weights, else the scalar weight itself. The ids buffer is wrapped,
    not copied; int64 row_splits narrow to int32 offsets unless `large`.

    Example:
      >>> ids, w = csr_to_arrow(CsrBatch(np.array([0, 1, 1]), np.array([5])))
      >>> ids.to_pylist(), w
      ([[5], []], 1.0)
    """
    if large:
        offsets = pa.array(np.ascontiguousarray(csr.row_splits, dtype=np.int64))
        make = pa.LargeListArray.from_arrays
    else:
        if csr.nnz > np.iinfo(np.int32).max:
            raise SparseValidationError("sparse batch: nnz exceeds int32 offsets; pass large=True")
        offsets = pa.array(np.asarray(csr.row_splits, dtype=np.int32))
        make = pa.ListArray.from_arrays
    ids = make(offsets, pa.array(csr.values))
    if csr.has_scalar_weight:
        return ids, csr.weights
    return ids, make(offsets, pa.array(np.asarray(csr.weights, dtype=np.float32)))
