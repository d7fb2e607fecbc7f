"""GroupHistories: per key (e.g. user), the time-ordered list of items as list columns.

Events are not grouped one element per key: each input batch is split by a
hash of the key into `num_partitions` partitions (`history_partitions`), a
GroupByKey brings each partition's events together, and the histories of a
partition are built by sorting and slicing Arrow/numpy arrays: at once while
its events fit in `memory_budget`, else through sorted runs spilled to disk,
merged, and a streaming window per key (transforms.beam.history_stream), so
no partition and no key is ever held whole. Elements stay batch-sized
whatever the number of keys, and the output is the same either way.

What goes through the GroupByKey: with a `spill_dir` (the ingest passes its
output directory), only file names: a worker buffers up to `spill_bytes` of
events and writes them out, one `.tmp-histories-*` Arrow IPC file per
partition (`transforms.beam.history_spill`), and the build reads a
partition's files back a batch at a time, then deletes them. Without one, the
events' sub-batches themselves, which Beam's in-process runner holds in
memory until the grouping is done: memory then grows with the log.

Example:
  >>> import os, tempfile
  >>> from transforms.testing import test_pipeline
  >>> spill = tempfile.mkdtemp()
  >>> events = pa.record_batch({"user": [1, 2, 1], "item": [10, 20, 30], "ts": [2, 1, 1]})
  >>> with test_pipeline() as p:
  ...     _ = (p | beam.Create([events]) | GroupHistories("user", "item", "ts", num_partitions=1, spill_dir=spill)
  ...          | beam.Map(lambda b: print(b.select(["user", "item"]).to_pylist())))
  [{'user': 1, 'item': [30, 10]}, {'user': 2, 'item': [20]}]
  >>> os.listdir(spill)  # the spill files are gone once the histories are built
  []
"""

from __future__ import annotations

import typing

import apache_beam as beam
import numpy as np
import pyarrow as pa

from sparse_io.schema import weights_column
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._columns import require_columns
from transforms.beam.histories_build import TARGET_PREFIX, build_histories
from transforms.beam.history_partitions import partition_of, partitions_for
from transforms.beam.history_spill import DEFAULT_SPILL_BYTES, SpillByPartition, remove_spilled, spilled_batches
from transforms.beam.history_stream import DEFAULT_MEMORY_BUDGET, partition_histories

__all__ = ["GroupHistories", "build_histories", "partition_of", "partitions_for", "TARGET_PREFIX"]


class _SplitByPartitionFn(beam.DoFn):
    def __init__(self, columns: list[str], key: str, num_partitions: int | None):
        self._columns = columns
        self._key = key
        self._num_partitions = num_partitions

    def process(self, batch: pa.RecordBatch, counted_partitions: int | None = None):
        if batch.num_rows == 0:
            return
        require_columns(batch, self._columns, "GroupHistories")
        batch = batch.select(self._columns)
        parts = partition_of(batch.column(self._key), self._num_partitions or typing.cast(int, counted_partitions))
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
        shuffled = batch.take(pa.array(order))
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(order)]])):
            yield int(sorted_parts[lo]), shuffled.slice(int(lo), int(hi - lo))


