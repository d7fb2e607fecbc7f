"""GroupHistories: per key (e.g. user), the time-ordered list of items as list columns.

Events are not grouped one element per key: each input batch is split by a
hash of the key into `num_partitions` sub-batches, a GroupByKey brings each
partition's sub-batches together, and all histories of a partition are then
built at once by sorting and slicing Arrow/numpy arrays. Elements stay
batch-sized whatever the number of keys.
"""

from __future__ import annotations

import typing

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.hashing import fingerprint64
from sparse_io.schema import weights_column
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._columns import require_columns

__all__ = ["GroupHistories", "build_histories", "partition_of", "TARGET_PREFIX"]

TARGET_PREFIX = "target_"  # names the event an example predicts: target_<item>, target_<weight>


def partition_of(keys: pa.Array, num_partitions: int) -> np.ndarray:
    """int64 partition of each key in `[0, num_partitions)`, stable across workers and runs."""
    if pa.types.is_integer(keys.type):
        x = keys.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
        # splitmix64's finaliser: consecutive ids spread over all partitions.
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    else:
        x = fingerprint64(keys if not pa.types.is_dictionary(keys.type) else keys.dictionary_decode())
    return (x % np.uint64(num_partitions)).astype(np.int64)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flat indices of the ranges [start, start + length), list offsets)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, lengths)
    return flat, offsets


