"""Spilling a shuffle to disk, so writing shards needs memory for a slice of a shard, not all of it.

`WriteShards` gives every row a shard and a 63-bit sort key. Grouping the
rows themselves by shard would make a runner hold a whole shard (Beam's
in-process runner holds every shard: the whole input) in memory. Instead,
`SpillByKeyRange` buffers rows up to `spill_rows` and writes them out as
Arrow IPC fragment files, one per (shard, key range) with rows, named
`.tmp-spill-<shard>-<range>-<id>.arrow` in the output directory; only the
file names go through the GroupByKey. `sorted_shard_batches` then reads a
shard's fragments one key range at a time, in key order, and sorts each
range: the same rows in the same order as sorting the whole shard by key,
with at most one key range of one shard in memory.

The key ranges are the top `RANGE_BITS` bits of the key, so a range holds
about `rows / (shards * 2**RANGE_BITS)` rows.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from sparse_io.atomic import TMP_PREFIX

__all__ = ["SpillByKeyRange", "sorted_shard_batches", "RANGE_BITS", "DEFAULT_SPILL_ROWS"]

RANGE_BITS = 6
DEFAULT_SPILL_ROWS = 100_000
_KEY_BITS = 63  # keys are non-negative int64
_PREFIX = TMP_PREFIX + "spill-"  # a temporary: a crashed run's leftovers are removed with the others


def _range_of(keys: np.ndarray) -> np.ndarray:
    return (keys >> (_KEY_BITS - RANGE_BITS)).astype(np.int64)


def _fragment_name(shard: int, key_range: int) -> str:
    return f"{_PREFIX}{shard:05d}-{key_range:03d}-{uuid.uuid4().hex}.arrow"


def _key_range_of_path(path: str) -> int:
    name = FileSystems.split(path)[1]
    return int(name[len(_PREFIX) :].split("-")[1])


class SpillByKeyRange(beam.DoFn):
    """`(shard, RecordBatch with an int64 key column)` -> `(shard, fragment path)`, rows written to disk.

    Args:
      output_dir: where the fragments go (any Beam filesystem).
      key_column: the int64 column holding each row's non-negative sort key.
      spill_rows: rows buffered before they are written out.
    """

    def __init__(self, output_dir: str, key_column: str, spill_rows: int = DEFAULT_SPILL_ROWS):
        self._output_dir = output_dir
        self._key_column = key_column
        self._spill_rows = spill_rows

    def start_bundle(self):
        self._buffers: dict[tuple[int, int], list[pa.RecordBatch]] = collections.defaultdict(list)
        self._buffered = 0

    def process(self, element):
        shard, batch = element
        if batch.num_rows == 0:
            return
        ranges = _range_of(batch.column(self._key_column).to_numpy())
        order = np.argsort(ranges, kind="stable")
        ranges = ranges[order]
        batch = batch.take(pa.array(order))
        bounds = np.flatnonzero(np.diff(ranges)) + 1
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(ranges)]])):
            self._buffers[(int(shard), int(ranges[lo]))].append(batch.slice(int(lo), int(hi - lo)))
        self._buffered += batch.num_rows
        if self._buffered >= self._spill_rows:
            yield from self._flush()

    def finish_bundle(self):
        for element in self._flush():
            yield GlobalWindows.windowed_value(element)

    def _flush(self) -> Iterator[tuple[int, str]]:
        for (shard, key_range), parts in sorted(self._buffers.items()):
            path = FileSystems.join(self._output_dir, _fragment_name(shard, key_range))
            with FileSystems.create(path) as f, pa.ipc.new_stream(f, parts[0].schema) as writer:
                for part in parts:
                    writer.write_batch(part)
            yield shard, path
        self._buffers.clear()
        self._buffered = 0


def _read(path: str) -> pa.Table:
    with FileSystems.open(path) as f:
        return pa.ipc.open_stream(f.read()).read_all()


def sorted_shard_batches(paths: Iterable[str], key_column: str, chunk_rows: int) -> Iterator[pa.RecordBatch]:
    """A shard's rows from its fragments, sorted by key (stable), without the key column.

    Reads one key range at a time; batches hold at most `chunk_rows` rows.
    """
    by_range: dict[int, list[str]] = collections.defaultdict(list)
    for path in paths:
        by_range[_key_range_of_path(path)].append(path)
    for key_range in sorted(by_range):
        table = pa.concat_tables([_read(p) for p in sorted(by_range[key_range])])
        order = np.argsort(table.column(key_column).to_numpy(), kind="stable")
        table = table.drop_columns([key_column]).take(pa.array(order))
        yield from table.to_batches(max_chunksize=chunk_rows)