class _BuildHistoriesFn(beam.DoFn):
    """(partition, its events' batches or spill files) -> the partition's histories."""

    def __init__(self, options: dict, batch_size: int, memory_budget: int, spilled: bool):
        self._options = options
        self._batch_size = batch_size
        self._memory_budget = memory_budget
        self._spilled = spilled
        self._rows = beam.metrics.Metrics.counter("sparseflow.GroupHistories", "rows_out")

    def process(self, element: tuple[int, typing.Iterable]):
        _, grouped = element
        # Batches are iterated once, never listed (a runner may page them in); file names are few.
        paths = list(grouped) if self._spilled else []
        batches = spilled_batches(paths) if self._spilled else grouped
        for out in partition_histories(batches, self._options, batch_size=self._batch_size,
                                       memory_budget=self._memory_budget):
            self._rows.inc(out.num_rows)
            yield out
        # Only once every history is out: a retried bundle reads the files again.
        remove_spilled(paths)


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
      num_partitions: key-hash partitions: the most workers the grouping can use.
        None (the default): `partitions_for(the number of events)`, 32 up to
        32M events and one more per 1M past that (the events are counted first).
      memory_budget: bytes of one partition's events a worker holds in memory;
        past it, sorted runs spill to the worker's temporary directory.
      spill_dir: where the events wait for their grouping, as `.tmp-histories-*`
        Arrow IPC files (any Beam filesystem; `transforms.beam.history_spill`),
        so that only file names go through the GroupByKey; each partition's
        files are deleted once its histories are built. None: the events
        themselves go through the GroupByKey, which a distributed runner
        shuffles on disk but Beam's in-process runner holds in memory, all of them.
      spill_bytes: with `spill_dir`, bytes of events a worker buffers before
        writing them out, one file per partition present.
      hold_for_count: with `spill_dir` and `num_partitions` None, the events
        also wait on disk (`transforms.beam.held_batches`) while they are
        counted: a step whose side input is computed from its own input
        otherwise has that input held whole by a local runner
        (`transforms.beam.runner.keeps_pcollections_in_memory`).
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
        num_partitions: int | None = None,
        batch_size: int = 8192,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        target_prefix: str = TARGET_PREFIX,
        spill_dir: str | None = None,
        spill_bytes: int = DEFAULT_SPILL_BYTES,
        hold_for_count: bool = False,
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
            ("memory_budget", memory_budget, 1),
            ("spill_bytes", spill_bytes, 1),
        ):
            if value is None and name in ("max_length", "num_partitions"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"GroupHistories: {name} must be an integer >= {low}, got {value!r}")
        self._columns = names
        self._key = key
        self._num_partitions = num_partitions
        self._batch_size = batch_size
        self._memory_budget = memory_budget
        if spill_dir is not None and (not isinstance(spill_dir, str) or not spill_dir):
            raise ValueError(f"GroupHistories: spill_dir must be a directory path or None, got {spill_dir!r}")
        if hold_for_count and spill_dir is None:
            raise ValueError("GroupHistories: hold_for_count needs a spill_dir to hold the events in")
        self._spill_dir = spill_dir
        self._spill_bytes = spill_bytes
        self._hold_for_count = hold_for_count
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
        side = []
        if self._num_partitions is None:
            # More events, more partitions: the grouping's parallelism grows with the log.
            counted = (
                batches
                | "CountEvents" >> beam.Map(lambda b: b.num_rows)
                | "SumEvents" >> beam.CombineGlobally(sum)
                | "Partitions" >> beam.Map(partitions_for)
            )
            side = [beam.pvalue.AsSingleton(counted)]
            if self._hold_for_count:
                from transforms.beam.held_batches import HoldBatches, ReleaseBatches

                batches = (
                    batches
                    | "HoldForCount" >> HoldBatches(typing.cast(str, self._spill_dir))
                    | "ReleaseCounted" >> ReleaseBatches([counted])
                )
        if self._spill_dir is None:
            split = beam.ParDo(_SplitByPartitionFn(self._columns, self._key, self._num_partitions), *side)
            keyed = batches | "SplitByKeyHash" >> split.with_output_types(tuple[int, pa.RecordBatch])
        else:
            spill = SpillByPartition(self._spill_dir, self._columns, self._key, self._num_partitions,
                                     self._spill_bytes)
            keyed = batches | "SpillByKeyHash" >> beam.ParDo(spill, *side).with_output_types(tuple[int, str])
        build = _BuildHistoriesFn(self._options, self._batch_size, self._memory_budget, self._spill_dir is not None)
        return (
            keyed
            | "GroupPartitions" >> beam.GroupByKey()
            | "Build" >> beam.ParDo(build).with_output_types(pa.RecordBatch)
        )
