"""Histories of one key partition in bounded memory: a spill-backed sort, then a streaming window per key.

A partition's events arrive as RecordBatches. While they fit in the memory
budget they are kept and grouped at once (`build_histories`). Past the budget,
each budget's worth is sorted into a run written to an Arrow IPC file in the
worker's temporary directory; the runs are then merged batch by batch in
(key, time, tie-break columns) order, and histories are built from the merged
stream chunk by chunk, each chunk preceded by the few events of its first key
that the chunk's histories reach back to (at most `2 * max_length + 1`). No
key's events are ever held whole, however many of the partition's events one
key holds (unless `max_length` is None, where a history is a key's every event).

The output is the same, row for row and batch for batch, as grouping the
partition in memory: the same `build_histories` builds every row.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import typing

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.beam.histories_build import build_histories, equal_to_previous, is_list

__all__ = ["partition_histories", "sort_keys", "DEFAULT_MEMORY_BUDGET"]

DEFAULT_MEMORY_BUDGET = 256 << 20  # bytes of a partition's events held before sorted runs spill to disk
MERGE_BATCH_BYTES = 64 << 10  # about this much of each run is read back at a time while merging
_CARRY = "\x00carried"  # marks the events a chunk carries over from the one before; never output


def sort_keys(schema: pa.Schema, options: dict) -> list[tuple[str, str]]:
    """The (column, "ascending") order `build_histories` sorts a partition's events in."""
    weight = options.get("weight")
    names = [options["key"], options["time"], options["item"]] + ([weight] if weight is not None else [])
    names += [n for n in list(options.get("item_columns", ())) + list(options.get("event_columns", ()))
              if not is_list(schema.field(n).type)]
    return [(n, "ascending") for n in names]


def partition_histories(batches: typing.Iterable[pa.RecordBatch], options: dict, *, batch_size: int,
                        memory_budget: int = DEFAULT_MEMORY_BUDGET,
                        temp_dir: str | None = None) -> typing.Iterator[pa.RecordBatch]:
    """The histories of one partition's events (`build_histories(**options)`), in batches of `batch_size` rows.

    Args:
      batches: the partition's events, one schema, any order.
      options: `build_histories`' keyword arguments (key, item, time, ...).
      batch_size: rows per output batch (the last one may hold fewer).
      memory_budget: bytes of events held before a sorted run is spilled; the
        merge then holds about one MERGE_BATCH_BYTES batch (16 to 8192 rows) per run.
      temp_dir: where runs are written (default: the process's temporary directory).

    Raises:
      ValueError: as `build_histories` (a null key, item, time, weight or item-column value).

    Example:
      >>> t = pa.table({"u": [1, 1, 2], "i": ["b", "a", "c"], "t": [5, 3, 1]})
      >>> out = partition_histories(t.to_batches(max_chunksize=1), dict(key="u", item="i", time="t"),
      ...                           batch_size=10, memory_budget=1)
      >>> pa.Table.from_batches(list(out)).to_pydict()
      {'u': [1, 2], 'i': [['a', 'b'], ['c']], 't': [[3, 5], [1]]}
    """
    held: list[pa.RecordBatch] = []
    held_bytes = 0
    spill: _Spill | None = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            held.append(batch)
            held_bytes += batch.nbytes
            if held_bytes > memory_budget:
                if spill is None:
                    spill = _Spill(held[0].schema, options, temp_dir, memory_budget)
                spill.write_run(held)
                held, held_bytes = [], 0
        if spill is None:
            if held:
                yield from map(_compact, _rebatch([build_histories(pa.Table.from_batches(held), **options)],
                                                  batch_size))
            return
        if held:
            spill.write_run(held)
            held = []
        yield from map(_compact, _rebatch(_StreamingWindow(options).histories(spill.merged()), batch_size))
    finally:
        if spill is not None:
            spill.close()


