"""The arrays of one Parquet batch: one aligned allocation, filled by slice copies or gathers.

Every numeric array of a batch is carved out of one 64-byte-aligned arena
and written once; TensorFlow then aliases the arena through DLPack, so the
copy into the arena is the only copy of the ids between the Arrow buffer
and the tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ALIGNMENT", "Arena", "fill_rows", "gather_index"]

# TensorFlow kernels require buffers aligned to EIGEN_MAX_ALIGN_BYTES; a
# DLPack tensor that is not aligned aborts the process on first use.
ALIGNMENT = 64


class Arena:
    """Carves 64-byte-aligned arrays out of one allocation per batch.

    Example:
      >>> a, b = Arena([(3, np.dtype(np.int64)), (5, np.dtype(np.float32))]).arrays
      >>> a.ctypes.data % ALIGNMENT, b.ctypes.data % ALIGNMENT, a.shape, b.dtype.name
      (0, 0, (3,), 'float32')
    """

    def __init__(self, sizes: Sequence[tuple[int, np.dtype]]):
        offsets, total = [], 0
        for count, dtype in sizes:
            offsets.append(total)
            total += -(-count * dtype.itemsize // ALIGNMENT) * ALIGNMENT
        raw = np.empty(total + ALIGNMENT, dtype=np.uint8)
        shift = (-raw.ctypes.data) % ALIGNMENT
        self.arrays = [
            raw[shift + off : shift + off + count * dtype.itemsize].view(dtype)
            for off, (count, dtype) in zip(offsets, sizes)
        ]


def gather_index(starts: np.ndarray, lengths: np.ndarray, count: int) -> np.ndarray:
    """Source positions of the ids of rows given by `starts`/`lengths`, in row order."""
    if count == int(np.count_nonzero(lengths)):
        # One id per non-empty row (the Criteo-like case): no repeat needed.
        return starts[lengths > 0]
    shift = starts - (np.cumsum(lengths) - lengths)
    return np.repeat(shift, lengths) + np.arange(count, dtype=np.int64)


def fill_rows(pieces, name: str, out: np.ndarray) -> np.ndarray:
    """Writes column `name` of the batch's pieces (`(Loaded, rows)`) into `out`, piece after piece."""
    at = 0
    for loaded, rows in pieces:
        values = loaded.columns[name]
        if isinstance(rows, slice):
            r = rows.stop - rows.start
            np.copyto(out[at : at + r], values[rows], casting="unsafe")
        else:
            r = len(rows)
            np.take(values, rows, out=out[at : at + r], mode="clip")
        at += r
    return out
