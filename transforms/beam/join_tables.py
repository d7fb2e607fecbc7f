r"""JoinSideTable: adds a side table's columns (a user's age, an item's genres) to every event batch.

The table is read once (`sparse_io.readers.read_logs`, any log format; a bad
record refuses the whole table) and joined on one key column, one of two ways:

  * side input (a small table): the table, indexed by its key
    (`transforms.beam.keyed_table.KeyedTable`), is a singleton side input;
    each event batch is joined where it is, by one vectorised lookup;
  * CoGroupByKey (a large table): table rows and the events' keys are both
    split into `num_partitions` partitions by their key's hash, so a worker
    holds one partition of the table, never all of it; each partition's
    joined columns go back, by a random id per event batch, to the batch
    they came from (a second CoGroupByKey), which gets them at its own rows.

Both ways give each event batch exactly the same columns, in the same row
order, so the shards they lead to are identical. The events' key may be a
scalar column or a list column holding at most one value per row; an event
whose key is missing or absent from the table gets missing values (an empty
list in a list column, a null in a scalar one). A table row without a key, a
key that occurs in two rows, or a key list of several values stop the
pipeline with a `LayoutError` naming the table and the key.

Output: `{"events": PCollection[pa.RecordBatch] (each input batch with the
joined columns appended, in `columns` order), "counts": PCollection of one
dict {"rows_matched": int, "rows_unmatched": int}}`.

Example:
  >>> import os, tempfile
  >>> from sparse_io.schema import FeatureSpec, Schema
  >>> from transforms.testing import test_pipeline
  >>> from apache_beam.testing.util import assert_that, equal_to
  >>> path = os.path.join(tempfile.mkdtemp(), "users.csv")
  >>> _ = open(path, "w").write("user_id,job\n7,doctor\n9,artist\n")
  >>> table_schema = Schema([FeatureSpec("user_id", "dense", "int64"), FeatureSpec("job", "sparse", "string")])
  >>> with test_pipeline() as p:
  ...     events = p | beam.Create([pa.record_batch({"user_id": [9, 8]})])
  ...     joined = events | JoinSideTable(path, "user_id", ["job"], format="csv", schema=table_schema)
  ...     jobs = joined["events"] | beam.Map(lambda b: b.column("job").to_pylist())
  ...     _ = assert_that(jobs, equal_to([[["artist"], []]]))
  ...     _ = assert_that(joined["counts"], equal_to([{"rows_matched": 1, "rows_unmatched": 1}]), label="Counts")
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.readers import read_logs
from sparse_io.schema import Schema
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam.keyed_table import KeyedTable, fill_missing, filled_keys, key_codes, key_values, missing_columns

__all__ = ["JoinSideTable", "DEFAULT_JOIN_PARTITIONS"]

DEFAULT_JOIN_PARTITIONS = 16
_MATCHED = "__sparseflow_join_matched"
_COUNTS = "counts"


class _TableReader:
    """Reads the table's record batches: one picklable callable for both ways."""

    def __init__(self, format: str, schema: Schema, read_options: dict):
        self.format, self.schema, self.read_options = format, schema, read_options

    def __call__(self, pattern: str) -> Iterator[pa.RecordBatch]:
        return read_logs(pattern, self.format, self.schema, **self.read_options)


def _append(batch: pa.RecordBatch, joined: pa.Table, matched: pa.Array):
    """`batch` with the joined columns appended, and a (matched, unmatched) count as a tagged output."""
    for field, column in zip(joined.schema, joined.columns):
        batch = batch.append_column(field, column.combine_chunks())
    hits = int(pc.sum(matched).as_py() or 0)
    yield batch
    yield beam.pvalue.TaggedOutput(_COUNTS, (hits, batch.num_rows - hits))


class _CountMatchesFn(beam.CombineFn):
    """(matched, unmatched) per batch -> {"rows_matched", "rows_unmatched"}; zeros for no events."""

    def create_accumulator(self):
        return 0, 0

    def add_input(self, accumulator, pair):
        return accumulator[0] + pair[0], accumulator[1] + pair[1]

    def merge_accumulators(self, accumulators):
        pairs = list(accumulators)
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    def extract_output(self, accumulator):
        return {"rows_matched": accumulator[0], "rows_unmatched": accumulator[1]}


