"""Spilling a shuffle to disk, so writing shards needs memory for a slice of a shard, not all of it.

`WriteShards` gives every row a shard and a 63-bit sort key, as two
columns of its batch. Grouping the rows themselves by shard would make a
runner hold a whole shard (Beam's in-process runner holds every shard: the
whole input) in memory. Instead, `SpillByKeyRange` buffers batches up to
`spill_rows` rows and writes them out, one Arrow IPC file per shard per
spill, named `.tmp-spill-<shard>-<id>.arrow` in the output directory, its
rows ordered by key range (the record batches of each range listed in the
file's schema metadata); only the file names go through the GroupByKey.
One stable sort by (shard, key range) per spill puts every row in place, so
a row is copied once on its way into the spill. `sorted_shard_batches` then reads a shard's files
one key range at a time, in key order, reading just that range's batches
from each file, and sorts each range: the same rows in the same order as
sorting the whole shard by key, with at most one key range of one shard in
memory.

The key ranges are the top `RANGE_BITS` bits of the key. A spill cuts its
rows into shards x ranges pieces, so when the shard count grows with the
input the pieces per row grow with it: with a file per piece, or a buffered
slice per piece of every input batch, their fixed costs dominated the
ingest at a few million rows. So whole batches are buffered, cut only when
spilled, and a shard's pieces of one spill share one file. Batches arrive
whole, with their shard column, rather than cut into one piece per shard
first: that cut was a second copy of every row.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from sparse_io.atomic import TMP_PREFIX
from transforms.beam._spill_buffer import SpillBuffer

__all__ = [
    "SpillByKeyRange",
    "sorted_shard_batches",
    "key_range_of",
    "RANGE_BITS",
    "DEFAULT_SPILL_ROWS",
    "MAX_OPEN_FRAGMENTS",
    "gather_rows",
]

RANGE_BITS = 6
DEFAULT_SPILL_ROWS = 100_000
_KEY_BITS = 63  # keys are non-negative int64
_PREFIX = TMP_PREFIX + "spill-"  # a temporary: a crashed run's leftovers are removed with the others
_RANGES_KEY = b"sparseflow.spill_ranges"  # schema metadata: [[key range, batches], ...] in file order
# A shard with more spill files than this is read by reopening each file per key range instead of
# holding them all open, so a very long input cannot run a worker out of file handles.
MAX_OPEN_FRAGMENTS = 256
_WRITE_BUFFER = 1 << 20
_ROWS_PER_RUN = 256  # `gather_rows` slices while runs average at least this many rows, else takes


try:
    _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _MALLOC_TRIM = None


def return_freed_memory() -> None:
    """Asks glibc's malloc to give freed heap memory back to the system; a no-op elsewhere.

    The buffered batches are mostly numpy-allocated (glibc heap) and freed
    together at each spill; glibc keeps such freed memory mapped. Called once
    per spill, it brought a 2M-row ingest's peak from 437-466 MiB to 417-428.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def key_range_of(keys: np.ndarray) -> np.ndarray:
    """The key range (top `RANGE_BITS` bits of the 63-bit key) of each int64 key."""
    return (keys >> (_KEY_BITS - RANGE_BITS)).astype(np.int64)


def gather_rows(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """`table.take(rows)`, made of zero-copy slices where `rows` runs through consecutive rows.

    Unshuffled output sends whole batches to a shard with one key each, so its rows move in a few long
    runs: slicing them skips a copy of every byte (taking list columns cost the most). Rows in many short
    runs (a shuffle) are taken.

    Example:
      >>> gather_rows(pa.table({"x": [10, 11, 12, 13]}), np.array([2, 3, 0, 1]))["x"].to_pylist()
      [12, 13, 10, 11]
    """
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return table.slice(0, 0)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if len(breaks) + 1 > max(1, len(rows) // _ROWS_PER_RUN):
        return table.take(pa.array(rows))
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(rows)]])
    return pa.concat_tables([table.slice(int(rows[lo]), int(hi - lo)) for lo, hi in zip(starts, ends)])


def _fragment_name(shard: int) -> str:
    return f"{_PREFIX}{shard:05d}-{uuid.uuid4().hex}.arrow"


