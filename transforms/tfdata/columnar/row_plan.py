"""`RowPlan`: which rows of which units (row-group slices) make up batch i.

A worker's rows form a sequence per epoch: its units in order (permuted
each epoch when shuffling), and inside a unit its rows in order (permuted
when shuffling). Batch i is rows `[begin, end)` of that sequence, across
unit boundaries, so it is a pure function of i and the plan: the dataset
built on it is `Dataset.range(...) -> map(read)`, which
`tf.train.Checkpoint` can save and restore, and an `InputState` resumes at
any row.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

import numpy as np

from transforms.tfdata.core.state import InputState

__all__ = ["RowPlan"]

# Row permutations kept for the units being read; the reader needs the current unit's and
# the next one's.
_CACHED_PERMUTATIONS = 3


class RowPlan:
    """The batches of a worker's rows over its epochs.

    Args:
      unit_rows: int64 `[units]`, the rows of each of the worker's units.
      batch_size: rows per batch; the last batch of an epoch is smaller
        unless `drop_remainder`.
      shuffle: permute the units each epoch, and the rows inside each unit,
        from `seed` and the epoch number.
      seed: a non-negative integer.
      drop_remainder: drop each epoch's last partial batch.
      fingerprint: the `InputState` fingerprint of this plan.
      start: resume here (an `InputState` of this plan).

    Raises:
      ValueError: `start` is from another plan or out of range.
    """

    def __init__(
        self,
        unit_rows: np.ndarray,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        drop_remainder: bool,
        fingerprint: int,
        start: InputState | None = None,
    ):
        self.unit_rows = np.asarray(unit_rows, dtype=np.int64)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_remainder = bool(drop_remainder)
        self.fingerprint = fingerprint
        self.rows_per_epoch = int(self.unit_rows.sum())
        self._lock = threading.Lock()
        self._orders: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._perms: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._start_epoch, self._start_row = 0, 0
        if start is not None:
            self._start_epoch, self._start_row = self._resolve_start(start)

    def _batches(self, rows: int) -> int:
        if self.drop_remainder:
            return rows // self.batch_size
        return math.ceil(rows / self.batch_size)

    @property
    def start(self) -> tuple[int, int]:
        """`(epoch, row of that epoch)` where batch 0 begins (`(0, 0)` without a `start`)."""
        return self._start_epoch, self._start_row

    @property
    def batches_per_epoch(self) -> int:
        """Batches in a whole epoch: ceil(rows / batch_size), or floor with `drop_remainder`."""
        return self._batches(self.rows_per_epoch)

    def num_batches(self, num_epochs: int | None) -> int | None:
        """Batches the dataset yields from its start over `num_epochs` (None: endless)."""
        if num_epochs is None:
            return None
        if self._start_epoch >= num_epochs:
            return 0
        first = self._batches(self.rows_per_epoch - self._start_row)
        return first + (num_epochs - self._start_epoch - 1) * self.batches_per_epoch

    def locate(self, i: int) -> tuple[int, int, int]:
        """Batch `i` (counted from the start) as `(epoch, begin_row, end_row)` in that epoch."""
        first = self._batches(self.rows_per_epoch - self._start_row)
        if i < first:
            epoch, begin = self._start_epoch, self._start_row + i * self.batch_size
        else:
            j = i - first
            epoch = self._start_epoch + 1 + j // self.batches_per_epoch
            begin = (j % self.batches_per_epoch) * self.batch_size
        return epoch, begin, min(begin + self.batch_size, self.rows_per_epoch)

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """`(unit order, cumulative rows [len + 1])` of an epoch."""
        with self._lock:
            cached = self._orders.get(epoch)
            if cached is not None:
                return cached
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.unit_rows))
        else:
            order = np.arange(len(self.unit_rows))
        cum = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(self.unit_rows[order], out=cum[1:])
        with self._lock:
            self._orders[epoch] = (order, cum)
            while len(self._orders) > 2:
                self._orders.popitem(last=False)
        return order, cum

    def segments(self, epoch: int, begin: int, end: int) -> list[tuple[int, int | None, slice | np.ndarray]]:
        """Rows `[begin, end)` of an epoch as `(unit, the unit after it or None, its rows)` triples.

        The triples are in the epoch's order; each one's rows are a slice of
        the unit, or an index array into it when shuffling. The unit after
        it (in the epoch's order) is what the reader loads ahead.
        """
        order, cum = self.epoch_order(epoch)
        k = int(np.searchsorted(cum, begin, side="right")) - 1
        out = []
        while k < len(order) and cum[k] < end:
            unit_id = int(order[k])
            ahead = int(order[k + 1]) if k + 1 < len(order) else None
            lo, hi = max(begin - int(cum[k]), 0), min(end - int(cum[k]), int(self.unit_rows[unit_id]))
            rows = self._perm(epoch, unit_id)[lo:hi] if self.shuffle else slice(lo, hi)
            out.append((unit_id, ahead, rows))
            k += 1
        return out

    def position(self, epoch: int, row: int) -> InputState:
        """The `InputState` of row `row` of epoch `epoch` (an epoch's end is the next one's start)."""
        remaining = self.rows_per_epoch - row
        if remaining == 0 or (self.drop_remainder and remaining < self.batch_size):
            return InputState(epoch + 1, 0, 0, self.fingerprint)
        _, cum = self.epoch_order(epoch)
        shard = int(np.searchsorted(cum, row, side="right")) - 1
        return InputState(epoch, shard, row - int(cum[shard]), self.fingerprint)

    def _resolve_start(self, start: InputState) -> tuple[int, int]:
        if start.fingerprint != self.fingerprint:
            raise ValueError(
                "start: this InputState belongs to another reading plan (different files, row groups, "
                "worker, shuffle or seed); resume with the same arguments that produced it"
            )
        if start.shard >= len(self.unit_rows):
            raise ValueError(f"start: shard {start.shard} out of range (this worker has {len(self.unit_rows)})")
        order, cum = self.epoch_order(start.epoch)
        if start.row >= self.unit_rows[order[start.shard]]:
            raise ValueError(f"start: row {start.row} is past the end of shard {start.shard}")
        return start.epoch, int(cum[start.shard]) + start.row

    def _perm(self, epoch: int, unit_id: int) -> np.ndarray:
        key = (epoch, unit_id)
        with self._lock:
            perm = self._perms.get(key)
            if perm is not None:
                return perm
        perm = np.random.default_rng([self.seed, epoch, unit_id, 1]).permutation(int(self.unit_rows[unit_id]))
        with self._lock:
            self._perms[key] = perm
            while len(self._perms) > _CACHED_PERMUTATIONS:
                self._perms.popitem(last=False)
        return perm
