"""IdCounter: exact int64 id counts in one native hash table (`sparse_io/native/id_counts.cc`).

The statistics count every id of every feature. Counting a batch by
`np.bincount`/`np.unique` and summing the parts by sorting (the reference,
`transforms.beam._counts`) costs O(distinct ids) per merge; the native table
adds each id in place, and does the Misra-Gries step of a bounded summary
(`prune`) without leaving it. `available()` is False where no compiler works
(the callers then run the reference).

Example:
  >>> counter = IdCounter(); counter.add(np.array([7, 3, 7], np.int64))
  >>> ids, counts = counter.export()
  >>> sorted(zip(ids.tolist(), counts.tolist()))
  [(3, 1), (7, 2)]
"""

from __future__ import annotations

import ctypes
import functools
import weakref

import numpy as np

__all__ = ["IdCounter", "available"]


@functools.cache
def _functions() -> dict | None:
    from sparse_io import native_build

    p, i64 = ctypes.c_void_p, ctypes.c_int64
    signatures: dict[str, tuple[list, object]] = {
        "new": ([], p),
        "free": ([p], None),
        "add": ([p, p, p, i64], i64),
        "size": ([p], i64),
        "export": ([p, p, p], None),
        "prune": ([p, i64], i64),
    }
    functions = {}
    for name, (argtypes, restype) in signatures.items():
        function = native_build.function(f"sparseflow_id_counts_{name}", argtypes, restype)
        if function is None:
            return None
        functions[name] = function
    return functions


def available() -> bool:
    """Whether the native counter can be built in this process."""
    return _functions() is not None


class IdCounter:
    """id -> how many times it was counted, exact, for whole int64 arrays at once.

    Raises:
      RuntimeError: the native library is not available (check `available()`).
      MemoryError: the table could not grow (the counter is unusable then).
    """

    def __init__(self) -> None:
        functions = _functions()
        if functions is None:
            raise RuntimeError("IdCounter: sparseflow's native I/O helpers are not available here")
        self._calls = functions
        handle = functions["new"]()
        if not handle:
            raise MemoryError("IdCounter: no memory for a table")
        self._handle = handle
        self._release = weakref.finalize(self, functions["free"], handle)

    def add(self, ids: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Counts each of `ids` (int64 `[n]`) once, or `weights[i]` (int64 `[n]`, each >= 1) times.

        Raises:
          ValueError: weights of another length, or one below 1.
          MemoryError: the table could not grow (the counter is unusable then).
        """
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if weights is not None:
            weights = np.ascontiguousarray(weights, dtype=np.int64)
            if weights.shape != ids.shape:
                raise ValueError(f"IdCounter.add: {len(weights)} weights for {len(ids)} ids")
            if len(weights) and weights.min() < 1:  # a count of 0 marks an empty slot
                raise ValueError(f"IdCounter.add: weights must be >= 1, got {int(weights.min())}")
        if len(ids) and self._calls["add"](self._handle, ids.ctypes.data,
                                           None if weights is None else weights.ctypes.data, len(ids)) == -2:
            raise MemoryError("IdCounter: no memory to grow the table")

    def __len__(self) -> int:
        return int(self._calls["size"](self._handle))

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64 `[distinct]`, counts int64 `[distinct]`), in no particular order."""
        size = len(self)
        ids, counts = np.empty(size, np.int64), np.empty(size, np.int64)
        if size:
            self._calls["export"](self._handle, ids.ctypes.data, counts.ctypes.data)
        return ids, counts

    def prune(self, keep: int) -> int:
        """Misra-Gries step: subtracts the (keep+1)-th largest count from all, drops those left <= 0.

        Returns the amount subtracted (0 when at most `keep` ids are held).
        """
        subtracted = int(self._calls["prune"](self._handle, keep))
        if subtracted == -2:
            raise MemoryError("IdCounter: no memory to prune the table")
        return subtracted
