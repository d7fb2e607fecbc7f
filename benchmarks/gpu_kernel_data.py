"""Kernel inputs in the dtypes the CUDA kernels store (float16, bfloat16 bits) and the bags they take."""

from __future__ import annotations

import numpy as np

from benchmarks import kernel_references as ref

BLOCK_SIZES = (8, 16, 32, 64)
DTYPES = ("float32", "float16", "bfloat16")


def to_dtype(values: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(device representation, its exact values as float64) of float32 values in `dtype` ("tf32": float32 storage,
    rounded only inside the tensor-core products)."""
    values = np.asarray(values, np.float32)
    if dtype in ("float32", "tf32"):
        return values, values.astype(np.float64)
    if dtype == "float16":
        half = values.astype(np.float16)
        return half, half.astype(np.float64)
    bits = ref.bf16_bits(values)
    return bits, ref.bf16_values(bits).astype(np.float64)


def from_dtype(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return ref.bf16_values(raw).astype(np.float64)
    return raw.astype(np.float64)


STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16, "tf32": np.float32}


class Bag:
    """A COO batch: rows (int32, sorted unless shuffled), ids (int64), gains (float32)."""

    def __init__(self, rng, sample_count, vocab, dim, max_ids, *, padding=0, zipf=None, shuffle=False,
                 gain_range=(0.5, 1.5)):
        lengths = rng.integers(0, max_ids + 1, sample_count)
        rows = np.repeat(np.arange(sample_count), lengths)
        if zipf:
            cols = (rng.zipf(zipf, rows.size) - 1) % vocab
        else:
            cols = rng.integers(0, vocab, rows.size)
        gains = rng.uniform(*gain_range, rows.size)
        # Padding as ops.pad_coo writes it: row == sample_count, id 0, gain 0.
        rows = np.concatenate([rows, np.full(padding, sample_count)])
        cols = np.concatenate([cols, np.zeros(padding, np.int64)])
        gains = np.concatenate([gains, np.zeros(padding)])
        if shuffle:
            order = rng.permutation(rows.size)
            rows, cols, gains = rows[order], cols[order], gains[order]
        self.rows, self.cols = rows.astype(np.int32), cols.astype(np.int64)
        self.gains = gains.astype(np.float32)
        self.lengths = lengths
        self.sample_count, self.vocab, self.dim, self.n = sample_count, vocab, dim, rows.size
        self.table = rng.standard_normal((vocab, dim)).astype(np.float32)
