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
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import json
import logging
import math
import os
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from sparse_io.atomic import atomic_write_text, remove_stale_temporaries
from sparse_io.formats import DEFAULT_SHARD_CODEC, SHARD_FORMATS, SHARD_SUFFIX, check_shard_codec
from sparse_io.hashing import hash_strings
from sparse_io.output_files import shard_name
from sparse_io.schema import SCHEMA_FILE, Schema
from sparse_io.shard_batches import DEFAULT_ROW_GROUP_SIZE
from sparse_io.shard_formats import shard_format
from sparse_io.shard_set import write_shard
from sparse_io.stats_file import stats_json
from sparse_io.write_records import WRITE_RECORDS_FILE, take_record, text_record, write_records_text
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._read_ahead import read_ahead
from transforms.beam.call_once import CallOnce
from transforms.beam.shard_spill import SpillByKeyRange, sorted_shard_batches
from transforms.beam.stats import STATS_FILE, ComputeStats

__all__ = ["WriteShards", "infer_schema", "default_write_threads", "DEFAULT_STATS_BATCH_SIZES"]

# The sort key that travels with each row to its shard: random per row, or per batch without shuffle.
# Rows with equal keys come from identical batches and are identical, so a stable sort by the key alone
# gives the same shard bytes whatever order the runner delivers the parts in.
_ORDER = "__sparseflow_order"
_SHARD = "__sparseflow_shard"  # each row's shard, until the spill files it under that shard
DEFAULT_STATS_BATCH_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_METRICS = "sparseflow.WriteShards"
_LOGGER = logging.getLogger("sparseflow.WriteShards")
# Shards one worker encodes at once when `write_threads` is None: its CPU count, at most this.
MAX_DEFAULT_WRITE_THREADS = 4

# What a shard writer hands on: (shard index, path, rows, crc32c hex, bytes).
Written = tuple[int, str, int, str, int]


def default_write_threads() -> int:
    """Shards this machine encodes at once when `write_threads` is None."""
    return min(MAX_DEFAULT_WRITE_THREADS, os.cpu_count() or 1)


def infer_schema(arrow_schema: pa.Schema, label: str | None = "label") -> Schema:
    """A Schema for record batches of `arrow_schema` (when none is given): `Schema.from_arrow`'s rule.

    List columns are sparse features, a `<f>__weights` column marks `f`
    weighted, the scalar column named `label` is the label, other scalar
    columns are dense.

    Raises:
      ValueError: a column type the shard formats cannot hold.
    """
    return Schema.from_arrow(arrow_schema, label)


_DIGEST_MUL = np.uint64(0x9E3779B97F4A7C15)
_MASK64 = (1 << 64) - 1


def _digest(batch: pa.RecordBatch) -> int:
    """64 bits that depend on every byte of a batch's buffers (they seed its random numbers).

    Not cryptographic: a position-weighted sum of the buffers' 8-byte words,
    which reads memory once (several times faster than a hash function).
    """
    total = batch.num_rows
    for column in batch.columns:
        for buffer in column.buffers():
            if buffer is None or buffer.size == 0:
                continue
            data = np.frombuffer(buffer, dtype=np.uint8)
            cut = data.size - data.size % 8
            words = data[:cut].view("<u8")
            weights = np.arange(1, words.size + 1, dtype=np.uint64) * _DIGEST_MUL
            mixed = int((words * weights).sum(dtype=np.uint64))
            tail = int.from_bytes(data[cut:].tobytes(), "little")
            total = (total * int(_DIGEST_MUL) + mixed + tail) & _MASK64
    return total