def _equal_to_previous(array: pa.Array) -> np.ndarray:
    n = len(array)
    same = np.zeros(n, dtype=bool)
    if n > 1:
        same[1:] = pc.equal(array.slice(1), array.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    return same


def _list(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(
            "GroupHistories: one partition's output holds more than 2**31 ids; raise num_partitions"
        )
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def build_histories(
    events: pa.Table,
    key: str,
    item: str,
    time: str,
    weight: str | None = None,
    *,
    item_columns: typing.Sequence[str] = (),
    event_columns: typing.Sequence[str] = (),
    context_column: str | None = None,
    max_length: int | None = 50,
    min_length: int = 1,
    dedupe_consecutive: bool = False,
    examples_per_event: bool = False,
    target_prefix: str = TARGET_PREFIX,
) -> pa.Table:
    """Builds histories from a table holding every event of its keys (the per-partition step).

    Events are ordered by (time, item, weight, item columns, scalar event
    columns) within a key, so equal times are broken the same way whatever
    order the events arrived in.

    Returns, without `examples_per_event`: one row per key with at least
    `min_length` events (after deduplication): `key`; `item` list of its last
    `max_length` items, oldest first; `item__weights` list<float32> when
    `weight` is given; one list per item column, parallel to `item`; `time`
    list; each event column's value at the key's latest event. With
    `examples_per_event`: one row per event whose history (the key's events
    with a strictly smaller time, the last `max_length` of them) holds at least
    `min_length` items: `key`, `item` list, `item__weights` list, item-column
    lists, `time` (the event's time, scalar), `target_<item>`,
    `target_<weight>` and `target_<item column>` (the event itself), and each
    event column's value at the event. With `context_column` (a boolean column,
    per event), events marked true take part in histories but are never
    examples themselves. Rows are sorted by key, then time.

    Raises:
      ValueError: a null key, item, time, weight or item-column value, naming the column.

    Example:
      >>> t = pa.table({"u": [1, 1, 2], "i": ["b", "a", "c"], "t": [5, 3, 1]})
      >>> build_histories(t, "u", "i", "t").to_pydict()
      {'u': [1, 2], 'i': [['a', 'b'], ['c']], 't': [[3, 5], [1]]}
    """
    listed = [item] + list(item_columns)  # one value per history entry
    for name in [key, item, time] + ([weight] if weight is not None else []) + list(item_columns):
        column = events.column(name)
        if column.null_count:
            raise ValueError(f"GroupHistories: column {name!r} has a null (every event needs one)")
    sort = [(name, "ascending") for name in [key, time, item] + ([weight] if weight is not None else [])]
    # Scalar columns after them: events equal in all of those still come out in one order.
    sort += [(name, "ascending") for name in list(item_columns) + list(event_columns)
             if not _is_list(events.schema.field(name).type)]
    events = events.take(pc.sort_indices(events, sort)).combine_chunks()
    if weight is not None:
        events = events.set_column(events.schema.get_field_index(weight), weight,
                                   events.column(weight).cast(pa.float32()))
    same_key = _equal_to_previous(events.column(key).combine_chunks())
    if dedupe_consecutive and len(events):
        drop = same_key & _equal_to_previous(events.column(item).combine_chunks())
        if drop.any():
            events = events.filter(pa.array(~drop))
            same_key = same_key[~drop]
    column = {name: events.column(name).combine_chunks() for name in events.column_names}
    n = events.num_rows
    starts = np.flatnonzero(~same_key)
    sizes = np.diff(np.append(starts, n))
    limit = n if max_length is None else max_length

    def lists(columns: dict, flat: np.ndarray, offsets: np.ndarray) -> None:
        index = pa.array(flat)
        columns[item] = _list(offsets, column[item].take(index))
        if weight is not None:
            columns[weights_column(item)] = _list(offsets, column[weight].take(index))
        for name in listed[1:]:
            columns[name] = _list(offsets, column[name].take(index))

    if not examples_per_event:
        kept = sizes >= min_length
        starts, sizes = starts[kept], sizes[kept]
        take = np.minimum(sizes, limit)
        flat, offsets = _ranges(starts + sizes - take, take)
        columns = {key: column[key].take(pa.array(starts))}
        lists(columns, flat, offsets)
        columns[time] = _list(offsets, column[time].take(pa.array(flat)))
        latest = pa.array(starts + sizes - 1)
        columns.update({name: column[name].take(latest) for name in event_columns})
        return pa.table(columns)

    same_time = same_key & _equal_to_previous(column[time])
    positions = np.arange(n, dtype=np.int64)
    # First event of each run of equal (key, time): its history ends there.
    run_start = np.maximum.accumulate(np.where(same_time, 0, positions)) if n else positions
    group_start = np.repeat(starts, sizes)
    end = run_start
    start = np.maximum(group_start, end - limit)
    lengths = end - start
    example = lengths >= min_length
    if context_column is not None:
        example &= ~column[context_column].to_numpy(zero_copy_only=False).astype(bool)
    kept = np.flatnonzero(example)
    flat, offsets = _ranges(start[kept], lengths[kept])
    events_kept = pa.array(kept)
    columns = {key: column[key].take(events_kept)}
    lists(columns, flat, offsets)
    columns[time] = column[time].take(events_kept)
    columns[target_prefix + item] = column[item].take(events_kept)
    if weight is not None:
        columns[target_prefix + weight] = column[weight].take(events_kept)
    for name in listed[1:]:
        columns[target_prefix + name] = column[name].take(events_kept)
    columns.update({name: column[name].take(events_kept) for name in event_columns})
    return pa.table(columns)


class _SplitByPartitionFn(beam.DoFn):
    def __init__(self, columns: list[str], key: str, num_partitions: int):
        self._columns = columns
        self._key = key
        self._num_partitions = num_partitions

    def process(self, batch: pa.RecordBatch):
        if batch.num_rows == 0:
            return
        require_columns(batch, self._columns, "GroupHistories")
        batch = batch.select(self._columns)
        parts = partition_of(batch.column(self._key), self._num_partitions)
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
        shuffled = batch.take(pa.array(order))
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(order)]])):
            yield int(sorted_parts[lo]), shuffled.slice(int(lo), int(hi - lo))


class _BuildHistoriesFn(beam.DoFn):
    def __init__(self, options: dict, batch_size: int):
        self._options = options
        self._batch_size = batch_size
        self._rows = beam.metrics.Metrics.counter("sparseflow.GroupHistories", "rows_out")

    def process(self, element: tuple[int, typing.Iterable[pa.RecordBatch]]):
        _, batches = element
        events = pa.Table.from_batches(list(batches))
        out = build_histories(events, **self._options)
        self._rows.inc(out.num_rows)
        yield from out.to_batches(max_chunksize=self._batch_size)


