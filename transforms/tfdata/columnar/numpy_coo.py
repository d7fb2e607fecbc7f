"""COO for the Python-side columnar reader, computed while a batch is assembled (numpy, or native).

The Parquet/Arrow reader already holds each batch's CSR in numpy, so for
output="coo" it converts there, with the semantics of `ops.convert_to_coo`
(TensorFlow's ConvertToCooTensor), and hands TensorFlow finished COO arrays:
a few numpy passes over the ids instead of a chain of graph ops per batch
(measured here: ~5 ms against ~25 ms for 330k weighted ids). The tests
check it on random batches against a plain reference of the rule below
(tests/oracles.py), and for agreement with `ops.convert_to_coo`.

The rule, per row in id order: equal ids next to each other merge into one
entry whose gain is the sum of their weights; for "mean" every gain of row r
is then multiplied by 1 / sum(w), for "sqrtn" by 1 / sqrt(sum(w^2)), both
over all of the row's weights, and by 0 where that sum is 0; "sum" scales
nothing. A row holding at most one id cannot merge, so one-hot features skip
the merge entirely.

`native_coo_into` is the same rule in one native pass (ops/native/coo_kernels.cc,
through ctypes, the GIL released), writing straight into the batch's arena;
`piece_coo` is its plain reference and the path where it cannot run. On the
multi-valued benchmark set (8 weighted features of ~10 ids a row, batch 4096)
it took the Arrow reader's batch from about 3.6 to 2.2 ms.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

__all__ = ["one_id_gains", "piece_coo", "native_available", "native_coo_into"]

_COMBINERS = {"sum": 0, "mean": 1, "sqrtn": 2}


def _scale(totals: np.ndarray, combiner: str) -> np.ndarray:
    """Per-row scale from the row's sum of w (mean) or of w^2 (sqrtn); 0 where that sum is 0."""
    scale = np.zeros_like(totals)
    nonzero = totals != 0
    if combiner == "mean":
        np.divide(np.float32(1.0), totals, out=scale, where=nonzero)
    else:
        np.divide(np.float32(1.0), np.sqrt(totals), out=scale, where=nonzero)
    return scale


def one_id_gains(w: np.ndarray | np.float32, combiner: str) -> np.ndarray | np.float32:
    """Gains of ids that are alone in their rows, from their weights `w` (float32, any shape).

    "sum": w; "mean": w / w; "sqrtn": w / |w|; 0 where w is 0 (no merge can
    happen, so each id's row total is its own weight).

    Example:
      >>> one_id_gains(np.array([2.0, 0.0, -4.0], np.float32), "sqrtn").tolist()
      [1.0, 0.0, -1.0]
    """
    if combiner == "sum":
        return w
    w = np.asarray(w, dtype=np.float32)
    out = w * _scale(w if combiner == "mean" else w * w, combiner)
    return out if out.ndim else np.float32(out)


