"""The batches a spilling DoFn holds between spills, up to a limit in rows or bytes.

A spill comes before a batch that would take the held batches past the
limit (so they never pass it, a batch larger than the limit alone
excepted), and once they reach it.

Example:
  >>> import pyarrow as pa
  >>> held = SpillBuffer(4, lambda b: b.num_rows)
  >>> batch = pa.record_batch({"x": [1, 2, 3]})
  >>> held.spills_before(batch), held.add(batch), held.spills_before(batch)
  (False, False, True)
  >>> [b.num_rows for b in held.take()], held.held
  ([3], 0)
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

__all__ = ["SpillBuffer"]


class SpillBuffer:
    """Record batches held for the next spill; `size(batch)` in the unit of `limit` (rows, bytes)."""

    def __init__(self, limit: int, size: Callable[[pa.RecordBatch], int]):
        self.limit = limit
        self._size = size
        self.batches: list[pa.RecordBatch] = []
        self.held = 0

    def spills_before(self, batch: pa.RecordBatch) -> bool:
        """Whether the held batches go out before `batch` joins them: it would take them past the limit."""
        return bool(self.batches) and self.held + self._size(batch) > self.limit

    def add(self, batch: pa.RecordBatch) -> bool:
        """Holds `batch`; whether the held batches have reached the limit (time to spill)."""
        self.batches.append(batch)
        self.held += self._size(batch)
        return self.held >= self.limit

    def take(self) -> list[pa.RecordBatch]:
        """The held batches, in arrival order; the buffer is empty afterwards."""
        batches, self.batches, self.held = self.batches, [], 0
        return batches
