"""sum_raw_values: one sum of the raw-value counts by fingerprint, natively (`sparse_io/native/raw_value_sums.cc`).

`transforms.beam._fingerprint_counts.FingerprintCounts` sums its table and its
buffered strings every 65,536 values: group by 64-bit fingerprint, give the
HyperLogLog the new fingerprints, prune (Misra-Gries), keep each fingerprint's
first string and check it against its last. Its reference does that with
`sparse_io.fingerprint_groups` (numpy and Arrow) and two Arrow gathers;
`sum_raw_values` does it in one native call that reads the strings where they
lie. `native_available()` is False where no compiler works (the summary then
runs its reference).

Example:
  >>> from sparse_io.string_hashes import fingerprint64
  >>> values = pa.array(["a", "b", "a"])
  >>> fps, counts, strings, _ = sum_raw_values([(fingerprint64(values), values, None)])
  >>> counts.tolist(), strings.to_pylist()
  ([2, 1], ['a', 'b'])
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["FingerprintCollision", "native_available", "sum_raw_values"]

_WIDTHS = {pa.string(): 4, pa.binary(): 4, pa.large_string(): 8, pa.large_binary(): 8}
Part = tuple[np.ndarray, pa.Array, "np.ndarray | None"]


class FingerprintCollision(ValueError):
    """Two different values with one fingerprint: `first` counted, `other` met later with its fingerprint."""

    def __init__(self, first, other):
        super().__init__(f"{other!r} and {first!r} share a 64-bit fingerprint")
        self.first, self.other = first, other


@functools.cache
def _native():
    from sparse_io import native_build

    p, i64 = ctypes.c_void_p, ctypes.c_int64
    return native_build.function("sparseflow_raw_value_sum",
                                 [i64, p, p, p, p, p, p, i64, i64, p, i64, i64, i64, p, p, p, p, p, p], i64)


def native_available() -> bool:
    """Whether the native sum can be built in this process."""
    return _native() is not None


def sum_raw_values(parts: Sequence[Part], prune_above: int = 0, rank: int = 0,
                   registers: np.ndarray | None = None, register_from: int = 0, sketching: bool = False,
                   ) -> tuple[np.ndarray, np.ndarray, pa.Array, int]:
    """`(fingerprints, counts, strings, threshold)`: `parts` summed by fingerprint, in the order first met.

    Each part is `(fingerprints, values, counts)`: int64/uint64 [n], flat strings or binary without nulls [n],
    and int64 [n] counts (None: 1 each). Every value must be of one kind (all text or all binary); the strings
    come back as large_string / large_binary, each fingerprint's first one.

    With `prune_above` > 0 and more distinct fingerprints than that, the `rank`-th largest count is subtracted
    from every count and those left at zero or below are dropped; `threshold` is what was subtracted (else 0).
    `registers` (a HyperLogLog's uint8 registers, 2**p of them) are given every fingerprint from the
    `register_from`-th when `sketching`, and every one when the sum prunes (a sketch starting now).

    Raises:
      FingerprintCollision: a kept fingerprint's last value differs from its first.
      ValueError: a part's lengths disagree, nulls, or a value type other than string/binary.
      RuntimeError: the native library is not available.
      MemoryError: no memory for the sum.
    """
    function = _native()
    if function is None:
        raise RuntimeError("sum_raw_values: the native helpers did not build")
    count = len(parts)
    keep = []  # the arrays whose memory the call reads
    # One row per argument table of the call: fingerprints, offsets, offset widths, data, lengths, counts.
    tables = np.zeros((6, max(count, 1)), np.int64)
    binary, total, nbytes = None, 0, 0
    for p, (fingerprints, values, counts) in enumerate(parts):
        width = _WIDTHS.get(values.type)
        if width is None:
            raise ValueError(f"sum_raw_values: values must be strings or binary, got {values.type}")
        is_binary = values.type in (pa.binary(), pa.large_binary())
        if binary is not None and is_binary != binary:
            raise ValueError("sum_raw_values: strings and binary values in one sum")
        binary = is_binary
        if values.null_count:
            raise ValueError("sum_raw_values: values must not be null")
        n = len(values)
        fps = np.ascontiguousarray(fingerprints).view(np.int64)
        if fps.shape != (n,):
            raise ValueError(f"sum_raw_values: {fps.size} fingerprints for {n} values")
        keep += [fps, values]
        tables[0, p], tables[2, p], tables[4, p] = fps.ctypes.data, width, n
        total += n
        if n:
            _, offsets, data = values.buffers()
            tables[1, p] = offsets.address + values.offset * width
            if data is not None:
                tables[3, p] = data.address
                ends = np.frombuffer(offsets, np.int32 if width == 4 else np.int64)
                nbytes += int(ends[values.offset + n] - ends[values.offset])  # the part's own strings
        if counts is not None:
            counts = np.ascontiguousarray(counts, dtype=np.int64)
            if counts.shape != (n,):
                raise ValueError(f"sum_raw_values: {counts.size} counts for {n} values")
            keep.append(counts)
            tables[5, p] = counts.ctypes.data
    out_fps, out_counts, out_offsets, out_data = _scratch(total, nbytes)
    threshold, collision = np.zeros(1, np.int64), np.zeros(4, np.int64)
    pointer, precision = _registers(registers)
    at = tables.ctypes.data
    row = tables.strides[0]
    kept = function(count, at, at + row, at + 2 * row, at + 3 * row, at + 4 * row, at + 5 * row, prune_above, rank,
                    pointer, precision, register_from, int(sketching), out_fps.ctypes.data, out_counts.ctypes.data,
                    out_offsets.ctypes.data, out_data.ctypes.data, threshold.ctypes.data, collision.ctypes.data)
    if kept == -1:
        raise MemoryError(f"sum_raw_values: no memory to sum {total:,} values")
    if kept < -1:
        first = parts[collision[0]][1][int(collision[1])].as_py()
        other = parts[collision[2]][1][int(collision[3])].as_py()
        raise FingerprintCollision(first, other)
    wide = pa.large_binary() if binary else pa.large_string()
    strings = pa.Array.from_buffers(wide, kept, [None, pa.py_buffer(out_offsets[: kept + 1].copy()),
                                                 pa.py_buffer(out_data[: int(out_offsets[kept])].copy())])
    return out_fps[:kept].copy(), out_counts[:kept].copy(), strings, int(threshold[0])


_thread = threading.local()
_KEPT_VALUES, _KEPT_BYTES = 1 << 20, 64 << 20


def _scratch(values: int, nbytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The thread's output buffers, grown but never shrunk.

    Fresh ones cost a page fault per 4 KiB written (7% of the sums of 400k Criteo-like rows' 26 columns); the
    results are copied out at their own size, the kept groups', which is mostly far below the values'. A sum
    beyond `_KEPT_VALUES` values or `_KEPT_BYTES` bytes (a summary of a large capacity) gets buffers of its own.
    """
    if values >= _KEPT_VALUES or nbytes >= _KEPT_BYTES:
        return (np.empty(values + 1, np.int64), np.empty(values + 1, np.int64), np.empty(values + 1, np.int64),
                np.empty(nbytes + 1, np.uint8))
    scratch = getattr(_thread, "scratch", None)
    if scratch is None or len(scratch[0]) < values + 1 or len(scratch[3]) < nbytes + 1:
        size, data = max(values + 1, 1 << 16), max(nbytes + 1, 1 << 20)
        if scratch is not None:
            size = min(max(size, 2 * len(scratch[0])), _KEPT_VALUES)
            data = min(max(data, 2 * len(scratch[3])), _KEPT_BYTES)
        scratch = _thread.scratch = (np.empty(size, np.int64), np.empty(size, np.int64), np.empty(size, np.int64),
                                     np.empty(data, np.uint8))
    return scratch


def _registers(registers: np.ndarray | None) -> tuple[int | None, int]:
    if registers is None:
        return None, 0
    if registers.dtype != np.uint8 or not registers.flags.c_contiguous or not registers.flags.writeable:
        raise ValueError("sum_raw_values: registers must be a writable, contiguous uint8 array")
    precision = len(registers).bit_length() - 1
    if len(registers) != 1 << precision or not 4 <= precision <= 30:
        raise ValueError(f"sum_raw_values: {len(registers)} registers is not a power of two from 16")
    return registers.ctypes.data, precision