class _Spill:
    """Sorted runs of events in Arrow IPC files, and their k-way merge."""

    def __init__(self, schema: pa.Schema, options: dict, temp_dir: str | None, memory_budget: int):
        self._schema = schema
        self._order = sort_keys(schema, options)
        self._dir = tempfile.mkdtemp(prefix="sparseflow-histories-", dir=temp_dir)
        self._runs: list[str] = []

    def write_run(self, held: list[pa.RecordBatch]) -> None:
        table = pa.Table.from_batches(held, schema=self._schema)
        table = table.take(pc.sort_indices(table, self._order))
        # Batches of about MERGE_BATCH_BYTES, so k runs merge holding about k of them.
        read_rows = int(min(8192, max(16, MERGE_BATCH_BYTES * table.num_rows // max(1, table.nbytes))))
        path = os.path.join(self._dir, f"run-{len(self._runs):05d}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, self._schema) as writer:
            for batch in table.to_batches(max_chunksize=read_rows):
                writer.write_batch(batch)
        self._runs.append(path)

    def merged(self) -> typing.Iterator[pa.Table]:
        """The runs' events in sort order, as consecutive tables (ties across runs in run order)."""
        readers = [_run_batches(path) for path in self._runs]
        current: list[pa.Table | None] = [None] * len(readers)
        while True:
            for r, reader in enumerate(readers):
                if current[r] is not None and current[r].num_rows == 0:  # type: ignore[union-attr]
                    current[r] = None
                if current[r] is None and reader is not None:
                    batch = next(reader, None)
                    if batch is None:
                        readers[r] = None
                    else:
                        current[r] = pa.Table.from_batches([batch], schema=self._schema)
            live = [r for r in range(len(readers)) if current[r] is not None]
            if not live:
                return
            tables = [typing.cast(pa.Table, current[r]) for r in live]
            pool = pa.concat_tables(tables)
            order = pc.sort_indices(pool, self._order).to_numpy()
            # Every row up to the smallest of the runs' last rows can go: no run holds one that sorts before it.
            ends = np.cumsum([t.num_rows for t in tables]) - 1
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            cut = int(rank[ends].min())
            yield pool.take(pa.array(order[: cut + 1]))
            starts = np.concatenate([[0], ends[:-1] + 1])
            for r, table, start, end in zip(live, tables, starts, ends):
                gone = int(np.count_nonzero(rank[start:end + 1] <= cut))  # a prefix of the run, being sorted
                current[r] = table.slice(gone)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def _run_batches(path: str) -> typing.Iterator[pa.RecordBatch]:
    # Read, not memory-mapped: mapped pages once touched stay in the process's resident memory.
    with pa.OSFile(path, "rb") as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


class _StreamingWindow:
    """Histories from events arriving sorted, in chunks, holding at most a window of one key's events."""

    def __init__(self, options: dict):
        self._options = dict(options, dedupe_consecutive=False)
        self._dedupe = bool(options.get("dedupe_consecutive"))
        self._key, self._item, self._time = options["key"], options["item"], options["time"]
        self._examples = bool(options.get("examples_per_event"))
        self._max_length = options.get("max_length", 50)
        self._min_length = options.get("min_length", 1)
        self._context = options.get("context_column")
        if self._examples and self._context is None:
            self._options["context_column"] = _CARRY

    def histories(self, chunks: typing.Iterable[pa.Table]) -> typing.Iterator[pa.Table]:
        carry: pa.Table | None = None
        last_raw: pa.Table | None = None  # the previous event before deduplication: (key, item)
        for chunk in chunks:
            if chunk.num_rows == 0:
                continue
            if self._examples and self._context is None:
                chunk = chunk.append_column(_CARRY, pa.array(np.zeros(chunk.num_rows, dtype=bool)))
            if self._dedupe:
                chunk, last_raw = self._deduplicated(chunk, last_raw)
            table = chunk if carry is None else pa.concat_tables([carry, chunk]).combine_chunks()
            out, carry = self._examples_step(table) if self._examples else self._keys_step(table)
            if out is not None and out.num_rows:
                yield out
        if carry is not None and not self._examples and carry.num_rows:
            yield build_histories(carry, **self._options)

    def _deduplicated(self, chunk: pa.Table, last_raw: pa.Table | None) -> tuple[pa.Table, pa.Table]:
        pair = chunk.select([self._key, self._item])
        both = pair if last_raw is None else pa.concat_tables([last_raw, pair]).combine_chunks()
        drop = equal_to_previous(both.column(self._key).combine_chunks())
        drop &= equal_to_previous(both.column(self._item).combine_chunks())
        if last_raw is not None:
            drop = drop[1:]
        last = pair.slice(chunk.num_rows - 1)
        return (chunk.filter(pa.array(~drop)) if drop.any() else chunk), last

    def _last_key_start(self, table: pa.Table) -> int:
        same_key = equal_to_previous(table.column(self._key).combine_chunks())
        return int(np.flatnonzero(~same_key)[-1])

    def _keys_step(self, table: pa.Table) -> tuple[pa.Table | None, pa.Table]:
        # One row per key: a key is done once a later key shows up; its last events wait until then.
        start = self._last_key_start(table)
        done = build_histories(table.slice(0, start), **self._options) if start else None
        pending = table.slice(start)
        if self._max_length is not None:
            # Enough events to tell min_length and to fill the window.
            keep = max(self._max_length, self._min_length)
            pending = pending.slice(max(0, pending.num_rows - keep))
        return done, pending

    def _examples_step(self, table: pa.Table) -> tuple[pa.Table, pa.Table]:
        out = build_histories(table, **self._options)
        start = self._last_key_start(table)
        pending = table.slice(start)
        if self._max_length is not None:
            # A later event of the last key sees at most max_length events before its time's first
            # event (if it shares the last time) or before itself: keep those and that first event.
            same_time = equal_to_previous(pending.column(self._time).combine_chunks())
            run = int(np.flatnonzero(~same_time)[-1])
            n, m = pending.num_rows, self._max_length
            rows = np.concatenate([np.arange(max(0, run - m), run + 1), np.arange(max(run + 1, n - m), n)])
            pending = pending.take(pa.array(rows))
        context = self._options["context_column"]
        flags = pa.array(np.ones(pending.num_rows, dtype=bool))
        # Carried events were examples (or not) in their own chunk: here they are history only.
        pending = pending.set_column(pending.schema.get_field_index(context), context,
                                     flags.cast(pending.schema.field(context).type))
        return out, pending


def _compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` in buffers of its own, as Beam's coder would pass it between stages (an Arrow IPC round trip).

    A slice's buffers reach beyond its rows into the table it was cut from,
    which differs between the in-memory and the spilled path; the shard
    writer seeds its shuffle from the buffers' bytes, so only the rows' own
    bytes (zero-based offsets, no all-valid bitmaps) may reach it.
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return pa.ipc.read_record_batch(_only_message(sink.getvalue()), batch.schema)


def _only_message(stream: pa.Buffer) -> pa.ipc.Message:
    reader = pa.ipc.MessageReader.open_stream(stream)
    reader.read_next_message()  # the schema
    return reader.read_next_message()


def _rebatch(tables: typing.Iterable[pa.Table], batch_size: int) -> typing.Iterator[pa.RecordBatch]:
    """The tables' rows as consecutive batches of exactly `batch_size` rows (the last one may hold fewer)."""
    held: list[pa.Table] = []
    rows = 0
    for table in tables:
        held.append(table)
        rows += table.num_rows
        if rows >= batch_size:
            whole = pa.concat_tables(held).combine_chunks()
            full = rows - rows % batch_size
            yield from whole.slice(0, full).to_batches(max_chunksize=batch_size)
            rest = whole.slice(full)
            held, rows = ([rest] if rest.num_rows else []), rest.num_rows
    if rows:
        yield from pa.concat_tables(held).combine_chunks().to_batches(max_chunksize=batch_size)
