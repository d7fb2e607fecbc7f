"""Which rows each input worker reads: disjoint, complete, never empty.

With at least as many non-empty files as workers, each worker takes whole
files (round-robin over the sorted names, as tf.data's FILE auto-shard
does). Otherwise, or always with `balance="rows"`, the rows themselves are
cut into contiguous ranges, one per worker, so a single large file still
feeds every worker and uneven files still give every worker the same rows. Either way the
union over workers is every row exactly once.

Pure Python: no TensorFlow, no file access.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = ["BALANCES", "Unit", "check_balance", "resolve_worker", "split_files", "plan_units"]


@dataclasses.dataclass(frozen=True)
class Unit:
    """Rows `[start, stop)` of row group `row_group` of file number `file`."""

    file: int
    row_group: int
    start: int
    stop: int

    @property
    def num_rows(self) -> int:
        """The unit's row count, `stop - start`."""
        return self.stop - self.start


def resolve_worker(input_context=None, num_shards: int | None = None, index: int | None = None) -> tuple[int, int]:
    """Returns `(num_shards, index)` from a `tf.distribute.InputContext` or explicit values.

    Raises:
      ValueError: both an input context and `num_shards`/`index` given, only
        one of `num_shards`/`index`, or an index outside `[0, num_shards)`.

    Example:
      >>> resolve_worker(num_shards=3, index=2)
      (3, 2)
      >>> resolve_worker()
      (1, 0)
    """
    if input_context is not None:
        if num_shards is not None or index is not None:
            raise ValueError("give either input_context or num_shards/index, not both")
        num_shards = int(input_context.num_input_pipelines)
        index = int(input_context.input_pipeline_id)
    elif num_shards is None and index is None:
        return 1, 0
    elif num_shards is None or index is None:
        raise ValueError(f"num_shards and index go together; got num_shards={num_shards}, index={index}")
    if not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"num_shards must be a positive integer, got {num_shards!r}")
    if not isinstance(index, int) or not 0 <= index < num_shards:
        raise ValueError(f"index must be in [0, {num_shards}), got {index!r}")
    return num_shards, index


def split_files(nonempty: Sequence[bool], num_shards: int, index: int) -> list[int] | None:
    """File numbers for worker `index` when whole files can be split, else None.

    `nonempty[f]` says whether file f holds any data. Whole files are split
    only when every worker gets at least one non-empty file; empty files are
    left out (they hold nothing to read).

    Example:
      >>> split_files([True, True, True], 2, 1)
      [1]
      >>> split_files([True, False], 2, 0) is None
      True
    """
    files = [f for f, has_rows in enumerate(nonempty) if has_rows]
    if len(files) < num_shards:
        return None
    return files[index::num_shards]


BALANCES = ("files", "rows")


def check_balance(balance: str) -> str:
    """`balance` if it is one of `BALANCES`, else ValueError naming them."""
    if balance not in BALANCES:
        raise ValueError(f"balance must be one of {', '.join(map(repr, BALANCES))}, got {balance!r}")
    return balance


def plan_units(
    row_groups: Sequence[Sequence[int]], num_shards: int, index: int, balance: str = "files"
) -> tuple[list[Unit], str]:
    """This worker's units (row-group slices) and the mode used, "files" or "rows".

    Args:
      row_groups: `row_groups[f][g]` is the number of rows of row group g of
        file f, files in their sorted order.
      num_shards: the number of workers, as from `resolve_worker`.
      index: this worker, in `[0, num_shards)`.
      balance: "files" (whole files where every worker gets one, else row
        ranges) or "rows" (always row ranges: every worker gets the same
        number of rows, +-1, so the same number of batches per epoch, +-1,
        however uneven the files are; synchronous training then waits for
        no worker).

    Returns:
      `(units, mode)`; units are in file and row-group order.

    No rows at all (an empty output) gives every worker no units: all read
    nothing, so none waits on another.

    Raises:
      ValueError: fewer rows in all than workers, but some (a worker would
        read nothing while others read).

    Example:
      >>> plan_units([[4, 2]], 2, 1)
      ([Unit(file=0, row_group=0, start=3, stop=4), Unit(file=0, row_group=1, start=0, stop=2)], 'rows')
      >>> [sum(u.num_rows for u in plan_units([[9], [1], [2]], 2, i, balance="rows")[0]) for i in range(2)]
      [6, 6]
    """
    total = sum(sum(groups) for groups in row_groups)
    if total == 0:
        return [], "files"
    check_balance(balance)
    files = None if balance == "rows" else split_files([sum(groups) > 0 for groups in row_groups], num_shards, index)
    if files is not None:
        units = [Unit(f, g, 0, rows) for f in files for g, rows in enumerate(row_groups[f]) if rows > 0]
        return units, "files"
    if total < num_shards:
        raise ValueError(
            f"the input holds {total} rows for {num_shards} workers: some worker would read nothing; "
            "use fewer workers or more data"
        )
    begin = index * total // num_shards
    end = (index + 1) * total // num_shards
    units = []
    offset = 0  # global row number of the current row group's first row
    for f, groups in enumerate(row_groups):
        for g, rows in enumerate(groups):
            lo, hi = max(begin, offset), min(end, offset + rows)
            if lo < hi:
                units.append(Unit(f, g, lo - offset, hi - offset))
            offset += rows
    return units, "rows"