class SpillByKeyRange(beam.DoFn):
    """RecordBatch with int64 key and integer shard columns -> `(shard, spill file path)`, rows on disk.

    The spill files hold the rows without the shard column; the key column
    stays for `sorted_shard_batches`.

    Args:
      output_dir: where the spill files go (any Beam filesystem).
      key_column: the int64 column holding each row's non-negative sort key.
      shard_column: the integer column holding each row's shard index.
      spill_rows: rows buffered before they are written out.
    """

    def __init__(self, output_dir: str, key_column: str, shard_column: str, spill_rows: int = DEFAULT_SPILL_ROWS):
        self._output_dir = output_dir
        self._key_column = key_column
        self._shard_column = shard_column
        self._spill_rows = spill_rows

    def start_bundle(self):
        # Whole batches until a spill: slicing each one by shard and key range as it arrives would
        # keep shards x ranges slices per batch alive, a per-slice cost that grows with the shards.
        self._buffer = SpillBuffer(self._spill_rows, lambda b: b.num_rows)

    def process(self, batch: pa.RecordBatch):
        if batch.num_rows == 0:
            return
        # Spill before the buffer would pass spill_rows, so it never holds more (a batch larger
        # than spill_rows alone excepted): with 32k-row input batches, waiting for the threshold
        # to be crossed held up to a third more.
        if self._buffer.spills_before(batch):
            yield from self._flush()
        if self._buffer.add(batch):
            yield from self._flush()

    def finish_bundle(self):
        for element in self._flush():
            yield GlobalWindows.windowed_value(element)

    def _flush(self) -> Iterator[tuple[int, str]]:
        if not self._buffer.batches:
            return
        table = pa.Table.from_batches(self._buffer.take())
        shards = table.column(self._shard_column).to_numpy().astype(np.int64)
        ranges = key_range_of(table.column(self._key_column).to_numpy())
        table = table.drop_columns([self._shard_column])
        slot = (shards << RANGE_BITS) | ranges
        order = np.argsort(slot, kind="stable")
        slot = slot[order]
        cuts = np.flatnonzero(np.diff(slot >> RANGE_BITS)) + 1
        # One shard's rows are copied at a time, so a spill holds at most one shard's copy at once.
        for rows, slots in zip(np.split(order, cuts), np.split(slot, cuts)) if len(order) else ():
            shard = int(slots[0] >> RANGE_BITS)
            ordered = gather_rows(table, rows)
            path = self._write(shard, ordered, slots & ((1 << RANGE_BITS) - 1))
            del ordered
            yield shard, path
        del table
        return_freed_memory()

    def _write(self, shard: int, table: pa.Table, ranges: np.ndarray) -> str:
        starts = np.concatenate([[0], np.flatnonzero(np.diff(ranges)) + 1])
        ends = np.concatenate([starts[1:], [len(ranges)]])
        pieces = [(int(ranges[lo]), table.slice(int(lo), int(hi - lo)).to_batches()) for lo, hi in zip(starts, ends)]
        index = json.dumps([[key_range, len(parts)] for key_range, parts in pieces]).encode()
        schema = table.schema.with_metadata({**(table.schema.metadata or {}), _RANGES_KEY: index})
        path = FileSystems.join(self._output_dir, _fragment_name(shard))
        with FileSystems.create(path) as f:
            # The IPC writer makes a few writes per column per record batch; buffered natively, they
            # reach the Python file object in 1 MiB pieces (measured 3x faster than writing directly).
            sink = pa.BufferedOutputStream(pa.PythonFile(f, mode="w"), buffer_size=_WRITE_BUFFER)
            with pa.ipc.new_file(sink, schema) as writer:
                for _, parts in pieces:
                    for part in parts:
                        writer.write_batch(part)
            sink.flush()
        return path


class _Fragment:
    """One spill file: which record batches hold which key range, and its reader when held open."""

    def __init__(self, path: str, reader: pa.ipc.RecordBatchFileReader | None = None):
        self.path = path
        self.reader = reader
        if reader is None:
            with FileSystems.open(path) as f:
                self.batches = _batches_by_range(pa.ipc.open_file(f))
        else:
            self.batches = _batches_by_range(reader)

    def read(self, key_range: int) -> list[pa.RecordBatch]:
        """The batches of `key_range` (none when this file holds no row of it)."""
        if key_range not in self.batches:
            return []
        if self.reader is not None:
            return [self.reader.get_batch(i) for i in self.batches[key_range]]
        with FileSystems.open(self.path) as f:
            reader = pa.ipc.open_file(f)
            return [reader.get_batch(i) for i in self.batches[key_range]]


def _batches_by_range(reader: pa.ipc.RecordBatchFileReader) -> dict[int, range]:
    metadata = reader.schema.metadata or {}
    if _RANGES_KEY not in metadata:
        raise ValueError("not a spill file of SpillByKeyRange: its schema has no key-range index")
    out, first = {}, 0
    for key_range, count in json.loads(metadata[_RANGES_KEY]):
        out[key_range] = range(first, first + count)
        first += count
    if first != reader.num_record_batches:
        raise ValueError(f"spill file holds {reader.num_record_batches} record batches, its index lists {first}")
    return out


def _without_index(metadata: dict | None) -> dict | None:
    kept = {k: v for k, v in (metadata or {}).items() if k != _RANGES_KEY}
    return kept or None


def sorted_shard_batches(
    paths: Iterable[str], key_column: str, chunk_rows: int, order_by: Sequence[str] = ()
) -> Iterator[pa.RecordBatch]:
    """A shard's rows from its spill files, sorted by key (stable), without the key column.

    `order_by`: columns that break ties of the key, ascending (the key must
    then be non-decreasing in them, so the order holds across key ranges).

    Reads one key range at a time, holding the files open (or, past
    `MAX_OPEN_FRAGMENTS` files, opening each per range); batches hold at
    most `chunk_rows` rows.

    Raises:
      ValueError: a path is not a spill file written by `SpillByKeyRange`.
    """
    paths = sorted(paths)
    with contextlib.ExitStack() as stack:
        if len(paths) <= MAX_OPEN_FRAGMENTS:
            fragments = [_Fragment(p, pa.ipc.open_file(stack.enter_context(FileSystems.open(p)))) for p in paths]
        else:
            fragments = [_Fragment(p) for p in paths]
        key_ranges = sorted({r for fragment in fragments for r in fragment.batches})
        for key_range in key_ranges:
            parts = [b for fragment in fragments for b in fragment.read(key_range)]
            table = pa.Table.from_batches(parts)
            table = table.replace_schema_metadata(_without_index(table.schema.metadata))
            if order_by:
                order = pc.sort_indices(table, [(key_column, "ascending")] + [(c, "ascending") for c in order_by])
            else:
                order = np.argsort(table.column(key_column).to_numpy(), kind="stable")
            table = table.drop_columns([key_column])
            table = table.take(order) if order_by else gather_rows(table, order)
            yield from table.to_batches(max_chunksize=chunk_rows)
