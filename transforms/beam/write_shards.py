"""WriteShards: record batches -> `part-NNNNN-of-MMMMM` shards, schema.json and stats.json.

With `shuffle`, every row gets a random shard and a random sort key in one
numpy call per batch; the rows are spilled to files, one per shard per
spill, ordered by key range (`transforms.beam.shard_spill`), a GroupByKey
brings each shard's file names together, and the shard is written in key order, one key
range at a time. That is a global shuffle: any row can land anywhere, in
any shard, and memory holds a slice of a shard, never the whole input. A worker
encodes several shards of a bundle at once, each in its own thread
(`write_threads`): the encoders release the GIL, and the in-process runner
would otherwise leave all but one core idle while it writes. With a `seed`, the
random numbers of a batch are drawn from a generator seeded by the seed and
a digest of the batch's contents, so the same input gives the same shards
whatever order the runner processes batches in.

Shards are written atomically by the sparse_io writers (a file appears only
complete). After all of them, shards that received no rows are written
empty (a reader can count on every index existing), unless the rows could
not fill `num_shards` (fewer rows than shards): then only the shards that
received rows are kept, renumbered `part-i-of-K` (K of them, at least one),
and a log line says so, rather than thousands of empty files; `schema.json` and
`stats.json` are written, and `part-*` files of an earlier run with another
shard count or format are deleted, along with temporaries a crashed run left.

The steps live in modules of one job each: `transforms.beam.shard_assignment`
(each row's shard and sort key), `transforms.beam.shard_spill` (spilling by
key range), `transforms.beam.shard_writer` (encoding a shard),
`transforms.beam.shard_finalize` (completing the set) and
`transforms.beam.late_updates` (schema and stats learnt from the data);
this module assembles them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from sparse_io.formats import DEFAULT_SHARD_CODEC, SHARD_FORMATS, check_shard_codec
from sparse_io.schema import Schema
from sparse_io.shard_batches import DEFAULT_ROW_GROUP_SIZE
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam.call_once import CallOnce
from transforms.beam.late_updates import STATS_SECTIONS, updated_schema
from transforms.beam.shard_assignment import ORDER_COLUMN, SHARD_COLUMN, AssignShardsFn
from transforms.beam.shard_finalize import finalize
from transforms.beam.shard_spill import SpillByKeyRange
from transforms.beam.shard_writer import MAX_DEFAULT_WRITE_THREADS, WriteShardFn, default_write_threads
from transforms.beam.stats import STATS_FILE, ComputeStats

__all__ = ["WriteShards", "infer_schema", "default_write_threads", "DEFAULT_STATS_BATCH_SIZES",
           "MAX_DEFAULT_WRITE_THREADS", "STATS_SECTIONS"]

DEFAULT_STATS_BATCH_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def infer_schema(arrow_schema: pa.Schema, label: str | None = "label") -> Schema:
    """A Schema for record batches of `arrow_schema` (when none is given): `Schema.from_arrow`'s rule.

    List columns are sparse features, a `<f>__weights` column marks `f`
    weighted, the scalar column named `label` is the label, other scalar
    columns are dense.

    Raises:
      ValueError: a column type the shard formats cannot hold.
    """
    return Schema.from_arrow(arrow_schema, label)


def _shard_count(rows: list[int], rows_per_shard: int) -> int:
    return max(1, math.ceil(sum(rows) / rows_per_shard))


class _FirstSchemaFn(beam.DoFn):
    """Outputs the Arrow schema of a bundle's first batch (every batch of a PCollection has the same one)."""

    def start_bundle(self):
        self._schema = None

    def process(self, batch: pa.RecordBatch):
        if self._schema is None:
            self._schema = batch.schema

    def finish_bundle(self):
        if self._schema is not None:
            yield GlobalWindows.windowed_value(self._schema)


def _inferred_schema(schemas: list[pa.Schema], updates: dict[str, dict]) -> Schema:
    return updated_schema(infer_schema(schemas[0]) if schemas else Schema([]), updates)


