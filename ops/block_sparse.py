"""Block-sparse matmul `x @ W` with a plan built once from the block layout.

`W` is `[K, N]` but only the blocks marked in a boolean layout `[K/bs, N/bs]`
exist; they are stored as `w` `[nnz_blocks, bs, bs]`, `w[i]` being the block at
`np.argwhere(layout)[i]` (row-major order).

How the products are computed (ops/_block_kernels.py): the output block
columns are put in a few buckets of similar block counts; within a bucket,
each column's input block columns of x are gathered side by side (padded
with a zero block to the bucket's width) and one batched matmul with the
stacked blocks gives the bucket's outputs. `dy @ W^T` is the same product
over the transposed layout, and the gradient for w multiplies the same
gathered x by dy per column. No `[K, N]` tensor is ever built. Rows of x are
processed in chunks so that the gathered copy stays in cache. On CPU the
products run in plain TensorFlow on x transposed, where gathering block rows
is a plain copy; with a GPU they are XLA-compiled.

On CPU, outside XLA, `implementation="auto"` runs fused native kernels instead
(`ops/native/block_sparse_kernels.h`, built on first use): each output tile is
summed over its blocks in registers, straight from x, with no gathered copy and
no padding blocks; the compositions above stay as their references and run
wherever the native kernels cannot.

The index tables for all three products are numpy arrays computed in the
constructor. The XLA-compiled kernels are shared by all plans (the tables
are their arguments), so a new plan with known shapes compiles nothing.
Numpy references of the three products are kept on the plan.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from ops import _block_kernels as kernels
from ops import _native
from ops._xla import in_xla_context
from ops.block_layouts import check_layout

__all__ = ["BlockSparseMatMul", "block_sparse_matmul", "BLOCK_SIZES", "IMPLEMENTATIONS"]

IMPLEMENTATIONS = ("auto", "composition", "native")

# The block edges the kernels are built and tested for; others are rejected rather than run untested.
BLOCK_SIZES = (8, 16, 32, 64)

# Rows of x per chunk on CPU: the fastest of 64..512 at M=4096, K=N=2048, bs=32 and 5, 10 and 25%
# density (each chunk's copies of x then stay in cache; fewer rows make the matmuls too small).
CPU_CHUNK_ROWS = 256


class BlockSparseMatMul:
    """A plan for `x @ W` with block-sparse `W`; build once, call every step.

    Args:
      layout: bool (or 0/1) numpy array `[K / block_size, N / block_size]`.
      block_size: edge of the square blocks: 8, 16, 32 or 64 (`BLOCK_SIZES`).
      chunk_rows: rows of x processed at a time. Default: 256 on CPU (so a
        chunk's copies of x stay in cache); no chunking when a GPU is visible.
      jit_compile: run the products as XLA-compiled functions. Default: when
        a GPU is visible; on CPU plain TensorFlow runs a faster form of the
        products (see `ops._block_kernels`). Inside a function that is
        already XLA-compiled they are inlined either way.
      implementation: "composition" (the stock-op products), "native" (the
        fused CPU kernels, float32/float64) or "auto" (default): "native"
        when no GPU is visible and the products are not XLA-compiled, else
        "composition". "native" runs the composition inside XLA-compiled
        functions, for other dtypes, and where the kernels could not be built.

    Attributes:
      layout, block_size, blocks (`np.argwhere(layout)`, `[nnz_blocks, 2]`),
      nnz_blocks, in_features (K), out_features (N), weight_shape.

    Example:
      >>> plan = BlockSparseMatMul(np.eye(2, dtype=bool), block_size=8)
      >>> w = tf.random.normal(plan.weight_shape)            # [2, 8, 8]
      >>> plan(tf.ones([3, 16]), w).shape
      TensorShape([3, 16])
    """

    def __init__(
        self,
        layout: np.ndarray,
        block_size: int,
        *,
        chunk_rows: int | None = None,
        jit_compile: bool | None = None,
        implementation: str = "auto",
    ) -> None:
        layout = check_layout(layout, "BlockSparseMatMul")
        if isinstance(block_size, bool) or block_size not in BLOCK_SIZES:
            raise ValueError(f"BlockSparseMatMul: block_size must be one of {BLOCK_SIZES}, got {block_size!r}")
        if chunk_rows is not None and chunk_rows < 1:
            raise ValueError(f"BlockSparseMatMul: chunk_rows must be >= 1, got {chunk_rows}")
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(
                f"BlockSparseMatMul: implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}"
            )
        self.implementation = implementation
        self.layout = layout.copy()
        self.layout.setflags(write=False)
        self.block_size = int(block_size)
        self._requested_jit_compile = jit_compile
        gpu = bool(tf.config.list_logical_devices("GPU"))
        self.jit_compile = gpu if jit_compile is None else bool(jit_compile)
        self.k_blocks, self.n_blocks = layout.shape
        self.in_features = self.k_blocks * self.block_size
        self.out_features = self.n_blocks * self.block_size
        self.blocks = np.argwhere(layout).astype(np.int64)
        self.nnz_blocks = len(self.blocks)
        self.weight_shape = (self.nnz_blocks, self.block_size, self.block_size)
        block_rows, block_cols = self.blocks[:, 0], self.blocks[:, 1]
        # y = x @ W: groups adding into output block columns, each gathering input block rows.
        self._by_column = kernels.group_blocks(block_cols, block_rows, self.n_blocks)
        # dx = dy @ W^T: groups adding into input block rows, each gathering output block columns.
        self._by_row = kernels.group_blocks(block_rows, block_cols, self.k_blocks)
        self._requested_chunk_rows = chunk_rows
        if chunk_rows is None:
            chunk_rows = 2**31 - 1 if gpu else CPU_CHUNK_ROWS  # a GPU wants the whole batch at once
        self.chunk_rows = int(chunk_rows)

    def gemm_shapes(self) -> dict[str, list[tuple[int, int]]]:
        """`(outputs, width)` of each bucket's batched matmul, per product.

        "y" (and the weight gradient) groups blocks by output block column,
        "dx" by input block row; a bucket multiplies `outputs` stacks of
        `width` blocks. For cost models and benchmarks.
        """
        return {
            "y": [b.slot.shape for b in self._by_column.buckets],
            "dx": [b.slot.shape for b in self._by_row.buckets],
        }

    @property
    def density(self) -> float:
        """The fraction of the block grid that holds a block: `nnz_blocks / (K/b * N/b)`."""
        return self.nnz_blocks / self.layout.size

    def __repr__(self) -> str:
        return (
            f"BlockSparseMatMul(K={self.in_features}, N={self.out_features}, block_size={self.block_size}, "
            f"nnz_blocks={self.nnz_blocks}, density={self.density:.3f})"
        )

    def __call__(self, x: tf.Tensor, w: tf.Tensor, gates: tf.Tensor | None = None) -> tf.Tensor:
        """Returns `x @ W` `[M, N]` for x `[M, K]` and w `[nnz_blocks, bs, bs]`.

        `gates` (optional, `[nnz_blocks]`) multiplies each block. Gradients
        flow to x, w and gates; none of them builds a dense `[K, N]` matrix.

        Raises:
          ValueError: x or w (or gates) of the wrong rank, size or dtype.
          tf.errors.InvalidArgumentError: the same, when only the run-time
            shape shows it (inside a `tf.function` with unknown dimensions).
        """
        x, w = self._inputs(x, w)
        if gates is not None:
            gates = tf.convert_to_tensor(gates, dtype=w.dtype)
            if gates.shape.rank != 1 or gates.shape[0] not in (None, self.nnz_blocks):
                raise ValueError(
                    f"BlockSparseMatMul: gates must be [{self.nnz_blocks}], got shape {gates.shape}"
                )
            w = w * gates[:, None, None]
        if self._runs_native(x.dtype):
            return self._native_matmul(x, w)
        by_column, by_row = self._by_column, self._by_row
        if self.jit_compile:
            product, weight_grad = kernels.PRODUCT_XLA, kernels.WEIGHT_GRAD_XLA
        else:
            # Already inside an XLA-compiled function, the column form (see `ops._block_kernels`).
            form = {"transposed": not in_xla_context()}
            product = functools.partial(kernels.product, **form)
            weight_grad = functools.partial(kernels.weight_grad, **form)
        sizes = {"block_size": self.block_size, "chunk_rows": self.chunk_rows}

        @tf.custom_gradient
        def matmul(x, w):
            # The kernels are never differentiated: cut them off any recording tape, so a compiled
            # kernel is not asked to export its loop state for a gradient nobody takes.
            x = tf.stop_gradient(x)
            w_ext = tf.stop_gradient(tf.concat([w, tf.zeros((1,) + self.weight_shape[1:], w.dtype)], axis=0))
            y = product(x, w_ext, by_column.tables(), outputs=self.n_blocks, transpose_blocks=False, **sizes)

            def grad(dy):
                dy = tf.stop_gradient(dy)
                dx = product(
                    dy, w_ext, by_row.tables(), outputs=self.k_blocks, transpose_blocks=True, **sizes
                )
                dw = weight_grad(
                    x, dy, by_column.tables(), by_column.position, outputs=self.n_blocks, **sizes
                )
                return dx, dw

            return y, grad

        return matmul(x, w)

    def _runs_native(self, dtype: tf.DType) -> bool:
        if self.implementation == "composition" or in_xla_context() or dtype not in (tf.float32, tf.float64):
            return False
        if self.implementation == "auto" and (self.jit_compile or tf.config.list_logical_devices("GPU")):
            return False
        return _native.available()

    @functools.cached_property
    def _native_tables(self) -> dict[str, np.ndarray]:
        """Index tables of the native kernels (int32): blocks grouped by output column and by input row."""
        rows, cols = self.blocks[:, 0].astype(np.int32), self.blocks[:, 1].astype(np.int32)

        def offsets(keys, count):
            return np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=count))]).astype(np.int32)

        return {
            "column_offsets": offsets(cols, self.n_blocks),
            "by_column": np.argsort(cols, kind="stable").astype(np.int32),
            "row_offsets": offsets(rows, self.k_blocks),
            "by_row": np.arange(self.nnz_blocks, dtype=np.int32),  # argwhere order is row-major
            "rows": rows,
            "cols": cols,
        }

    def _native_matmul(self, x: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
        library, tables, bs = _native.library(), self._native_tables, self.block_size

        @tf.custom_gradient
        def matmul(x, w):
            y = library.sparseflow_block_sparse_product(
                input=x, blocks=w, offsets=tables["column_offsets"], group_blocks=tables["by_column"],
                source=tables["rows"], block_size=bs, transpose_blocks=False,
            )

            def grad(dy):
                dx = library.sparseflow_block_sparse_product(
                    input=dy, blocks=w, offsets=tables["row_offsets"], group_blocks=tables["by_row"],
                    source=tables["cols"], block_size=bs, transpose_blocks=True,
                )
                dw = library.sparseflow_block_sparse_weight_grad(
                    x=x, dy=dy, block_row=tables["rows"], block_col=tables["cols"],
                    row_offsets=tables["row_offsets"], block_size=bs,
                )
                return dx, dw

            return y, grad

        return matmul(x, w)

    def to_dense(self, w: tf.Tensor) -> tf.Tensor:
        """The dense `[K, N]` matrix of w (zeros outside the layout), for checks and export."""
        w = tf.convert_to_tensor(w)
        bs = self.block_size
        grid = tf.scatter_nd(self.blocks, w, (self.k_blocks, self.n_blocks, bs, bs))
        return tf.reshape(tf.transpose(grid, [0, 2, 1, 3]), (self.in_features, self.out_features))

    def from_dense(self, dense: tf.Tensor) -> tf.Tensor:
        """The blocks `[nnz_blocks, bs, bs]` of a dense `[K, N]` matrix at the layout's positions."""
        dense = tf.convert_to_tensor(dense)
        if tuple(dense.shape) != (self.in_features, self.out_features):
            raise ValueError(
                f"BlockSparseMatMul.from_dense: expected shape {(self.in_features, self.out_features)}, "
                f"got {tuple(dense.shape)}"
            )
        bs = self.block_size
        grid = tf.transpose(tf.reshape(dense, (self.k_blocks, bs, self.n_blocks, bs)), [0, 2, 1, 3])
        return tf.gather_nd(grid, self.blocks)

    def prune(self, w, gates) -> tuple[BlockSparseMatMul, np.ndarray]:
        """Drops the blocks whose gate is zero: returns `(smaller plan, its weights)`.

        The kept blocks are multiplied by their gates, so
        `new_plan(x, new_w) == self(x, w, gates)`. Host-side (numpy) operation.
        """
        w = np.asarray(w)
        gates = np.asarray(gates)
        if w.shape != self.weight_shape or gates.shape != (self.nnz_blocks,):
            raise ValueError(
                f"BlockSparseMatMul.prune: expected w {self.weight_shape} and gates ({self.nnz_blocks},), "
                f"got {w.shape} and {gates.shape}"
            )
        keep = gates != 0
        layout = np.zeros_like(self.layout)
        layout[self.blocks[keep, 0], self.blocks[keep, 1]] = True
        plan = BlockSparseMatMul(
            layout,
            self.block_size,
            chunk_rows=self._requested_chunk_rows,
            jit_compile=self._requested_jit_compile,
            implementation=self.implementation,
        )
        # argwhere order of the smaller layout is the original order restricted to the kept blocks.
        pruned = (w[keep] * gates[keep, None, None]).astype(w.dtype, copy=False)
        return plan, pruned

    # Numpy references (float64), one loop over blocks each: the oracle for the fast products.

    def reference_forward(self, x, w, gates=None) -> np.ndarray:
        """`x @ W` by looping over blocks in numpy."""
        x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
        if gates is not None:
            w = w * np.asarray(gates, np.float64)[:, None, None]
        bs = self.block_size
        out = np.zeros((x.shape[0], self.out_features))
        for i, (r, c) in enumerate(self.blocks):
            out[:, c * bs : (c + 1) * bs] += x[:, r * bs : (r + 1) * bs] @ w[i]
        return out

    def reference_grad_x(self, dy, w) -> np.ndarray:
        """`dy @ W^T` by looping over blocks in numpy."""
        dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
        bs = self.block_size
        out = np.zeros((dy.shape[0], self.in_features))
        for i, (r, c) in enumerate(self.blocks):
            out[:, r * bs : (r + 1) * bs] += dy[:, c * bs : (c + 1) * bs] @ w[i].T
        return out

    def reference_grad_w(self, x, dy) -> np.ndarray:
        """`x^T @ dy` restricted to the layout's blocks, by looping in numpy."""
        x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
        bs = self.block_size
        out = np.zeros(self.weight_shape)
        for i, (r, c) in enumerate(self.blocks):
            out[i] = x[:, r * bs : (r + 1) * bs].T @ dy[:, c * bs : (c + 1) * bs]
        return out

    def _inputs(self, x, w) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.convert_to_tensor(x)
        if not x.dtype.is_floating:
            raise ValueError(f"BlockSparseMatMul: x must be floating point, got {x.dtype.name}")
        w = tf.convert_to_tensor(w, dtype=x.dtype)
        if x.shape.rank != 2 or x.shape[1] not in (None, self.in_features):
            raise ValueError(f"BlockSparseMatMul: x must be [M, {self.in_features}], got shape {x.shape}")
        if w.shape.rank != 3 or any(d not in (None, e) for d, e in zip(w.shape, self.weight_shape)):
            raise ValueError(f"BlockSparseMatMul: w must have shape {self.weight_shape}, got {w.shape}")
        # Unknown dimensions are checked when the data arrives: a w with extra blocks would otherwise
        # stand in for the zero padding block, and a short x row would be reshaped silently.
        if not x.shape[1:].is_fully_defined():
            x = tf.ensure_shape(x, [None, self.in_features], name="BlockSparseMatMul_x")
        if not w.shape.is_fully_defined():
            w = tf.ensure_shape(w, self.weight_shape, name="BlockSparseMatMul_w")
        return x, w


def block_sparse_matmul(
    x: tf.Tensor, w: tf.Tensor, layout: np.ndarray, block_size: int, gates=None
) -> tf.Tensor:
    """Functional `x @ W`: builds a `BlockSparseMatMul` plan and applies it.

    Building the plan is a few numpy operations on the layout and the
    compiled kernels are shared by every plan, but a model applying one
    layout many times should hold the plan.

    Example:
      >>> y = block_sparse_matmul(tf.ones([2, 16]), tf.ones([1, 8, 8]), np.array([[0], [1]]), 8)
      >>> y.shape, y.numpy()[0, 0].item()
      (TensorShape([2, 8]), 8.0)
    """
    return BlockSparseMatMul(layout, block_size)(x, w, gates)
