"""Writing one shard: its spilled rows, sorted, encoded into `part-i-of-N`, several shards at once per worker.

`WriteShardFn` takes `(shard index, spill files)` after the GroupByKey of
`WriteShards`, reads the files back in key order one row group at a time
(`transforms.beam.shard_spill`), writes the shard atomically through the
sparse_io writers (`write_shard_file`) and hands on a `Written` tuple:
`(index, path, rows, crc32c hex, bytes)`, the last two as computed while
writing (`written_record`), so the commit need not read the shard back.

Example:
  >>> default_write_threads() == min(MAX_DEFAULT_WRITE_THREADS, os.cpu_count() or 1)
  True
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import os

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from sparse_io.formats import DEFAULT_SHARD_CODEC, SHARD_SUFFIX
from sparse_io.output_files import shard_name
from sparse_io.schema import Schema
from sparse_io.shard_formats import shard_format
from sparse_io.shard_set import write_shard
from sparse_io.write_records import take_record
from transforms.beam._read_ahead import read_ahead
from transforms.beam.shard_assignment import ORDER_COLUMN
from transforms.beam.shard_spill import sorted_shard_batches

__all__ = ["Written", "WriteShardFn", "write_shard_file", "written_record", "default_write_threads",
           "MAX_DEFAULT_WRITE_THREADS"]

_METRICS = "sparseflow.WriteShards"
# Shards one worker encodes at once when `write_threads` is None: its CPU count, at most this.
MAX_DEFAULT_WRITE_THREADS = 4

# What a shard writer hands on: (shard index, path, rows, crc32c hex, bytes).
Written = tuple[int, str, int, str, int]


def default_write_threads() -> int:
    """Shards this machine encodes at once when `write_threads` is None."""
    return min(MAX_DEFAULT_WRITE_THREADS, os.cpu_count() or 1)


class WriteShardFn(beam.DoFn):
    """(shard, spill files) -> (shard, path, rows), encoding up to `write_threads` shards at once.

    A shard's encoding is one long call into pyarrow's Parquet writer (or the
    TFRecord writer), which releases the GIL, so a worker with a bundle of
    several shards encodes them on as many cores. Results are yielded in the
    order the shards finish being waited for; a failed write raises here,
    in the bundle's thread, and the shards not yet started are cancelled.
    """

    def __init__(
        self,
        output_dir: str,
        format: str,
        num_shards: int | None,
        schema,
        row_group_size: int,
        write_threads: int | None = None,
        compression: str | None = None,
        order_by: tuple[str, ...] = (),
    ):
        self._output_dir = output_dir
        self._format = format
        self._num_shards = num_shards
        self._schema = schema
        self._row_group_size = row_group_size
        self._write_threads = write_threads
        self._compression = compression or DEFAULT_SHARD_CODEC[format]
        self._order_by = order_by
        self._rows = beam.metrics.Metrics.counter(_METRICS, "rows")

    def setup(self):
        # Resolved on the worker: its cores, not the launching machine's.
        self._threads = self._write_threads or default_write_threads()

    def start_bundle(self):
        self._pool = None
        self._pending: collections.deque[concurrent.futures.Future] = collections.deque()

    def process(self, element, computed_shards=None, inferred_schema=None):
        index, fragments = element
        job = functools.partial(
            self._write_shard,
            index,
            list(fragments),
            self._num_shards or computed_shards,
            self._schema or inferred_schema,
        )
        if self._threads <= 1:
            yield self._counted(job())
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._threads, thread_name_prefix="sparseflow-write-shard"
            )
        # At most `_threads` shards in flight: each holds a key range and a row group in memory.
        while len(self._pending) >= self._threads:
            yield self._counted(self._wait_oldest())
        self._pending.append(self._pool.submit(job))

    def finish_bundle(self):
        try:
            while self._pending:
                yield GlobalWindows.windowed_value(self._counted(self._wait_oldest()))
        finally:
            self._shutdown()

    def teardown(self):
        self._shutdown()

    def _wait_oldest(self):
        try:
            return self._pending.popleft().result()
        except BaseException:
            self._shutdown()
            raise

    def _shutdown(self) -> None:
        pending, self._pending = getattr(self, "_pending", ()), collections.deque()
        for future in pending:
            future.cancel()
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.shutdown(wait=True)  # a write already running finishes (or fails) before the bundle ends

    def _counted(self, written: Written) -> Written:
        self._rows.inc(written[2])  # in the bundle's thread: Beam's metrics are per thread
        return written

    def _write_shard(self, index: int, fragments: list[str], shards: int, schema: Schema) -> Written:
        path = FileSystems.join(self._output_dir, shard_name(index, shards, SHARD_SUFFIX[self._format]))
        rows = write_shard_file(
            path,
            self._format,
            # The next row group is read and sorted while this one is encoded.
            read_ahead(sorted_shard_batches(fragments, ORDER_COLUMN, self._row_group_size, self._order_by)),
            schema,
            self._row_group_size,
            self._output_dir,
            self._compression,
        )
        FileSystems.delete(fragments)
        return (index, path, rows, *written_record(path))


def write_shard_file(
    path: str, format: str, batches, schema: Schema, row_group_size: int, output_dir: str, compression: str
) -> int:
    """Writes `batches` as the shard `path` in `format`, atomically, never outside `output_dir`; returns its rows."""
    # output_root: a symbolic link planted in the output directory cannot redirect a shard elsewhere.
    return write_shard(
        path,
        batches,
        schema,
        row_group_size=row_group_size,
        compression=compression if shard_format(format).codecs else None,
        output_root=output_dir,
    )


def written_record(path: str) -> tuple[str, int]:
    """(crc32c, bytes) of the file this process just wrote to `path`, as computed while writing it."""
    record = take_record(path)
    if record is None:
        raise RuntimeError(f"{path}: written without a checksum record (not through sparse_io.atomic)")
    return record