class GroupHistories(beam.PTransform):
    """Per key, the time-ordered items (and weights) of its events as list columns.

    Args:
      key: the grouping column (e.g. user id), any sortable scalar type.
      item: the item column (ids or strings).
      time: the event time column (integer, float or timestamp).
      weight: optional per-event weight column (e.g. rating) -> `item__weights`.
      item_columns: columns that describe each event's item (e.g. its
        category), one non-null scalar per event: listed parallel to `item`
        under their own names, and per example as `target_<column>`.
      event_columns: other columns carried from one event to the output row
        (user or context attributes): the example's own event's value, or
        without `examples_per_event` the key's latest event's value.
      context_column: a boolean column; events marked true (earlier logs read
        for context) enter histories but are never examples themselves. Only
        with `examples_per_event`; the column itself is not output.
      max_length: keep the most recent `max_length` events per history (None: all).
      min_length: drop keys (or, per event, examples) whose history is shorter.
      dedupe_consecutive: drop an event whose item equals the previous event's
        (after ordering), keeping the first.
      examples_per_event: one row per event, whose history holds only the
        key's strictly earlier events (never the event itself, nor another at
        the same time), with the event as `target_<item>` / `target_<weight>`.
      num_partitions: key-hash partitions; each partition's events are grouped
        in memory on one worker.
      batch_size: rows per output RecordBatch at most.

    Ties in time are broken by item, then weight, then the scalar item and
    event columns, so the output does not depend on input order. See
    `build_histories` for the output columns.

    Input/output: PCollection[pa.RecordBatch].

    Raises:
      ValueError: at construction, for column names that are not distinct or
        whose output names would collide, or bad counts.

    Example:
      >>> histories = events | GroupHistories("user", "movie", "ts", weight="rating",
      ...                                     max_length=20)  # doctest: +SKIP
    """

    def __init__(
        self,
        key: str,
        item: str,
        time: str,
        weight: str | None = None,
        max_length: int | None = 50,
        min_length: int = 1,
        dedupe_consecutive: bool = False,
        examples_per_event: bool = False,
        *,
        item_columns: typing.Sequence[str] = (),
        event_columns: typing.Sequence[str] = (),
        context_column: str | None = None,
        num_partitions: int = 32,
        batch_size: int = 8192,
        target_prefix: str = TARGET_PREFIX,
    ):
        super().__init__()
        item_columns, event_columns = list(item_columns), list(event_columns)
        names = [key, item, time] + ([weight] if weight is not None else []) + item_columns + event_columns
        names += [context_column] if context_column is not None else []
        if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
            raise ValueError(
                "GroupHistories: key, item, time, weight, item, event and context columns must be distinct "
                f"column names, got {names}"
            )
        if context_column is not None and not examples_per_event:
            raise ValueError("GroupHistories: context_column needs examples_per_event (context events are "
                             "history only; without examples there is nothing to keep them out of)")
        made = [weights_column(item)] + [target_prefix + n for n in [item, weight, *item_columns] if n]
        clash = sorted(set(made) & set(names))
        if clash:
            raise ValueError(f"GroupHistories: column {clash[0]!r} would be overwritten by an output column "
                             "of the same name; rename it")
        for name, value, low in (
            ("max_length", max_length, 1),
            ("min_length", min_length, 0),
            ("num_partitions", num_partitions, 1),
            ("batch_size", batch_size, 1),
        ):
            if value is None and name == "max_length":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"GroupHistories: {name} must be an integer >= {low}, got {value!r}")
        self._columns = names
        self._key = key
        self._num_partitions = num_partitions
        self._batch_size = batch_size
        self._options = dict(
            key=key,
            item=item,
            time=time,
            weight=weight,
            item_columns=item_columns,
            event_columns=event_columns,
            context_column=context_column,
            max_length=max_length,
            min_length=min_length,
            dedupe_consecutive=dedupe_consecutive,
            examples_per_event=examples_per_event,
            target_prefix=target_prefix,
        )

    def expand(self, batches):
        return (
            batches
            | "SplitByKeyHash"
            >> beam.ParDo(
                _SplitByPartitionFn(self._columns, self._key, self._num_partitions)
            ).with_output_types(tuple[int, pa.RecordBatch])
            | "GroupPartitions" >> beam.GroupByKey()
            | "Build"
            >> beam.ParDo(_BuildHistoriesFn(self._options, self._batch_size)).with_output_types(
                pa.RecordBatch
            )
        )
