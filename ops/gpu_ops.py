"""The TensorFlow GPU ops of the CUDA kernels (`ops/cuda/`), built by `make gpu-ops`.

Loading them, and the block plan tables their block-sparse ops take.

The ops, registered for `DEVICE_GPU` only (names in `ops/cuda/tf/op_names.h`):
  - `SparseflowGpuEmbeddingBag(table, row_ids int32, col_ids int64, gains, sample_count; rows_sorted, validate)`
    (`validate=False` by default: the entries' check costs a host synchronisation each step; turn it on
    while debugging input, or check the COO on the CPU once, e.g. with `convert_to_coo(..., validate=True)`)
  - `SparseflowGpuEmbeddingBagGrad(out_grad, table, row_ids, col_ids, gains) -> (unique_ids, d_rows, d_gains)`
  - `SparseflowGpuBlockSparseMatMul(a, w, offsets, partners, slots; block_size, outputs, transpose_blocks,
    allow_tf32)`
  - `SparseflowGpuBlockSparseWeightGrad(x, dy, blocks; block_size, allow_tf32)`
Float32 for the embedding bag; float32, float16 and bfloat16 for the block-sparse ops. `allow_tf32=True` (float32,
off by default) multiplies on TF32 tensor cores, inputs rounded to 10 mantissa bits (docs/gpu.md gives the
accuracy).

Example (on a machine where `make gpu-ops` has run and a GPU is visible):
  >>> library = load()                                              # doctest: +SKIP
  >>> offsets, partners, slots = plan_tables(layout, by_column=True)  # doctest: +SKIP
  >>> y = library.sparseflow_gpu_block_sparse_mat_mul(x, w, offsets, partners, slots, block_size=32,
  ...                                              outputs=layout.shape[1])  # doctest: +SKIP
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

__all__ = ["LIBRARY_PATH", "OP_NAMES", "load", "plan_tables"]

LIBRARY_PATH = pathlib.Path(__file__).resolve().parents[1] / "build" / "gpu_ops" / "libsparseflow_gpu_ops.so"
OP_NAMES = {
    "embedding_bag": "SparseflowGpuEmbeddingBag",
    "embedding_bag_grad": "SparseflowGpuEmbeddingBagGrad",
    "block_sparse_matmul": "SparseflowGpuBlockSparseMatMul",
    "block_sparse_weight_grad": "SparseflowGpuBlockSparseWeightGrad",
}


def load(path: str | os.PathLike | None = None):
    """`tf.load_op_library` of the GPU ops (default: `$SPARSEFLOW_GPU_OPS`, else build/gpu_ops/ of this checkout).

    Raises:
      FileNotFoundError: the library has not been built (run `make gpu-ops`).
    """
    import tensorflow as tf

    path = pathlib.Path(path or os.environ.get("SPARSEFLOW_GPU_OPS") or LIBRARY_PATH)
    if not path.exists():
        raise FileNotFoundError(
            f"sparseflow GPU ops not built: {path} is missing (run `make gpu-ops`; needs TensorFlow with CUDA and nvcc)"
        )
    return tf.load_op_library(str(path))


def plan_tables(layout: np.ndarray, by_column: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, partners, slots) int32 of a block layout, as `SparseflowGpuBlockSparseMatMul` takes them.

    Blocks are numbered in `np.argwhere(layout)` order (`w[i]`). By column
    (for `y = x @ W`): output o is block column o, its members the blocks
    (r, o) for ascending r, partner r. By row (for `dx = dy @ W^T`, with
    `transpose_blocks`): output o is block row o, members (o, c) for
    ascending c, partner c. `offsets[o]:offsets[o + 1]` delimit output o's
    members in `partners` and `slots` (their indices into w).

    Example:
      >>> [t.tolist() for t in plan_tables(np.array([[1, 1], [0, 1]], bool), by_column=True)]
      [[0, 1, 3], [0, 0, 1], [0, 1, 2]]
    """
    layout = np.asarray(layout, bool)
    if layout.ndim != 2:
        raise ValueError(f"plan_tables: layout must be 2-D [K/bs, N/bs], got shape {layout.shape}")
    blocks = np.argwhere(layout)
    key, partner = (blocks[:, 1], blocks[:, 0]) if by_column else (blocks[:, 0], blocks[:, 1])
    outputs = layout.shape[1] if by_column else layout.shape[0]
    order = np.argsort(key, kind="stable")  # stable: row-major order keeps partners ascending within an output
    offsets = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=outputs))])
    return offsets.astype(np.int32), partner[order].astype(np.int32), order.astype(np.int32)
