"""ctypes bindings of the C interface in `ops/cuda/sparseflow_kernels.h`, taking harness `Buffer`s.

Every call raises RuntimeError naming the function when it returns a
non-zero status (a bad argument, or the CUDA error of the launch).
"""

from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["DTYPE_CODES", "Kernels", "block_plan"]

# "tf32": float32 storage with the products' inputs rounded to TF32 on tensor cores (SPARSEFLOW_FLOAT32_TF32).
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2, "tf32": 3}

_i64, _i32, _int, _p, _size = ctypes.c_int64, ctypes.c_int32, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
_SIGNATURES = {
    "sparseflow_embedding_bag_forward": [_p, _i64, _i64, _p, _p, _p, _i64, _i32, _int, _int, _p, _p, _p],
    "sparseflow_embedding_bag_forward_scratch": [_i32, ctypes.POINTER(_size)],
    "sparseflow_embedding_bag_check": [_p, _p, _i64, _i32, _i64, _p, _p],
    "sparseflow_embedding_bag_grad_workspace": [_i64, _i64, ctypes.POINTER(_size)],
    "sparseflow_embedding_bag_grad_ids": [_p, _p, _i64, _i32, _i64, _p, _size, _p, _p, _p],
    "sparseflow_embedding_bag_grad_rows": [_p, _i64, _p, _p, _i64, _p, _size, _p, _i64, _p, _p],
    "sparseflow_embedding_bag_grad_gains": [_p, _p, _i64, _i64, _p, _p, _i64, _i32, _p, _p],
    "sparseflow_block_sparse_product": [_int, _p, _i64, _i32, _i32, _i32, _p, _p, _p, _p, _int, _p, _p],
    "sparseflow_block_sparse_weight_grad": [_int, _p, _p, _i64, _i32, _i32, _i32, _p, _i32, _p, _p],
    "sparseflow_block_plan": [_p, _i32, _i32, _int, _p, _p, _p],
}


def _ptr(buffer) -> int | None:
    return None if buffer is None else buffer.ptr


class Kernels:
    """The kernels of one loaded library; arguments are `Buffer`s (device) and ints, on the default stream."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))
        for name, argtypes in _SIGNATURES.items():
            function = getattr(self.lib, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int32 if name == "sparseflow_block_plan" else ctypes.c_int

    def _call(self, name: str, *args) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise RuntimeError(f"{name} returned status {status}")

    def bag_forward(self, table, vocab, dim, rows, cols, gains, n, sample_count, rows_sorted, scratch, out,
                    deterministic=False):
        self._call("sparseflow_embedding_bag_forward", table.ptr, vocab, dim, rows.ptr, cols.ptr, gains.ptr, n,
                   sample_count, rows_sorted, int(deterministic), _ptr(scratch), out.ptr, None)

    def forward_scratch_bytes(self, sample_count) -> int:
        """Bytes of the forward's scratch (the bag offsets and the sortedness flag) for sample_count bags."""
        size = ctypes.c_size_t(0)
        self._call("sparseflow_embedding_bag_forward_scratch", sample_count, ctypes.byref(size))
        return size.value

    def bag_check(self, rows, cols, n, sample_count, vocab, first_bad):
        self._call("sparseflow_embedding_bag_check", rows.ptr, cols.ptr, n, sample_count, vocab, first_bad.ptr, None)

    def grad_workspace_bytes(self, n, vocab) -> int:
        size = ctypes.c_size_t(0)
        self._call("sparseflow_embedding_bag_grad_workspace", n, vocab, ctypes.byref(size))
        return size.value

    def grad_ids(self, rows, cols, n, sample_count, vocab, workspace, unique_ids, num_unique):
        self._call("sparseflow_embedding_bag_grad_ids", rows.ptr, cols.ptr, n, sample_count, vocab, workspace.ptr,
                   workspace.nbytes, unique_ids.ptr, num_unique.ptr, None)

    def grad_rows(self, out_grad, dim, rows, gains, n, workspace, num_unique, max_unique, d_rows):
        self._call("sparseflow_embedding_bag_grad_rows", out_grad.ptr, dim, rows.ptr, gains.ptr, n, workspace.ptr,
                   workspace.nbytes, num_unique.ptr, max_unique, d_rows.ptr, None)

    def grad_gains(self, out_grad, table, vocab, dim, rows, cols, n, sample_count, d_gains):
        self._call("sparseflow_embedding_bag_grad_gains", out_grad.ptr, table.ptr, vocab, dim, rows.ptr, cols.ptr, n,
                   sample_count, d_gains.ptr, None)

    def product(self, dtype, a, m, a_blocks, outputs, block, w, plan, transpose_blocks, out):
        offsets, partners, slots = plan
        self._call("sparseflow_block_sparse_product", DTYPE_CODES[dtype], a.ptr, m, a_blocks, outputs, block, w.ptr,
                   offsets.ptr, partners.ptr, slots.ptr, int(transpose_blocks), out.ptr, None)

    def weight_grad(self, dtype, x, dy, m, k_blocks, n_blocks, block, blocks, nnz, dw):
        self._call("sparseflow_block_sparse_weight_grad", DTYPE_CODES[dtype], x.ptr, dy.ptr, m, k_blocks, n_blocks,
                   block, blocks.ptr, nnz, dw.ptr, None)


def block_plan(lib: ctypes.CDLL, layout: np.ndarray, by_column: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, partners, slots) int32 of a layout, from the library's `sparseflow_block_plan` (or the host one)."""
    layout = np.ascontiguousarray(layout, np.uint8)
    k_blocks, n_blocks = layout.shape
    nnz = int(layout.sum())
    offsets = np.zeros((n_blocks if by_column else k_blocks) + 1, np.int32)
    partners = np.zeros(max(nnz, 1), np.int32)
    slots = np.zeros(max(nnz, 1), np.int32)
    function = getattr(lib, "sparseflow_block_plan", None) or lib.sparseflow_host_block_plan
    function.argtypes = _SIGNATURES["sparseflow_block_plan"]
    function.restype = ctypes.c_int32
    got = function(layout.ctypes.data, k_blocks, n_blocks, int(by_column), offsets.ctypes.data,
                   partners.ctypes.data, slots.ctypes.data)
    if got != nnz:
        raise RuntimeError(f"block plan counted {got} blocks, the layout has {nnz}")
    return offsets, partners, slots