def _load(pattern: str, reader: _TableReader, key: str, columns: Sequence[str], types: pa.Schema) -> KeyedTable:
    return KeyedTable.from_batches(reader(pattern), key, columns, where=pattern, types=types)


class _JoinFn(beam.DoFn):
    """Side-input way: each event batch joined against the whole (small) table."""

    def __init__(self, key: str, where: str):
        self._key, self._where = key, where

    def process(self, batch: pa.RecordBatch, table: KeyedTable):
        keys = key_values(batch.column(self._key), self._key, f"{self._where} (the events' key)")
        joined, matched = table.join(keys)
        yield from _append(batch, joined, matched)


def _partitions(keys: pa.Array, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows with a key, ordered by partition, and where each partition starts among them ([count + 1])."""
    valid = np.flatnonzero(keys.is_valid().to_numpy(zero_copy_only=False))
    part = (key_codes(filled_keys(keys)) % np.uint64(count)).astype(np.int64)[valid]
    order = np.argsort(part, kind="stable")
    rows = valid[order]
    bounds = np.searchsorted(part[order], np.arange(count + 1))
    return rows, bounds


def _split_table(batch: pa.RecordBatch, key: str, columns: Sequence[str], count: int, where: str):
    """(partition, rows of the table in it): the key as one scalar column, then the joined columns."""
    keys = key_values(batch.column(key), key, where)
    if keys.null_count:
        # Sent on as they are: the partition refuses a row without a key, naming the table.
        yield 0, pa.RecordBatch.from_arrays([keys, *(batch.column(c) for c in columns)], [key, *columns])
        return
    rows, bounds = _partitions(keys, count)
    for part in range(count):
        if bounds[part] < bounds[part + 1]:
            index = pa.array(rows[bounds[part]:bounds[part + 1]])
            yield part, pa.RecordBatch.from_arrays(
                [keys.take(index), *(batch.column(c).take(index) for c in columns)], [key, *columns])


class _TagBatchFn(beam.DoFn):
    """(a random id, batch): the id brings each partition's joined columns back to their batch."""

    def process(self, batch: pa.RecordBatch):
        yield uuid.uuid4().hex, batch


def _split_keys(tagged, key: str, count: int, where: str):
    """(partition, (batch id, rows, keys)) of one event batch's keys; rows without a key go nowhere."""
    batch_id, batch = tagged
    keys = key_values(batch.column(key), key, f"{where} (the events' key)")
    rows, bounds = _partitions(keys, count)
    for part in range(count):
        if bounds[part] < bounds[part + 1]:
            chosen = rows[bounds[part]:bounds[part + 1]]
            yield part, (batch_id, chosen, keys.take(pa.array(chosen)))


def _join_partition(grouped, key: str, columns: Sequence[str], types: pa.Schema, where: str):
    """(batch id, (rows, joined columns + matched)) for each event part of one partition."""
    _, sides = grouped
    table = KeyedTable.from_batches(list(sides["table"]), key, columns, where=where, types=types)
    for batch_id, rows, keys in sides["events"]:
        joined, matched = table.join(keys)
        yield batch_id, (rows, joined.append_column(_MATCHED, matched))


class _ReassembleFn(beam.DoFn):
    """Each event batch with its joined columns put back at the rows they came from."""

    def __init__(self, types: pa.Schema):
        self._types = types

    def process(self, grouped):
        _, sides = grouped
        parts = list(sides["parts"])  # one batch per id: its parts are at most one per partition
        for batch in sides["batch"]:
            n = batch.num_rows
            if not parts:
                joined = pa.Table.from_arrays(missing_columns(self._types, n), schema=self._types)
                yield from _append(batch, joined, pa.array(np.zeros(n, dtype=bool)))
                continue
            found = pa.concat_tables([part for _, part in parts])
            at = np.full(n, -1, dtype=np.int64)
            at[np.concatenate([rows for rows, _ in parts])] = np.arange(found.num_rows)
            taken = found.take(pa.array(at, mask=at < 0))
            matched = pc.fill_null(taken.column(_MATCHED).combine_chunks(), False)
            columns = [fill_missing(taken.column(f.name).combine_chunks()) for f in self._types]
            yield from _append(batch, pa.Table.from_arrays(columns, schema=self._types), matched)


class JoinSideTable(beam.PTransform):
    """Joins a side table's `columns` onto each event batch by `key` (see the module doc).

    Args:
      table: the table's path or pattern (local or any Beam filesystem); absolute on a distributed runner.
      key: the key column, in the events and in the table.
      columns: the table's columns to add (not the key).
      format: the table's log format (`sparse_io.LOG_FORMATS`).
      schema: what is read from the table (`read_logs`): the key, `columns` and any other column it names.
      read_options: further `read_logs` keywords (delimiter, null_values, skip_header, encoding, ...).
      side_input: join through a side input (True: a small table) or CoGroupByKey (False).
      num_partitions: the CoGroupByKey way's partitions of the table.

    Raises:
      ValueError: a key or column the table schema lacks, the key among `columns`, or no columns.
    """

    def __init__(self, table: str, key: str, columns: Sequence[str], *, format: str, schema: Schema,
                 read_options: dict | None = None, side_input: bool = True,
                 num_partitions: int = DEFAULT_JOIN_PARTITIONS):
        super().__init__()
        columns = list(columns)
        if not columns:
            raise ValueError("JoinSideTable: columns must name at least one column of the table")
        for name in (key, *columns):
            if name not in schema:
                raise ValueError(f"JoinSideTable: {name!r} is not in the table schema ({schema.names})")
        if key in columns:
            raise ValueError(f"JoinSideTable: the key {key!r} cannot also be a joined column")
        if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1:
            raise ValueError(f"JoinSideTable: num_partitions must be a positive integer, got {num_partitions!r}")
        self._table, self._key, self._columns = table, key, columns
        self._reader = _TableReader(format, schema, dict(read_options or {}))
        self._types = pa.schema([pa.field(c, schema[c].arrow_type()) for c in columns])
        self._side_input, self._num_partitions = side_input, num_partitions

    def expand(self, events):
        start = events.pipeline | "Table" >> beam.Create([self._table])
        if self._side_input:
            table = start | "IndexTable" >> beam.Map(_load, self._reader, self._key, self._columns, self._types)
            # Typed batches take the Arrow coder wherever the runner encodes or sizes them, never pickle.
            joined = events | "Join" >> beam.ParDo(_JoinFn(self._key, self._table), beam.pvalue.AsSingleton(
                table)).with_output_types(pa.RecordBatch).with_outputs(_COUNTS, main="events")
        else:
            count, where = self._num_partitions, self._table
            table_parts = (
                start
                | "ReadTable" >> beam.FlatMap(self._reader)
                | "SplitTable" >> beam.FlatMap(_split_table, self._key, self._columns, count, where)
            )
            tagged = events | "TagBatches" >> beam.ParDo(_TagBatchFn())
            key_parts = tagged | "SplitKeys" >> beam.FlatMap(_split_keys, self._key, count, where)
            parts = (
                {"table": table_parts, "events": key_parts}
                | "GroupPartitions" >> beam.CoGroupByKey()
                | "JoinPartitions" >> beam.FlatMap(_join_partition, self._key, self._columns, self._types, where)
            )
            joined = (
                {"batch": tagged, "parts": parts}
                | "GroupBatches" >> beam.CoGroupByKey()
                | "Reassemble" >> beam.ParDo(_ReassembleFn(self._types)).with_output_types(
                    pa.RecordBatch).with_outputs(_COUNTS, main="events")
            )
        counts = joined[_COUNTS] | "CountMatches" >> beam.CombineGlobally(_CountMatchesFn())
        return {"events": joined["events"], "counts": counts}
