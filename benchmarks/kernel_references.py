"""Numpy references for the CUDA kernels (`ops/cuda/`), and the tolerances they are checked to.

Each reference computes its result from the definition, in float64, without
the kernels' index plans or orderings: the embedding bag with `np.add.at`
over the COO, the gradient with `np.unique`, the block-sparse products
through the dense `[K, N]` matrix. No GPU or TensorFlow needed; the
harness (`benchmarks.gpu_kernels`) and the CPU tests share them.

Tolerances (elementwise): `|ours - ref| <= rtol * |ref| + scale * bound`,
where `bound` is the same product over absolute values (`|a| @ |W|`, or the
sum of `|gain| * |row|`): the error a float32 accumulation of those terms
can reach, whatever their signs. 16-bit results add their own rounding
(`rtol`): 2^-11 for float16, 2^-8 for bfloat16; a float16 result below 2^-14 is subnormal, so it may also be
off by half the subnormal spacing (2^-25) whatever its size (`SUBNORMAL_ROUNDING`). "tf32" (float32 values
multiplied on TF32 tensor cores, each input rounded to 10 mantissa bits, relative error up to 2^-11 each) allows
`scale` 2^-10 plus float32's: each product term may be off by 2^-10 of its magnitude.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "TOLERANCES",
    "bf16_bits",
    "bf16_values",
    "block_dense",
    "check_close",
    "embedding_bag",
    "embedding_bag_grad",
    "embedding_bag_gains_grad",
    "first_bad_entries",
]

# dtype name -> (rtol, scale): see the module docstring.
TOLERANCES = {
    "float32": (1e-5, 2e-5),
    "float16": (1e-3, 1e-4),
    "bfloat16": (8e-3, 1e-4),
    "tf32": (1e-5, 2.0**-10 + 2e-5),
}
SUBNORMAL_ROUNDING = {"float32": 0.0, "float16": 2.0**-25, "bfloat16": 0.0, "tf32": 0.0}


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even (numpy has no bfloat16)."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> their exact float32 values."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _counts(rows, cols, sample_count, vocab) -> np.ndarray:
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    return (rows >= 0) & (rows < sample_count) & (cols >= 0) & (cols < vocab)


def embedding_bag(table, rows, cols, gains, sample_count) -> tuple[np.ndarray, np.ndarray]:
    """`out[r] = sum of gains[k] * table[cols[k]]` over entries of row r (padding and bad ids left out).

    Returns (out, bound) `[sample_count, dim]` float64, bound the same sum over absolute values.
    """
    table = np.asarray(table, np.float64)
    keep = _counts(rows, cols, sample_count, table.shape[0])
    rows, cols = np.asarray(rows)[keep], np.asarray(cols)[keep]
    gains = np.asarray(gains, np.float64)[keep]
    out = np.zeros((sample_count, table.shape[1]))
    bound = np.zeros_like(out)
    np.add.at(out, rows, gains[:, None] * table[cols])
    np.add.at(bound, rows, np.abs(gains[:, None] * table[cols]))
    return out, bound


def embedding_bag_grad(out_grad, rows, cols, gains, sample_count, vocab) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The table gradient as (distinct ids ascending, their summed rows, bound), padding left out."""
    out_grad = np.asarray(out_grad, np.float64)
    keep = _counts(rows, cols, sample_count, vocab)
    rows, cols = np.asarray(rows)[keep], np.asarray(cols, np.int64)[keep]
    gains = np.asarray(gains, np.float64)[keep]
    ids, slot = np.unique(cols, return_inverse=True)
    summed = np.zeros((ids.size, out_grad.shape[1]))
    bound = np.zeros_like(summed)
    np.add.at(summed, slot, gains[:, None] * out_grad[rows])
    np.add.at(bound, slot, np.abs(gains[:, None] * out_grad[rows]))
    return ids, summed, bound


def embedding_bag_gains_grad(out_grad, table, rows, cols, sample_count) -> tuple[np.ndarray, np.ndarray]:
    """`d_gains[k] = dot(out_grad[rows[k]], table[cols[k]])`, 0 for entries that do not count; and its bound."""
    out_grad, table = np.asarray(out_grad, np.float64), np.asarray(table, np.float64)
    keep = _counts(rows, cols, sample_count, table.shape[0])
    grad = np.zeros(len(keep))
    bound = np.zeros(len(keep))
    terms = out_grad[np.asarray(rows)[keep]] * table[np.asarray(cols)[keep]]
    grad[keep] = terms.sum(axis=1)
    bound[keep] = np.abs(terms).sum(axis=1)
    return grad, bound


def first_bad_entries(rows, cols, sample_count, vocab) -> tuple[int, int]:
    """(first position with an id outside [0, vocab), first with a row outside [0, sample_count]); n if none."""
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    n = len(rows)
    bad_cols = np.flatnonzero((cols < 0) | (cols >= vocab))
    bad_rows = np.flatnonzero((rows < 0) | (rows > sample_count))
    return (int(bad_cols[0]) if bad_cols.size else n, int(bad_rows[0]) if bad_rows.size else n)


def block_dense(layout: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The dense `[K, N]` float64 matrix of blocks w `[nnz, bs, bs]` placed at `np.argwhere(layout)`."""
    layout = np.asarray(layout, bool)
    bs = w.shape[1]
    dense = np.zeros((layout.shape[0] * bs, layout.shape[1] * bs))
    for i, (r, c) in enumerate(np.argwhere(layout)):
        dense[r * bs : (r + 1) * bs, c * bs : (c + 1) * bs] = w[i]
    return dense


def check_close(ours, ref, bound, dtype: str, what: str) -> float:
    """Raises AssertionError naming `what` when ours is outside the tolerance; returns the worst error/allowed."""
    rtol, scale = TOLERANCES[dtype]
    ours, ref, bound = (np.asarray(a, np.float64) for a in (ours, ref, bound))
    if ours.shape != ref.shape:
        raise AssertionError(f"{what}: shape {ours.shape}, expected {ref.shape}")
    allowed = rtol * np.abs(ref) + scale * bound + SUBNORMAL_ROUNDING[dtype] + 1e-30
    excess = np.abs(ours - ref) / allowed
    if not np.all(np.isfinite(ours)) or (excess.size and excess.max() > 1.0):
        worst = int(np.nanargmax(excess)) if excess.size else 0
        raise AssertionError(
            f"{what} ({dtype}): differs from the reference at flat index {worst}: "
            f"{ours.ravel()[worst]!r} vs {ref.ravel()[worst]!r} (allowed {allowed.ravel()[worst]:.3g})"
        )
    return float(excess.max()) if excess.size else 0.0