def _order_code(values: pa.Array) -> np.ndarray:
    """Non-negative int64 codes, non-decreasing in `values` (integers, or strings by their first 8 bytes).

    Equal codes need not mean equal values (long strings, other types all 0):
    the shard writer sorts rows of one code range by the values themselves.
    """
    n = len(values)
    if pa.types.is_integer(values.type):
        raw = pc.fill_null(values.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        return ((raw.view(np.uint64) ^ np.uint64(1 << 63)) >> np.uint64(1)).astype(np.int64)
    if pa.types.is_string(values.type) or pa.types.is_binary(values.type):
        prefix = pc.utf8_slice_codeunits(values, 0, 8) if pa.types.is_string(values.type) else values
        padded = np.zeros((n, 8), dtype=np.uint8)
        for i, text in enumerate(prefix.cast(pa.binary()).to_pylist()):
            head = (text or b"")[:8]
            padded[i, : len(head)] = np.frombuffer(head, dtype=np.uint8)
        return (padded.view(">u8").ravel().astype(np.uint64) >> np.uint64(1)).astype(np.int64)
    return np.zeros(n, dtype=np.int64)


class _AssignShardsFn(beam.DoFn):
    """Appends each row's shard (`_SHARD`) and sort key (`_ORDER`) to its batch."""

    def __init__(self, num_shards: int | None, shuffle: bool, seed: int | None, order_by: tuple[str, ...] = ()):
        self._num_shards = num_shards
        self._shuffle = shuffle
        self._seed = seed
        self._order_by = order_by

    def process(self, batch: pa.RecordBatch, computed_shards=None):
        n = batch.num_rows
        if n == 0:
            return
        shards = self._num_shards or computed_shards
        digest = _digest(batch) if self._seed is not None else None
        rng = np.random.default_rng(None if digest is None else [self._seed & (2**64 - 1), digest])
        if not self._shuffle and self._order_by:
            # Whole groups of the first order column per shard (by its hash), in its order.
            first = batch.column(self._order_by[0])
            if not (pa.types.is_integer(first.type) or pa.types.is_string(first.type)):
                first = first.cast(pa.string())
            filled = pc.fill_null(first, pa.scalar(0 if pa.types.is_integer(first.type) else "", first.type))
            target = hash_strings(filled, shards).astype(np.int32)
            keys = _order_code(first)
        elif not self._shuffle:
            # The whole batch goes to one shard, in its order; the batch's digest
            # (or a random key) orders the batches within the shard.
            key = digest if digest is not None else int(rng.integers(2**63))
            target = np.full(n, rng.integers(shards), dtype=np.int32)
            keys = np.full(n, key >> 1, dtype=np.int64)
        else:
            target = rng.integers(shards, size=n).astype(np.int32)
            keys = rng.integers(np.iinfo(np.int64).max, size=n, dtype=np.int64)
        # The rows stay where they are: the spill moves each row once, to its shard and key range.
        yield batch.append_column(_SHARD, pa.array(target)).append_column(_ORDER, pa.array(keys))


class _WriteShardFn(beam.DoFn):
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
        rows = _write(
            path,
            self._format,
            # The next row group is read and sorted while this one is encoded.
            read_ahead(sorted_shard_batches(fragments, _ORDER, self._row_group_size, self._order_by)),
            schema,
            self._row_group_size,
            self._output_dir,
            self._compression,
        )
        FileSystems.delete(fragments)
        return (index, path, rows, *_record(path))


def _write(
    path: str, format: str, batches, schema: Schema, row_group_size: int, output_dir: str, compression: str
) -> int:
    # output_root: a symbolic link planted in the output directory cannot redirect a shard elsewhere.
    return write_shard(
        path,
        batches,
        schema,
        row_group_size=row_group_size,
        compression=compression if shard_format(format).codecs else None,
        output_root=output_dir,
    )


def _record(path: str) -> tuple[str, int]:
    """(crc32c, bytes) of the file this process just wrote to `path`, as computed while writing it."""
    record = take_record(path)
    if record is None:
        raise RuntimeError(f"{path}: written without a checksum record (not through sparse_io.atomic)")
    return record


def _finalize(
    written,
    output_dir,
    format,
    num_shards,
    schema,
    row_group_size,
    compression,
    stats,
    computed_shards=None,
    inferred_schema=None,
    late_updates=None,
) -> dict:
    shards = num_shards or computed_shards
    schema = schema or inferred_schema
    if late_updates:
        schema, stats = _apply_late_updates(schema, stats, late_updates, output_dir)
    suffix = SHARD_SUFFIX[format]
    done = {index: (path, rows, crc, size) for index, path, rows, crc, size in written}
    done, shards = _fit_to_rows(done, shards, output_dir, suffix)
    for index in range(shards):
        if index not in done:
            path = FileSystems.join(output_dir, shard_name(index, shards, suffix))
            rows = _write(path, format, [], schema, row_group_size, output_dir, compression)
            done[index] = (path, rows, *_record(path))
    keep = {path for path, *_ in done.values()}
    pattern = FileSystems.join(output_dir, "part-*-of-*")
    stale = [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list if m.path not in keep]
    if stale:
        FileSystems.delete(stale)
    remove_stale_temporaries(output_dir)
    schema.save(output_dir, output_root=output_dir)
    # The commit assembles the manifest from these records instead of reading the shards back.
    shard_records = {FileSystems.split(path)[1]: {"rows": rows, "bytes": size, "crc32c": crc}
                     for path, rows, crc, size in done.values()}
    crc, size = _record(FileSystems.join(output_dir, SCHEMA_FILE))
    # stats.json was written (maybe on another worker) from the dict this stage holds: its bytes follow from it.
    stats_crc, stats_size = text_record(stats_json(stats))
    records = write_records_text(shard_records, {SCHEMA_FILE: {"bytes": size, "crc32c": crc},
                                                 STATS_FILE: {"bytes": stats_size, "crc32c": stats_crc}})
    path = FileSystems.join(output_dir, WRITE_RECORDS_FILE)
    atomic_write_text(path, records, output_root=output_dir)
    take_record(path)  # the records' own record: nobody commits this temporary
    return {
        "shards": [done[i][0] for i in range(shards)],
        "num_rows": sum(rows for _, rows, *_ in done.values()),
        "schema": FileSystems.join(output_dir, SCHEMA_FILE),
        "stats": FileSystems.join(output_dir, STATS_FILE),
        "stats_features": sorted(stats["features"]),
    }


def _fit_to_rows(done: dict, shards: int, output_dir: str, suffix: str) -> tuple[dict, int]:
    """`(done, shards)`, with only the shards that got rows, renumbered, when the rows cannot fill `shards`."""
    rows = sum(value[1] for value in done.values())
    if rows >= shards:
        return done, shards
    filled = [index for index in sorted(done) if done[index][1] > 0]
    kept = max(1, len(filled))
    renumbered = {}
    for new, old in enumerate(filled):
        path, *rest = done[old]
        target = FileSystems.join(output_dir, shard_name(new, kept, suffix))
        FileSystems.rename([path], [target])
        renumbered[new] = (target, *rest)
    _LOGGER.warning("num_shards %d is more than the %d rows can fill: wrote %d shards", shards, rows, kept)
    return renumbered, kept


# A late update `(STATS_SECTIONS, {section: [entry dicts]})` adds top-level lists to stats.json, each sorted by
# its entries' "join" number (then their text): the order they arrive in is the runner's.
STATS_SECTIONS = "__stats_sections__"
# Late updates that describe the data, not the schema: they go to stats.json alone.
_STATS_ONLY_UPDATES = ("raw_values", "cross_overflow")


def _apply_late_updates(schema: Schema, stats: dict, updates, output_dir: str) -> tuple[Schema, dict]:
    """Schema fields known only once the data was seen (vocabulary sizes, OOV counts), merged in.

    An `oov_ids` count is also recorded in stats.json, beside the feature's other counts; `raw_values`
    (transforms.beam.raw_values) goes to stats.json only.
    """
    merged: dict[str, dict] = {}
    sections: dict[str, list] = {}
    for name, changes in updates:
        if name == STATS_SECTIONS:  # top-level stats.json lists, one entry per update (the joins' counts)
            for section, entries in changes.items():
                sections.setdefault(section, []).extend(entries)
            continue
        merged.setdefault(name, {}).update(changes)
    in_stats = {n: {k: c.pop(k) for k in _STATS_ONLY_UPDATES if k in c} for n, c in merged.items()}
    schema = _updated(schema, {n: c for n, c in merged.items() if c})
    for n, c in merged.items():
        if "oov_ids" in c:
            in_stats[n]["oov_ids"] = c["oov_ids"]
    counted = {n: c for n, c in in_stats.items() if c and n in stats.get("features", {})}
    if counted:
        stats = {**stats, "features": {n: ({**f, **counted[n]} if n in counted else f)
                                       for n, f in stats["features"].items()}}
    if sections:
        stats = {**stats, **{k: sorted(v, key=lambda e: (e.get("join", 0), json.dumps(e, sort_keys=True)))
                             for k, v in sections.items()}}
    if counted or sections:
        atomic_write_text(
            FileSystems.join(output_dir, STATS_FILE), stats_json(stats), output_root=output_dir
        )
    return schema, stats


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
    return _updated(infer_schema(schemas[0]) if schemas else Schema([]), updates)


def _updated(schema: Schema, updates: dict[str, dict]) -> Schema:
    for name, changes in updates.items():
        if name not in schema.names:
            raise ValueError(f"WriteShards: schema_updates names {name!r}, which the batches do not hold "
                             f"(they hold {schema.names})")
        schema = schema.replace(name, **changes)
    return schema


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
                _AssignShardsFn(self._num_shards, self._shuffle, self._seed, self._order_by), **assign_side
            ).with_output_types(pa.RecordBatch)
            | "Spill"
            >> beam.ParDo(SpillByKeyRange(self._output_dir, _ORDER, _SHARD)).with_output_types(tuple[int, str])
            | "GroupShards" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(
                _WriteShardFn(
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
            _finalize,
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
