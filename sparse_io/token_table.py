"""Exact token tables over Arrow string arrays, in native code (`sparse_io/native/token_table.cc`).

`TokenTable`: token -> index, for vocabulary lookups. `TokenCounter`:
token -> count, for vocabularies' counts.

Vocabulary lookups find every id of a batch in a table of up to millions of
tokens. The native table hashes each probe once and compares bytes only
where the hashes agree; the caller's numpy path (Fingerprint64, a sorted
table, a byte comparison: `transforms.beam.lookup.VocabularyLookup`) is its
reference and runs where `available()` is False (no C++ compiler).

Example:
  >>> table = TokenTable(pa.array(["b", "a"]))
  >>> table.lookup(pa.array(["a", "zz", "b"])).tolist()
  [1, -1, 0]
"""

from __future__ import annotations

import ctypes
import functools
import weakref

import numpy as np
import pyarrow as pa

__all__ = ["TokenCounter", "TokenTable", "available"]

_NARROW = (pa.string(), pa.binary())
_WIDE = (pa.large_string(), pa.large_binary())


@functools.cache
def _functions():
    from sparse_io import native_build

    library = native_build.load()
    if library is None:
        return None
    new, free, lookup = (
        library.sparseflow_token_table_new,
        library.sparseflow_token_table_free,
        library.sparseflow_token_table_lookup,
    )
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    new.argtypes, new.restype = [p, p, i64], p
    free.argtypes, free.restype = [p], None
    lookup.argtypes, lookup.restype = [p, p, ctypes.c_int32, p, i64, p], ctypes.c_int32
    counter = {
        "new": library.sparseflow_token_counter_new,
        "free": library.sparseflow_token_counter_free,
        "add": library.sparseflow_token_counter_add,
        "size": library.sparseflow_token_counter_size,
        "export": library.sparseflow_token_counter_export,
    }
    counter["new"].argtypes, counter["new"].restype = [], p
    counter["free"].argtypes, counter["free"].restype = [p], None
    counter["add"].argtypes, counter["add"].restype = [p, p, ctypes.c_int32, p, i64], i64
    counter["size"].argtypes, counter["size"].restype = [p, p, p], None
    counter["export"].argtypes, counter["export"].restype = [p, p, p, p], None
    return new, free, lookup, counter


def available() -> bool:
    """Whether the native table can be built in this process."""
    return _functions() is not None


def _buffers(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets of each string, int32 or int64 [n + 1], the data buffer uint8) of a null-free string array."""
    if strings.null_count:
        raise ValueError("TokenTable: strings must not be null")
    if strings.type not in _NARROW + _WIDE:
        strings = strings.cast(pa.large_binary())
    width = np.int32 if strings.type in _NARROW else np.int64
    offsets = np.frombuffer(strings.buffers()[1], dtype=width)[strings.offset : strings.offset + len(strings) + 1]
    buffer = strings.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None and buffer.size else np.zeros(1, np.uint8)
    return offsets, data


class TokenTable:
    """token -> its position in `tokens`, exact (bytes compared), for whole string arrays at once.

    Args:
      tokens: a string or binary array (any offset width), no nulls; a
        repeated token keeps its first position.

    Raises:
      RuntimeError: the native library is not available (check `available()`).
      ValueError: a null token.
      MemoryError: the table could not be allocated.
    """

    def __init__(self, tokens: pa.Array):
        functions = _functions()
        if functions is None:
            raise RuntimeError("TokenTable: sparseflow's native I/O helpers are not available here")
        new, free, self._lookup, _ = functions
        offsets, data = _buffers(tokens)
        wide = np.ascontiguousarray(offsets, dtype=np.int64)
        handle = new(wide.ctypes.data, data.ctypes.data, len(tokens))
        if not handle:
            raise MemoryError(f"TokenTable: no memory for a table of {len(tokens)} tokens")
        self._handle = handle
        self._size = len(tokens)
        self._release = weakref.finalize(self, free, handle)

    def __len__(self) -> int:
        return self._size

    def lookup(self, values: pa.Array) -> np.ndarray:
        """int64 `[len(values)]`: each string's position in the tokens, or -1 where it is not one.

        Raises:
          ValueError: a null value.
        """
        offsets, data = _buffers(values)
        out = np.empty(len(values), dtype=np.int64)
        if len(values):
            self._lookup(self._handle, offsets.ctypes.data, offsets.itemsize, data.ctypes.data, len(values),
                         out.ctypes.data)
        return out


class TokenCounter:
    """token -> how many times it was added, exact, for whole string arrays at once.

    Example:
      >>> counter = TokenCounter(); counter.add(pa.array(["b", "a", "b"]))
      >>> counter.table(pa.large_string()).to_pydict()
      {'value': ['b', 'a'], 'count': [2, 1]}

    Raises:
      RuntimeError: the native library is not available (check `available()`).
      MemoryError: the table could not grow.
    """

    def __init__(self):
        functions = _functions()
        if functions is None:
            raise RuntimeError("TokenCounter: sparseflow's native I/O helpers are not available here")
        self._calls = functions[3]
        handle = self._calls["new"]()
        if not handle:
            raise MemoryError("TokenCounter: no memory for a table")
        self._handle = handle
        self._release = weakref.finalize(self, self._calls["free"], handle)

    def add(self, values: pa.Array) -> None:
        """Counts every string of `values` (no nulls).

        Raises:
          ValueError: a null value.
          MemoryError: the table could not grow (the counter is unusable then).
        """
        offsets, data = _buffers(values)
        if len(values) and self._calls["add"](self._handle, offsets.ctypes.data, offsets.itemsize,
                                              data.ctypes.data, len(values)) == -2:
            raise MemoryError("TokenCounter: no memory to grow the table")

    def __len__(self) -> int:
        tokens, size = ctypes.c_int64(), ctypes.c_int64()
        self._calls["size"](self._handle, ctypes.byref(tokens), ctypes.byref(size))
        return tokens.value

    def table(self, value_type: pa.DataType) -> pa.Table:
        """`(value, count)`, distinct values of type `value_type` (large_string or large_binary), first seen first."""
        tokens, size = ctypes.c_int64(), ctypes.c_int64()
        self._calls["size"](self._handle, ctypes.byref(tokens), ctypes.byref(size))
        offsets = np.empty(tokens.value + 1, dtype=np.int64)
        data = np.empty(max(size.value, 1), dtype=np.uint8)
        counts = np.empty(tokens.value, dtype=np.int64)
        self._calls["export"](self._handle, offsets.ctypes.data, data.ctypes.data, counts.ctypes.data)
        values = pa.Array.from_buffers(
            value_type, tokens.value, [None, pa.py_buffer(offsets), pa.py_buffer(data[: size.value])]
        )
        return pa.table({"value": values, "count": pa.array(counts)})