class WriteShards(beam.PTransform):
    """Writes record batches as training shards with schema.json and stats.json beside them.

    Args:
      output_dir: the shard directory (local or any Beam filesystem).
      format: "parquet" (list columns, `row_group_size` rows per group),
        "tfrecord" (one `tf.train.Example` per row, uncompressed) or "arrow"
        (Arrow IPC files of `row_group_size`-row record batches, read
        memory-mapped without decoding: `sparse_io.arrow_shards`).
      num_shards: shard count (when fewer rows arrive, only the shards that
        got rows are kept, renumbered: see the module doc); None: enough
        shards of about `rows_per_shard`
        rows each (counted in the pipeline).
      shuffle: globally shuffle rows across and within shards.
      order_by: with `shuffle=False`, columns (scalars) to order rows by:
        rows with equal `order_by[0]` go to one shard (by its hash), and
        each shard is written sorted by these columns, ascending (ties keep
        their order within a batch). Sorting holds one key range of a shard
        in memory at a time (ranges of the first column's integer value or
        first 8 bytes). Without it, unshuffled rows keep their batch order.
      seed: makes the shuffle repeatable (same input, same shards); None
        draws fresh randomness.
      schema: the `sparse_io.Schema` of the batches; None infers it from their
        Arrow schema (`infer_schema`: list columns sparse, `label` the label).
      schema_updates: feature name -> FeatureSpec fields to set on the
        inferred schema, for what an Arrow schema cannot say (e.g.
        `{"item_id": {"hash_buckets": 100000}}`); a name the batches do not
        hold is an error when the schema is inferred.
      stats_batch_sizes: batch sizes whose COO capacity stats.json records.
      rows_per_shard: target shard size when `num_shards` is None. A worker
        holds one key range of one shard in memory (about 1/64 of it) and up
        to `shard_spill.DEFAULT_SPILL_ROWS` rows waiting to be spilled.
        While one row group is encoded, the next is read and sorted in a
        background thread.
      row_group_size: Parquet row-group size, or Arrow record-batch size.
      write_threads: shards one worker encodes at once (each in its own
        thread, holding its own key range and row group in memory); None:
        the worker's CPU count, at most `MAX_DEFAULT_WRITE_THREADS`
        (`default_write_threads()`). 1
        writes them one after another in the bundle's thread.
      late_updates: a PCollection of `(feature, {FeatureSpec field: value})`
        known only once the data was seen (a vocabulary's size and
        fingerprint, its OOV count), merged into schema.json when the shards
        are done; an `oov_ids` count also goes into the feature's stats.json entry;
        `(STATS_SECTIONS, {section: [entry, ...]})` adds top-level lists to stats.json.
      compression: the shards' codec, one of
        `sparse_io.formats.SHARD_CODECS[format]`; None: the format's default
        (Parquet zstd, the smallest files, lz4 decoding faster at a larger
        size; Arrow "none", read without decoding). TFRecord shards take no codec.

    Input: PCollection[pa.RecordBatch]. Output: a PCollection of one dict
    `{"shards": [paths], "num_rows", "schema", "stats", "stats_features"}`,
    emitted once every file is in place. Readers take the directory only
    with a `_MANIFEST.json`: `python -m pipelines.ingest` writes it after the
    pipeline; a pipeline of your own commits the directory once it has run,
    with `sparse_io.manifest.commit_directory(output_dir)`.

    Example:
      >>> import os, tempfile
      >>> from sparse_io.manifest import commit_directory
      >>> from transforms.testing import test_pipeline
      >>> out = tempfile.mkdtemp()
      >>> with test_pipeline() as p:
      ...     batches = p | beam.Create([pa.record_batch({"label": [1, 0, 1], "C1": [[3], [4, 5], []]})])
      ...     written = batches | WriteShards(out, num_shards=2, seed=7)
      >>> manifest = commit_directory(out)
      >>> sorted(name for name in os.listdir(out) if name.endswith(".parquet"))
      ['part-00000-of-00002.parquet', 'part-00001-of-00002.parquet']
    """

    def __init__(
        self,
        output_dir: str,
        format: str = "parquet",
        num_shards: int | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        *,
        schema: Schema | None = None,
        schema_updates: dict[str, dict] | None = None,
        stats_batch_sizes: Sequence[int] = DEFAULT_STATS_BATCH_SIZES,
        rows_per_shard: int = 500_000,
        row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
        write_threads: int | None = None,
        compression: str | None = None,
        order_by: Sequence[str] | None = None,
        late_updates=None,
    ):
        super().__init__()
        self._late_updates = late_updates
        if format not in SHARD_FORMATS:
            raise ValueError(f"WriteShards: format must be one of {sorted(SHARD_FORMATS)}, got {format!r}")
        if not output_dir:
            raise ValueError("WriteShards: output_dir must be a directory path")
        for name, value in (
            ("num_shards", num_shards),
            ("rows_per_shard", rows_per_shard),
            ("row_group_size", row_group_size),
            ("write_threads", write_threads),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"WriteShards: {name} must be a positive integer, got {value!r}")
        if compression is not None:
            try:
                check_shard_codec(compression, format)
            except ValueError as e:
                raise ValueError(f"WriteShards: {e}") from None
        if seed is not None and not isinstance(seed, int):
            raise ValueError(f"WriteShards: seed must be an integer or None, got {seed!r}")
        if schema is not None and not isinstance(schema, Schema):
            raise ValueError(f"WriteShards: schema must be a sparse_io.Schema, got {type(schema).__name__}")
        self._output_dir = output_dir
        self._format = format
        self._num_shards = num_shards
        self._shuffle = shuffle
        self._seed = seed
        if schema_updates and schema is not None:
            raise ValueError("WriteShards: schema_updates only apply to an inferred schema; put them in `schema`")
        self._schema = schema
        self._schema_updates = dict(schema_updates or {})
        self._stats_batch_sizes = list(stats_batch_sizes)
        self._rows_per_shard = rows_per_shard
        self._row_group_size = row_group_size
        self._write_threads = write_threads
        self._compression = compression or DEFAULT_SHARD_CODEC[format]
        self._order_by = tuple(order_by or ())
        if self._order_by and shuffle:
            raise ValueError("WriteShards: order_by applies to unshuffled output (shuffle=False)")

    def expand(self, batches):
        side = {}
        if self._num_shards is None:
            rows = batches | "Rows" >> beam.Map(lambda b: b.num_rows)
            count = batches.pipeline | "ShardCount" >> CallOnce(_shard_count, beam.pvalue.AsList(rows),
                                                                 self._rows_per_shard)
            side["computed_shards"] = beam.pvalue.AsSingleton(count)
        if self._schema is None:
            # One schema per bundle, not per batch: the side input stays small.
            schemas = batches | "ArrowSchema" >> beam.ParDo(_FirstSchemaFn())
            inferred = batches.pipeline | "Infer" >> CallOnce(
                _inferred_schema, beam.pvalue.AsList(schemas), self._schema_updates
            )
            side["inferred_schema"] = beam.pvalue.AsSingleton(inferred)
        assign_side = {k: v for k, v in side.items() if k == "computed_shards"}
        written = (
            batches
            | "AssignShards"
            >> beam.ParDo(
                AssignShardsFn(self._num_shards, self._shuffle, self._seed, self._order_by), **assign_side
            ).with_output_types(pa.RecordBatch)
            | "Spill"
            >> beam.ParDo(SpillByKeyRange(self._output_dir, ORDER_COLUMN, SHARD_COLUMN)).with_output_types(
                tuple[int, str]
            )
            | "GroupShards" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(
                WriteShardFn(
                    self._output_dir,
                    self._format,
                    self._num_shards,
                    self._schema,
                    self._row_group_size,
                    self._write_threads,
                    self._compression,
                    self._order_by,
                ),
                **side,
            )
        )
        # Stats describe the rows written; a sound capacity does not depend on their order.
        features = None if self._schema is None else [f.name for f in self._schema.sparse]
        dense = [] if self._schema is None else [f.name for f in self._schema.dense]
        label = None if self._schema is None or self._schema.label is None else self._schema.label.name
        stats = batches | "Stats" >> ComputeStats(
            features, self._stats_batch_sizes, output_path=FileSystems.join(self._output_dir, STATS_FILE),
            dense=dense, label=label,
        )
        late = {} if self._late_updates is None else {"late_updates": beam.pvalue.AsList(self._late_updates)}
        return batches.pipeline | "Finalize" >> CallOnce(
            finalize,
            beam.pvalue.AsList(written),
            self._output_dir,
            self._format,
            self._num_shards,
            self._schema,
            self._row_group_size,
            self._compression,
            beam.pvalue.AsSingleton(stats),
            **side,
            **late,
        )