def piece_coo(
    lengths: np.ndarray, ids: np.ndarray, weights: np.ndarray | float, combiner: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """COO of CSR rows given by `lengths` (int64 `[r]`) over `ids` / `weights` (`[nnz]`, or a scalar weight).

    Returns:
      `(rows, ids, starts, gains)`: rows int32 (the row within the given
      rows) and gains float32, one per entry; the entries' col ids are
      `ids[starts]` (all of `ids` when `starts` is None), left for the caller
      to take while writing them into the batch, so the ids are copied once.

    Example:
      >>> rows, ids, starts, gains = piece_coo(np.array([3, 0, 1]), np.array([7, 7, 2, 5]), 1.0, "mean")
      >>> rows.tolist(), ids[starts].tolist(), [round(float(g), 4) for g in gains]
      ([0, 0, 2], [7, 2, 5], [0.6667, 0.3333, 1.0])
    """
    scalar = not isinstance(weights, np.ndarray)
    nnz = len(ids)
    if nnz == 0:
        return (np.zeros(0, np.int32), ids, None, np.zeros(0, np.float32))
    if int(lengths.max()) <= 1:
        rows = np.flatnonzero(lengths).astype(np.int32)
        if scalar:
            return (rows, ids, None, np.full(nnz, one_id_gains(np.float32(weights), combiner), np.float32))
        w = weights.astype(np.float32, copy=False)
        return (rows, ids, None, w.copy() if combiner == "sum" else one_id_gains(w, combiner))
    row_of = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    begins = np.empty(nnz, dtype=bool)
    begins[0] = True
    np.not_equal(ids[1:], ids[:-1], out=begins[1:])
    begins[1:] |= row_of[1:] != row_of[:-1]
    if begins.all():
        # No id repeats its neighbour in a row (the usual case): every id is its own entry, so the
        # entries are the CSR as it is, without the index, gather and segment sum of a merge.
        starts, rows = None, row_of
        w = np.full(nnz, np.float32(weights), np.float32) if scalar else weights.astype(np.float32, copy=False)
        gains = w  # the caller copies the gains into the batch; they are never written here
    else:
        starts = np.flatnonzero(begins)
        rows = row_of[starts]
        if scalar:
            run = np.diff(np.append(starts, nnz)).astype(np.float32)
            gains = run * np.float32(weights)
        else:
            w = weights.astype(np.float32, copy=False)
            gains = np.add.reduceat(w, starts)
    if combiner != "sum":
        present = np.flatnonzero(lengths)
        row_begin = (np.cumsum(lengths) - lengths)[present]
        if scalar:
            w0 = np.float32(weights)
            per_row = lengths[present].astype(np.float32) * (w0 if combiner == "mean" else w0 * w0)
        else:
            per_row = np.add.reduceat(w if combiner == "mean" else w * w, row_begin)
        totals = np.zeros(len(lengths), np.float32)
        totals[present] = per_row
        gains = gains * _scale(totals, combiner)[rows]
    return (rows, ids, starts, gains.astype(np.float32, copy=False))


@functools.cache
def _native_function(id_dtype: str):
    """The native `sparseflow_csr_to_coo_<i64|i32>` (ops/native/coo_kernels.cc) via ctypes, or None.

    None when the native library cannot be built or loaded here (`ops._native` logs why once).
    ctypes releases the GIL for the call, so the conversion runs beside TensorFlow's threads.
    """
    from ops import _native

    library = _native.ctypes_library()
    if library is None:
        return None
    function = getattr(library, f"sparseflow_csr_to_coo_{id_dtype}")
    pointer = ctypes.c_void_p
    function.argtypes = [pointer, pointer, ctypes.c_int64, pointer, pointer, ctypes.c_float, ctypes.c_int,
                         ctypes.c_int32, pointer, pointer, pointer]
    function.restype = ctypes.c_int64
    return function


_ID_DTYPES = {np.dtype(np.int64): "i64", np.dtype(np.int32): "i32"}


def native_available(id_dtype: np.dtype) -> bool:
    """Whether `native_coo_into` runs here for ids of `id_dtype` (int64 or int32, the library loaded)."""
    name = _ID_DTYPES.get(np.dtype(id_dtype))
    return name is not None and _native_function(name) is not None


def native_coo_into(
    lengths: np.ndarray,
    ids: np.ndarray,
    weights: np.ndarray | float,
    combiner: str,
    rows: np.ndarray,
    cols: np.ndarray,
    gains: np.ndarray,
    row_offset: int = 0,
    *,
    starts: np.ndarray | None = None,
) -> int:
    """Writes `piece_coo`'s entries (rows + `row_offset`) at the start of `rows`/`cols`/`gains`; returns their count.

    The native kernel (one pass over the ids, the GIL released): same rule
    as `piece_coo`, gains equal to float32 rounding (long rows summed in
    order here, pairwise by numpy). Row r holds `ids[starts[r] :
    starts[r] + lengths[r]]` (weights likewise); without `starts` the rows
    lie end to end and cover `ids` exactly. With `starts` a batch's rows are
    read where they lie in their unit, in any order, without gathering them
    first. Each output must hold `lengths.sum()` entries (the most a
    conversion can give), be C-contiguous and of the dtype `piece_coo`
    gives (int32, the ids', float32). Call only where
    `native_available(ids.dtype)`.

    Raises:
      ValueError: too little room, or rows that do not lie inside `ids`
        (checked here, so the kernel never reads past them).

    Example:
      >>> rows, cols, gains = np.empty(4, np.int32), np.empty(4, np.int64), np.empty(4, np.float32)
      >>> lengths, ids = np.array([3, 0, 1]), np.array([7, 7, 2, 5])
      >>> n = native_coo_into(lengths, ids, 1.0, "mean", rows, cols, gains)  # doctest: +SKIP
      >>> rows[:n].tolist(), cols[:n].tolist()  # doctest: +SKIP
      ([0, 0, 2], [7, 2, 5])
    """
    function = _native_function(_ID_DTYPES[ids.dtype])
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    ids = np.ascontiguousarray(ids)
    scalar = not isinstance(weights, np.ndarray)
    per_id = None if scalar else np.ascontiguousarray(weights, dtype=np.float32)
    total = int(lengths.sum())
    if len(lengths) and int(lengths.min()) < 0:
        raise ValueError("native_coo_into: negative row lengths")
    if starts is None:
        if total != len(ids):
            raise ValueError(f"native_coo_into: row lengths (sum {total}) do not cover {len(ids)} ids")
        starts = np.cumsum(lengths) - lengths
    else:
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        if len(starts) != len(lengths) or (
            len(starts) and (int(starts.min()) < 0 or int((starts + lengths).max()) > len(ids))
        ):
            raise ValueError(f"native_coo_into: rows reach outside the {len(ids)} ids")
    if per_id is not None and len(per_id) != len(ids):
        raise ValueError(f"native_coo_into: {len(per_id)} weights for {len(ids)} ids")
    if len(rows) < total or len(cols) < total or len(gains) < total or cols.dtype != ids.dtype:
        raise ValueError(f"native_coo_into: outputs need room for {total} entries of ids {ids.dtype}")
    return int(function(
        starts.ctypes.data, lengths.ctypes.data, len(lengths), ids.ctypes.data,
        None if per_id is None else per_id.ctypes.data, float(weights) if scalar else 0.0, _COMBINERS[combiner],
        int(row_offset), rows.ctypes.data, cols.ctypes.data, gains.ctypes.data,
    ))
