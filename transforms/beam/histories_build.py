"""build_histories: the histories of a table holding every event of its keys, by sorting and slicing arrays.

The one builder of history rows: `GroupHistories` runs it on each key
partition, in memory or, past a memory budget, chunk by chunk over a merged
sorted stream (transforms.beam.history_stream).
"""

from __future__ import annotations

import typing

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.schema import weights_column

__all__ = ["build_histories", "equal_to_previous", "is_list", "TARGET_PREFIX"]

TARGET_PREFIX = "target_"  # names the event an example predicts: target_<item>, target_<weight>


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flat indices of the ranges [start, start + length), list offsets)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, lengths)
    return flat, offsets


def equal_to_previous(array: pa.Array) -> np.ndarray:
    """Bool per element: equal to the element before it (the first: False)."""
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


def is_list(t: pa.DataType) -> bool:
    """Whether `t` is a list or large_list type."""
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
             if not is_list(events.schema.field(name).type)]
    events = events.take(pc.sort_indices(events, sort)).combine_chunks()
    if weight is not None:
        events = events.set_column(events.schema.get_field_index(weight), weight,
                                   events.column(weight).cast(pa.float32()))
    same_key = equal_to_previous(events.column(key).combine_chunks())
    if dedupe_consecutive and len(events):
        drop = same_key & equal_to_previous(events.column(item).combine_chunks())
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

    same_time = same_key & equal_to_previous(column[time])
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
