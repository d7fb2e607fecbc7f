"""Spilling GroupHistories' events to disk by key partition, so only file names go through the GroupByKey.

Grouping the events themselves by partition makes a runner hold them all
until the grouping is done: Beam's in-process runner keeps a GroupByKey's
whole input in memory (a 2M-event history ingest peaked 250 MiB above a
plain ingest of the same events). Instead, `SpillByPartition` buffers whole
batches up to `spill_bytes` per worker, and at each spill (and at the end of
a bundle) cuts them by key partition with one stable sort and writes each
partition's rows to an Arrow IPC file named
`.tmp-histories-<partition>-<id>.arrow` in the spill directory (any Beam
filesystem; `.tmp-*` files are the temporaries a failed ingest's roll-back
removes). It emits `(partition, path)`; after the GroupByKey,
`spilled_batches` reads a partition's files back one record batch at a time,
for `history_stream.partition_histories` to build the histories in bounded
memory, and `remove_spilled` deletes them once the partition is done.

The files are read in name order, but the output does not depend on it:
`partition_histories` sorts the events by key, time and every scalar
tie-break column, as it does the batches a GroupByKey delivers in any order.

Example:
  >>> import os, tempfile
  >>> d = tempfile.mkdtemp()
  >>> fn = SpillByPartition(d, ["u", "i"], "u", num_partitions=2)
  >>> fn.start_bundle()
  >>> list(fn.process(pa.record_batch({"u": [1, 2, 1], "i": [7, 8, 9]})))
  []
  >>> spilled = sorted(v.value for v in fn.finish_bundle())
  >>> [p for p, _ in spilled], all(os.path.basename(f).startswith(".tmp-histories-") for _, f in spilled)
  ([0, 1], True)
  >>> sum(b.num_rows for _, f in spilled for b in spilled_batches([f]))
  3
  >>> remove_spilled([f for _, f in spilled]); os.listdir(d)
  []
"""

from __future__ import annotations

import typing
import uuid
from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from sparse_io.atomic import TMP_PREFIX
from transforms.beam._columns import require_columns
from transforms.beam._spill_buffer import SpillBuffer
from transforms.beam.history_partitions import partition_of
from transforms.beam.shard_spill import return_freed_memory

__all__ = ["SpillByPartition", "spilled_batches", "remove_spilled", "DEFAULT_SPILL_BYTES", "SPILL_PREFIX"]

DEFAULT_SPILL_BYTES = 32 << 20  # of events a worker buffers before writing them out by partition
SPILL_PREFIX = TMP_PREFIX + "histories-"
# About this much per record batch of a spill file: what the build reads at a time, and so how far past its
# memory budget a partition's events go before a sorted run is written.
SPILL_BATCH_BYTES = 128 << 10
_WRITE_BUFFER = 1 << 20


def _spill_name(partition: int) -> str:
    return f"{SPILL_PREFIX}{partition:05d}-{uuid.uuid4().hex}.arrow"


class SpillByPartition(beam.DoFn):
    """RecordBatch of events -> `(partition, spill file path)`, the events on disk.

    Args:
      directory: where the spill files go (any Beam filesystem).
      columns: the event columns kept (the others are dropped before spilling).
      key: the column whose hash picks each event's partition.
      num_partitions: the partition count; None: the `counted_partitions`
        side input of `process`.
      spill_bytes: bytes of events buffered before they are written out (a
        batch larger than that alone excepted).

    Raises (in `process`):
      ValueError: a batch lacks one of `columns` (`require_columns`).
    """

    def __init__(self, directory: str, columns: list[str], key: str, num_partitions: int | None = None,
                 spill_bytes: int = DEFAULT_SPILL_BYTES):
        self._directory = directory
        self._columns = list(columns)
        self._key = key
        self._num_partitions = num_partitions
        self._spill_bytes = spill_bytes

    def start_bundle(self):
        # Whole batches until a spill: cutting each one by partition as it arrives would keep
        # partitions x batches slices alive, and write as many tiny files.
        self._buffer = SpillBuffer(self._spill_bytes, lambda b: b.nbytes)
        self._partitions = self._num_partitions

    def process(self, batch: pa.RecordBatch, counted_partitions: int | None = None):
        if batch.num_rows == 0:
            return
        require_columns(batch, self._columns, "GroupHistories")
        batch = batch.select(self._columns)
        if self._partitions is None:
            self._partitions = typing.cast(int, counted_partitions)
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
        partitions = typing.cast(int, self._partitions)
        batches = self._buffer.take()
        # Per batch: the batches' dictionaries (of a dictionary-encoded key) may differ.
        parts = np.concatenate([partition_of(b.column(self._key), partitions) for b in batches])
        table = pa.Table.from_batches(batches)
        order = np.argsort(parts, kind="stable")
        cuts = np.flatnonzero(np.diff(parts[order])) + 1
        # One partition's rows are copied at a time, so a spill holds at most one partition's copy at once.
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(order)]])):
            partition = int(parts[order[lo]])
            yield partition, self._write(partition, table.take(pa.array(order[lo:hi])))
        del table
        return_freed_memory()

    def _write(self, partition: int, table: pa.Table) -> str:
        path = FileSystems.join(self._directory, _spill_name(partition))
        with FileSystems.create(path) as f:
            # The IPC writer makes a few small writes per column per batch: buffered, they reach the file in 1 MiB.
            sink = pa.BufferedOutputStream(pa.PythonFile(f, mode="w"), buffer_size=_WRITE_BUFFER)
            with pa.ipc.new_file(sink, table.schema) as writer:
                rows = max(1, SPILL_BATCH_BYTES * table.num_rows // max(1, table.nbytes))
                for batch in table.to_batches(max_chunksize=rows):
                    writer.write_batch(batch)
            sink.flush()
        return path


def spilled_batches(paths: Iterable[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of the spill files `paths`, in name order, one file open and one batch read at a time.

    Raises:
      OSError (or the filesystem's error): a file is missing; pyarrow.ArrowInvalid: one is not Arrow IPC.
    """
    for path in sorted(paths):
        with FileSystems.open(path) as f:
            reader = pa.ipc.open_file(f)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


def remove_spilled(paths: Iterable[str]) -> None:
    """Deletes the spill files `paths` (a partition's, once its histories are built)."""
    paths = list(paths)
    if paths:
        FileSystems.delete(paths)
