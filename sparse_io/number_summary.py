"""float32_summary: a float32 column's present values summarised and sorted, natively (`native/number_summary.cc`).

A derived feature's analysis (`transforms.beam.derived.SourceSummary`) needs
per batch the count, mean, sum of squared deviations, min and max of a
column's present values, and those values sorted for its quantile sketch.
The reference does it with numpy; `float32_summary` does it in one native
call over the Arrow buffers, sorting by radix. `native_available()` is False
where no compiler works (the analysis then runs its reference).

Example:
  >>> s = float32_summary(pa.array([3.0, None, 1.0, float("nan"), 2.0], pa.float32()))
  >>> s.count, s.mean, s.m2, s.low, s.high, s.sorted.tolist()
  (3, 2.0, 2.0, 1.0, 3.0, [1.0, 2.0, 3.0])
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools

import numpy as np
import pyarrow as pa

__all__ = ["NumberSummary", "float32_summary", "native_available"]


@dataclasses.dataclass
class NumberSummary:
    """A column's present values (not null, not NaN): how many, mean, sum of squared deviations, min, max, sorted.

    `sorted` is float32 `[count]`, ascending, with -0.0 taken as 0.0.
    """

    count: int
    mean: float
    m2: float
    low: float
    high: float
    sorted: np.ndarray


@functools.cache
def _native():
    from sparse_io import native_build

    p, i64 = ctypes.c_void_p, ctypes.c_int64
    return native_build.function("sparseflow_float32_summary", [p, p, i64, i64, p, p], i64)


def native_available() -> bool:
    """Whether the native summary can be built in this process."""
    return _native() is not None


def float32_summary(column: pa.Array | pa.ChunkedArray) -> NumberSummary:
    """The `NumberSummary` of a float32 column.

    Raises:
      ValueError: a column that is not float32.
      RuntimeError: the native library is not available.
    """
    function = _native()
    if function is None:
        raise RuntimeError("float32_summary: the native helpers did not build")
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.type != pa.float32():
        raise ValueError(f"float32_summary: needs a float32 column, got {column.type}")
    n = len(column)
    out = np.empty(n, np.float32)
    moments = np.zeros(4, np.float64)
    validity, data = column.buffers()[:2]
    if n == 0 or data is None:
        return NumberSummary(0, 0.0, 0.0, float("inf"), float("-inf"), out[:0])
    count = function(data.address, 0 if validity is None or column.null_count == 0 else validity.address,
                     column.offset, n, out.ctypes.data, moments.ctypes.data)
    if count == 0:
        return NumberSummary(0, 0.0, 0.0, float("inf"), float("-inf"), out[:0])
    mean, m2, low, high = (float(v) for v in moments)
    return NumberSummary(int(count), mean, m2, low, high, out[:count])
