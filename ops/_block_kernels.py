"""The products behind `BlockSparseMatMul`: bucketed block groupings (numpy, built once) and their matmuls.

Every output block column o of `x @ W` is the sum over its blocks (r, o) of
`x[:, r] @ w(r, o)` (`[:, r]`: block column r). Outputs are put in buckets of
similar block counts; within a bucket each output's blocks are padded with a
zero block to the bucket's width P, so one bucket is one batched matmul:

    gathered[o] = the P input block columns of output o side by side    [outputs_b, m, P*bs]
    out[o]      = gathered[o] @ (the P blocks of o stacked)             [outputs_b, m, bs]

and the bucket results are put back in output order by one gather. Buckets
keep the padding small (a random layout's column counts vary a lot) without
any scatter-add. `dy @ W^T` is the same over the transposed layout, and the
weight gradient multiplies the same gathered x by dy per output.

The transposed form computes `(x @ W)^T` the same way from `x^T`, whose
block rows are contiguous, so gathering them is a plain copy:

    gathered[o] = the P input block rows of x^T stacked                [outputs_b, P*bs, m]
    out[o]      = (the P blocks of o stacked)^T @ gathered[o]          [outputs_b, bs, m]

at the price of transposing each chunk of x in and of the result out.
Plain TensorFlow on CPU runs it faster than the column form; XLA does not.

Rows are processed in chunks so that `gathered` stays in cache.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import tensorflow as tf

__all__ = ["Bucket", "Grouping", "group_blocks", "product", "weight_grad", "PRODUCT_XLA", "WEIGHT_GRAD_XLA"]

# Cost of one more bucket in padded-block equivalents (one more gather and matmul per chunk).
BUCKET_COST_BLOCKS = 8.0
MAX_BUCKETS = 4


class Bucket(NamedTuple):
    outputs: np.ndarray  # [n] int32: the output blocks of this bucket
    partner: np.ndarray  # [n, width] int32: input block of each member; 0 in padding
    slot: np.ndarray  # [n, width] int32: index of each member in w; nnz (a zero block) in padding


class Grouping(NamedTuple):
    buckets: tuple[Bucket, ...]
    order: np.ndarray  # [outputs] int32: row of each output in the bucket results; empty -> the zero row
    position: np.ndarray  # [nnz] int32: index of each block in the flattened slots of all buckets
    outputs: int

    def tables(self) -> tuple:
        """The index arrays the kernels take: ((outputs, partner, slot) per bucket, order)."""
        return tuple(tuple(b) for b in self.buckets), self.order


def _bucket_widths(counts: np.ndarray) -> list[int]:
    """Ascending bucket widths for outputs with these block counts: least padded blocks + bucket cost."""
    values, how_many = np.unique(counts[counts > 0], return_counts=True)
    if values.size == 0:
        return []
    k = values.size
    # best[b][j]: least cost covering the first j distinct counts with b buckets; the last bucket's
    # width is values[j - 1].
    best = np.full((MAX_BUCKETS + 1, k + 1), np.inf)
    cut = np.zeros((MAX_BUCKETS + 1, k + 1), dtype=int)
    best[0][0] = 0.0
    covered = np.concatenate([[0], np.cumsum(how_many)])
    for b in range(1, MAX_BUCKETS + 1):
        for j in range(1, k + 1):
            for i in range(j):
                cost = best[b - 1][i] + (covered[j] - covered[i]) * values[j - 1] + BUCKET_COST_BLOCKS
                if cost < best[b][j]:
                    best[b][j], cut[b][j] = cost, i
    b = int(np.argmin(best[:, k]))
    widths, j = [], k
    while b > 0:
        widths.append(int(values[j - 1]))
        j, b = cut[b][j], b - 1
    return widths[::-1]


def group_blocks(key: np.ndarray, partner: np.ndarray, outputs: int) -> Grouping:
    """Groups blocks by `key` (their output coordinate); `partner` is their input coordinate."""
    nnz = key.size
    counts = np.bincount(key, minlength=outputs)
    order_by_key = np.argsort(key, kind="stable")  # stable: members keep row-major order
    first = np.cumsum(counts) - counts
    buckets, position = [], np.empty(nnz, np.int32)
    order = np.full(outputs, -1, np.int32)
    done_outputs = done_slots = 0
    low = 0
    for width in _bucket_widths(counts):
        members = np.flatnonzero((counts > low) & (counts <= width)).astype(np.int32)
        low = width
        partners = np.zeros((members.size, width), np.int32)
        slots = np.full((members.size, width), nnz, np.int32)
        for row, out in enumerate(members):
            blocks = order_by_key[first[out] : first[out] + counts[out]]
            partners[row, : blocks.size] = partner[blocks]
            slots[row, : blocks.size] = blocks
            position[blocks] = done_slots + row * width + np.arange(blocks.size)
        order[members] = done_outputs + np.arange(members.size)
        buckets.append(Bucket(members, partners, slots))
        done_outputs += members.size
        done_slots += slots.size
    order[order < 0] = done_outputs  # outputs without blocks read the zero row after the buckets
    return Grouping(tuple(buckets), order, position, outputs)


def _gather_columns(a, partner, bs):
    """[m, inputs*bs] -> [n, m, width*bs]: the input block columns of each output side by side."""
    n, width = partner.shape
    rows = tf.shape(a)[0]
    gathered = tf.gather(tf.reshape(a, (rows, -1, bs)), tf.reshape(partner, [-1]), axis=1)
    # Batch-major for the matmul: a [n, m, k] x [n, k, bs] product is several times faster than
    # the same einsum with the batch in the middle.
    return tf.transpose(tf.reshape(gathered, (rows, n, width * bs)), [1, 0, 2])


def _gather_rows(a_t, partner, bs):
    """[inputs*bs, m] (a transposed) -> [n, width*bs, m]: the input blocks of each output stacked.

    Each gathered block is `bs * m` contiguous values, one plain copy, where
    `_gather_columns` copies 128-byte pieces of every row and then transposes.
    """
    n, width = partner.shape
    rows = tf.shape(a_t)[1]
    gathered = tf.gather(tf.reshape(a_t, (-1, bs * rows)), tf.reshape(partner, [-1]))
    return tf.reshape(gathered, (n, width * bs, rows))


def _stacked_blocks(w_ext, slot, transpose_blocks, bs, transposed):
    """The blocks of each output stacked along the input features: `[n, width*bs, bs]`.

    With `transposed`, each output's stack transposed: `[n, bs, width*bs]`.
    """
    blocks = tf.gather(w_ext, slot)  # [n, width, bs_in, bs_out] (the other way round with transpose_blocks)
    if transpose_blocks:
        blocks = tf.transpose(blocks, [0, 1, 3, 2])
    if transposed:
        # [n, width, bs_in, bs_out] -> [n, bs_out, width, bs_in]
        return tf.reshape(tf.transpose(blocks, [0, 3, 1, 2]), (slot.shape[0], bs, slot.shape[1] * bs))
    return tf.reshape(blocks, (slot.shape[0], slot.shape[1] * bs, bs))


def product(a, w_ext, tables, *, outputs, transpose_blocks, block_size, chunk_rows, transposed):
    """`a @ W` (or `a @ W^T` with transpose_blocks) for a `[M, inputs*bs]`; w_ext is w plus a zero block.

    `tables` is `Grouping.tables()`. With `transposed` each chunk is computed
    as `(a @ W)^T`: output o is `(stacked blocks of o)^T @ (rows of a^T)`.
    """
    bs = block_size
    buckets, order = tables
    stacked = [_stacked_blocks(w_ext, slot, transpose_blocks, bs, transposed) for _, _, slot in buckets]

    def chunk_product(chunk):
        rows = tf.shape(chunk)[0]
        if transposed:
            chunk_t = tf.transpose(chunk)
            parts = [tf.matmul(s, _gather_rows(chunk_t, p, bs)) for (_, p, _), s in zip(buckets, stacked)]
            parts.append(tf.zeros((1, bs, rows), chunk.dtype))  # the row of outputs without blocks
            per_output = tf.gather(tf.concat(parts, axis=0), order)  # [outputs, bs, m]
            return tf.transpose(tf.reshape(per_output, (outputs * bs, rows)))
        parts = [tf.matmul(_gather_columns(chunk, p, bs), s) for (_, p, _), s in zip(buckets, stacked)]
        parts.append(tf.zeros((1, rows, bs), chunk.dtype))  # the row of outputs without blocks
        per_output = tf.gather(tf.concat(parts, axis=0), order)  # [outputs, m, bs]
        return tf.reshape(tf.transpose(per_output, [1, 0, 2]), (rows, outputs * bs))

    return _by_chunks(chunk_product, a, chunk_rows, outputs * bs)


def weight_grad(x, dy, tables, position, *, outputs, block_size, chunk_rows, transposed):
    """`x^T @ dy` at the blocks of a grouping by output column: `[nnz, bs, bs]`."""
    bs = block_size
    buckets, _ = tables

    def chunk_grad(x, dy):
        rows = tf.shape(dy)[0]
        grads = []
        if transposed:
            x_t = tf.transpose(x)
            per_output = tf.reshape(tf.transpose(dy), (outputs, bs, rows))
            for members, partner, _ in buckets:
                # [n, width*bs, m] x [n, bs, m]^T
                grad = tf.matmul(_gather_rows(x_t, partner, bs), tf.gather(per_output, members), transpose_b=True)
                grads.append(tf.reshape(grad, (-1, bs, bs)))
        else:
            per_output = tf.transpose(tf.reshape(dy, (rows, outputs, bs)), [1, 0, 2])  # [outputs, m, bs]
            for members, partner, _ in buckets:
                # [n, m, width*bs]^T x [n, m, bs]
                grad = tf.matmul(_gather_columns(x, partner, bs), tf.gather(per_output, members), transpose_a=True)
                grads.append(tf.reshape(grad, (-1, bs, bs)))
        return tf.concat(grads, axis=0) if grads else tf.zeros((0, bs, bs), x.dtype)

    if _fits_one_chunk(x, chunk_rows):
        total = chunk_grad(x, dy)
    else:
        padded = sum(int(slot.shape[0] * slot.shape[1]) for _, _, slot in buckets)
        total = tf.foldl(
            lambda acc, pair: acc + chunk_grad(pair[0], pair[1]),
            (_chunks(x, chunk_rows), _chunks(dy, chunk_rows)),  # zero padding rows add nothing
            initializer=tf.zeros((padded, bs, bs), x.dtype),
            parallel_iterations=1,
        )
    return tf.gather(total, position)


def _by_chunks(fn, a, chunk_rows, out_cols):
    if _fits_one_chunk(a, chunk_rows):
        return fn(a)
    out = tf.map_fn(fn, _chunks(a, chunk_rows), parallel_iterations=1)  # one chunk at a time: in cache
    return tf.reshape(out, (-1, out_cols))[: tf.shape(a)[0]]


def _fits_one_chunk(t, chunk_rows) -> bool:
    return t.shape[0] is not None and t.shape[0] <= chunk_rows


def _chunks(t, chunk_rows):
    """The rows of t as near-equal chunks of at most chunk_rows, zero-padded: [chunks, m, cols]."""
    rows = tf.shape(t)[0]
    count = tf.maximum((rows + chunk_rows - 1) // chunk_rows, 1)
    size = (rows + count - 1) // count
    padded = tf.pad(t, [[0, count * size - rows], [0, 0]])
    return tf.reshape(padded, (count, size, tf.shape(t)[1]))


# Shared by every plan: the index tables are arguments, so plans of equal shapes share compilations.
# XLA on CPU runs the transposed form about twice as slow as the column form; plain TensorFlow
# runs it faster (both measured at M=4096, K=N=2048, bs=32, 5-25% density).
PRODUCT_XLA = tf.function(functools.partial(product, transposed=False), jit_compile=True)
WEIGHT_GRAD_XLA = tf.function(functools.partial(weight_grad, transposed=False), jit_compile=True)
