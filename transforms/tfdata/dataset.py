"""`make_dataset`: shards written by the Beam stage (or sparse_io) to training batches.

Which reader runs depends on the shard format (docs/training_input.md has the full table):

| | Parquet or Arrow shards | TFRecord shards |
|---|---|---|
| reader | Python (pyarrow in a `tf.py_function`)¹; Arrow as COO: an op³ | graph-native (parse_example) |
| COO | numpy while the batch is assembled (`numpy_coo`) | `ops.convert_to_coo`, features grouped |
| tf.data service (`distribute`) | Arrow read by the op³; else refused (a py_function) | yes, without `dropped` |
| service split by files (`distributed_epoch`) | the op³: by record batches, `num_epochs=1` | with `num_epochs=1` |
| `tf.train.Checkpoint(iterator=...)` | yes | yes |
| explicit `InputState` (`start=`, `return_position=`) | yes | no |
| sharding² | whole files, else row ranges | whole files, else every n-th record |
| shuffle | units each epoch + rows within units | files each epoch + a record buffer |

² With `balance="rows"`, always row (record) ranges: the same rows per worker +-1.

³ Arrow shards read as COO (the default output) go through the native dataset op
(`columnar.arrow_op`: no Python in the graph, every option above); CSR output
(`ragged`, `sparse`), remote shards, columns the kernels cannot read (a cast,
nulls in ids or labels), features derived at read or no native library: the
Python reader.
`dataset._sparseflow_parquet_source.reader` says which ("op", or "python (why)").

¹ Parquet row groups are decoded on every read; Arrow record batches are
memory-mapped and read without decoding. Parquet and Arrow shards of the
same rows, written with the same unit size
(row group / record batch), give the same batches, element by element.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import tensorflow as tf

from sparse_io.formats import SHARD_FORMATS, SHARD_SUFFIXES
from sparse_io.manifest_format import check_verify_level
from sparse_io.manifest_verify import verify_directory, verify_paths
from sparse_io.pins import pin_shards
from sparse_io.schema import Schema
from sparse_io.shard_files import COLUMNAR_FORMATS
from transforms.tfdata.columnar.arrow_op import OpElement
from transforms.tfdata.columnar.source import columnar_batches
from transforms.tfdata.core.columns import select_columns
from transforms.tfdata.core.files import list_files, read_schema, shard_format
from transforms.tfdata.core.finish import column_batch, deliver, finish_batches
from transforms.tfdata.core.options import BatchOptions, OutputOptions
from transforms.tfdata.core.sharding import check_balance, resolve_worker
from transforms.tfdata.core.state import InputState
from transforms.tfdata.service import remember
from transforms.tfdata.tfrecord.pins import pin_records
from transforms.tfdata.tfrecord.source import tfrecord_dataset

__all__ = ["make_dataset"]

_SUFFIXES = {f: tuple(s for s, g in SHARD_SUFFIXES.items() if g == f) for f in SHARD_FORMATS}


def make_dataset(
    path: str | Sequence[str],
    batch_size: int,
    *,
    features: Sequence[str] | None = None,
    label: str | None | bool = None,
    shuffle: bool = True,
    seed: int | None = None,
    num_epochs: int | None = 1,
    input_context: tf.distribute.InputContext | None = None,
    num_shards: int | None = None,
    index: int | None = None,
    output: str = "coo",
    drop_remainder: bool = False,
    deterministic: bool = True,
    capacities=None,
    combiner: str | Mapping[str, str] = "sum",
    overflow: str = "error",
    capacity_kind: str = "max",
    dropped: tf.Variable | None = None,
    start: InputState | None = None,
    return_position: bool = False,
    shuffle_buffer: int = 16384,
    format: str | None = None,
    schema: Schema | None = None,
    verify: str = "sizes",
    balance: str = "files",
) -> tf.data.Dataset:
    r"""A `tf.data.Dataset` of `(features, label)` batches from Parquet, TFRecord or Arrow shards.

    Args:
      path: a shard directory (as the Beam `WriteShards` or sparse_io writers
        leave it: `part-*.parquet`, `.tfrecord` or `.arrow` plus schema.json), a glob
        pattern, or a list of files.
      batch_size: rows per batch, independent of the row-group size.
      features: feature names to deliver (default: every non-label feature).
      label: the label column (default: the schema's label), or False for
        elements that are the features dict alone.
      shuffle: Parquet/Arrow: permute row-group (record-batch) slices every
        epoch and the rows inside each; TFRecord: permute files every epoch,
        then records through a `shuffle_buffer`.
      seed: makes the shuffle reproducible. None (the default): the dataset
        draws a seed when it is made, so each process (and each
        `make_dataset` call) reads its own order; the drawn seed is kept in
        the iterator's state, so an iterator saved with
        `tf.train.Checkpoint(iterator=...)` and restored in a new process
        goes on in exactly the order it was reading. A Parquet dataset
        resumed from a shuffled `InputState` (`start`) needs the seed it was
        made with (shuffle without a seed and `start` raises ValueError); so
        does an Arrow one.
      num_epochs: passes over the data (None: endlessly). Each epoch ends with
        its own partial batch unless `drop_remainder`. With 1 (TFRecord) the
        pipeline starts from the list of files, so `transforms.distribute`
        can split the epoch between tf.data service workers by files.
      input_context: a `tf.distribute.InputContext` (from
        `distribute_datasets_from_function`); or give `num_shards` and `index`.
        Each worker reads a disjoint part: whole files when every worker can
        get one, else row ranges (Parquet, Arrow) or every n-th record (TFRecord).
      num_shards: the number of input workers, a positive int, given with
        `index` instead of `input_context` (default: one worker reading
        everything). Giving only one of the two, or both with
        `input_context`, raises ValueError.
      index: this worker's number, in `[0, num_shards)`.
      balance: how the rows are split between input workers: "files" (the
        default: whole files where every worker gets one, else row ranges)
        or "rows" (always contiguous row ranges of the files laid end to
        end: every worker reads the same number of rows +-1, so the same
        number of batches per epoch +-1, whatever the file sizes; each row
        once per epoch across the workers). Use "rows" for synchronous
        multi-worker training over uneven files, where every step waits for
        the slowest worker. A Parquet/Arrow `start` resumes only the plan it
        was saved from (the same `balance` and workers).
      output: "coo" (each sparse feature a `Coo(row_ids, col_ids, gains, sample_count)`
        with the combiner and weights folded in), "ragged" (`[B, None]`
        RaggedTensors, weights under `f__weights`) or "sparse" (SparseTensors).
        Dense features are `[B]`: float32 (float64 for float64 columns) with
        NaN where missing, or int64 for integer columns (timestamps, counts),
        exact, with `transforms.MISSING_INT` (the int64 minimum) where missing.
      drop_remainder: drop each epoch's last partial batch; every shape is
        then static (with `capacities`, COO lengths too).
      deterministic: allow tf.data to reorder batches for speed when False.
      capacities: pad every COO feature to a static length (output="coo"):
        "stats" (the directory's stats.json), a path to a stats.json, a
        stats.json dict, or a dict feature -> int.
      combiner: "sum", "mean", "sqrtn", or a dict feature -> combiner.
      overflow: what a batch that needs more COO entries for a feature than
        its capacity does (with `capacities`): "error" (the default: an
        InvalidArgumentError when that batch is read) or "drop" (keep the
        feature's first `capacity` entries, in row order, and count the rest
        in `dropped`). Any other value raises ValueError, with or without
        `capacities`.
      capacity_kind: which stats.json capacity `capacities` reads: "max"
        (the default: no batch of `batch_size` rows overflows it; derived
        when stats.json has no entry for `batch_size`) or "p99_9" (smaller,
        for overflow="drop"; needs an entry for exactly `batch_size`). Not
        used with a dict feature -> int; an unknown kind raises ValueError
        whether or not stats.json is read.
      dropped: an int64 scalar `tf.Variable` that each batch adds its
        dropped COO entries to (overflow="drop" with `capacities`); None
        (the default) counts nothing; anything else raises ValueError.
      start: resume at this `InputState` (Parquet, Arrow).
      return_position: elements get a third part, the int64 `[4]` position
        after the batch; `InputState.from_tensor` makes it a `start` (Parquet, Arrow).
      shuffle_buffer: records in the TFRecord shuffle buffer.
      format: "parquet", "tfrecord" or "arrow" (default: from the file suffixes).
      schema: overrides the directory's schema.json.
      verify: how much of the directory's `_MANIFEST.json` is checked before
        reading (`sparse_io.manifest`): "sizes" (the default: every file there
        with its size, no other), "checksums" (and every byte), "none" (for
        shards written without one). A glob or file list is checked against
        the manifests of the directories it names (the named shards and every
        other file listed: schema.json, stats.json, vocab/). The shards are
        then pinned: Parquet and Arrow (`sparse_io.pins`): each open checks the
        file is the one verified (size, mtime, inode) and holds the rows its
        manifest lists; TFRecord (`tfrecord.pins`, graph-native, so it runs
        under the tf.data service): the shards are read once here, and each
        epoch checks a shard's record count and records' digest before its
        records are read. Parquet pages, Arrow record batches and TFRecord
        records are checked against their checksums as they are read, at
        every level.

    Returns:
      The dataset; its `element_spec` is exact: `[batch_size]` leading
      dimensions when `drop_remainder`, `[None]` otherwise.

    Raises:
      ManifestError: (a ValueError) no manifest, or files that differ from it.
      CorruptFileError: (a ValueError) a shard holding other rows than its
        manifest lists; while iterating (inside a tf.errors.OpError naming
        it), a damaged Parquet page or Arrow record batch.
      ChangedFileError: (a ManifestError) a shard replaced since it was
        verified; while iterating, inside a tf.errors.OpError naming it.
      ValueError: bad arguments, no files, a column missing from the schema or
        the files, a worker that would read nothing (Parquet: fewer rows than
        workers), or a `start` from a different plan.
      tf.errors.InvalidArgumentError: while iterating, a batch that
        overflows a capacity with overflow="error".

    Arrow shards read as COO are read by a native dataset op that writes
    each element whole (no Python in the graph; it runs under the tf.data
    service); Parquet shards, and Arrow read as "ragged" or "sparse", by
    Python (pyarrow) per batch, not per row: see `columnar.source`,
    `columnar.arrow_op` and `columnar.reader`. A feature schema.json marks
    `at_read` (a quantile bucket or scale the ingest did not store) is
    computed from its source column as each unit is read, by the Python
    reader (so such Arrow datasets do not use the op); TFRecord refuses it.

    Example (an ingest of 64 Criteo lines with one C1 id each, so C1's
    capacity for 16 rows in stats.json is 16):
      >>> import os, tempfile
      >>> from transforms.testing import ingest_in_memory
      >>> shards = os.path.join(tempfile.mkdtemp(), "train")
      >>> lines = ["\t".join([str(i % 2)] + ["1"] * 13 + [f"{i:08x}"] * 26) for i in range(64)]
      >>> _ = ingest_in_memory(lines, {"input": {"format": "criteo"}, "features": {"C*": {"hash_buckets": 100}}},
      ...                      output_dir=shards)
      >>> ds = make_dataset(shards, 16, capacities="stats", drop_remainder=True)
      >>> features, label = next(iter(ds))
      >>> features["C1"].row_ids.shape, label.shape
      (TensorShape([16]), TensorShape([16]))
    """
    batching = BatchOptions(batch_size, num_epochs, drop_remainder, deterministic, shuffle_buffer)
    outputs = OutputOptions(output, combiner, capacities, overflow, capacity_kind, dropped)
    if format is not None and format not in _SUFFIXES:
        raise ValueError(f"format must be one of {', '.join(SHARD_FORMATS)}, got {format!r}")
    suffixes = _SUFFIXES[format] if format else tuple(SHARD_SUFFIXES)
    check_verify_level(verify)
    check_balance(balance)
    files = list_files(path, suffixes)
    fmt = format or shard_format(files)
    whole = isinstance(path, str) and tf.io.gfile.isdir(path)
    directory = path if whole else os.path.dirname(files[0])
    if whole:
        verify_directory(path, verify)
    else:
        verify_paths(files, verify)
    # Pinned as verified: every later open checks it is still the same file (an --overwrite since is an error).
    # TFRecord shards are read by a graph-native reader, so their pin is the records' digest the graph carries.
    pins = pin_shards(files, verify)
    if schema is None:
        schema = read_schema(directory)
    if schema is None:
        if fmt not in COLUMNAR_FORMATS:
            raise ValueError(f"{directory}: no schema.json; TFRecord shards need one (or pass schema=)")
        schema = _schema_from_shard(files[0], fmt)
    columns, label_column = select_columns(schema, features, label)
    shards, worker = resolve_worker(input_context, num_shards, index)
    caps = outputs.capacities_for(columns, batch_size, directory)

    if output == "coo":
        strings = [c.name for c in columns if c.is_sparse and c.dtype == "string"]
        if strings:
            raise ValueError(
                f"feature(s) {strings} hold string ids; output='coo' needs integer ids "
                "(hash them in the Beam stage, or read output='ragged' and apply hash_ids)"
            )
    combiners = outputs.combiners(columns)
    whole_files = True  # input workers read whole files (Parquet, Arrow: files or row ranges, never refused)
    if fmt in COLUMNAR_FORMATS:
        raw, to_raw_batch, source = columnar_batches(
            files,
            columns,
            label_column,
            batching,
            combiners,
            coo=output == "coo",
            shuffle=shuffle,
            seed=seed,
            start=start,
            num_shards=shards,
            index=worker,
            shard_format=fmt,
            pins=pins,
            balance=balance,
            element=OpElement(caps, overflow, return_position, batching.static_rows)
            if output == "coo"
            else None,
            dropped=dropped,
        )
    else:
        at_read = [c.name for c in columns if c.derived is not None]
        if at_read:
            raise ValueError(f"feature(s) {at_read} are derived at read (schema.json's at_read), which the TFRecord "
                             "reader cannot do; read Parquet or Arrow shards")
        if start is not None or return_position:
            raise ValueError(
                "start/return_position need Parquet or Arrow shards; save TFRecord input with "
                "tf.train.Checkpoint(iterator=iter(dataset)) instead"
            )
        raw, whole_files = tfrecord_dataset(
            files,
            columns,
            label_column,
            batch_size,
            shuffle=shuffle,
            seed=seed,
            num_epochs=num_epochs,
            num_shards=shards,
            index=worker,
            drop_remainder=drop_remainder,
            deterministic=deterministic,
            shuffle_buffer=shuffle_buffer,
            pin=pin_records(files, pins),
            balance=balance,
        )
        to_raw_batch = column_batch(columns, label_column, combiners)
    if to_raw_batch is None:  # the native Arrow reader wrote the delivered elements
        out = deliver(raw, batching, external_state=dropped is not None)
    else:
        out = finish_batches(
            raw,
            to_raw_batch,
            columns,
            batching,
            outputs,
            capacities=caps,
            has_label=label_column is not None,
            return_position=return_position,
        )
    if fmt in COLUMNAR_FORMATS:
        # The reader's py_function holds the source weakly (see columnar_batches); the dataset,
        # which every dataset derived from it and every iterator over it references, holds it.
        out._sparseflow_parquet_source = source
    # transforms.distribute refuses Parquet and Arrow (their py_function lives only here) and counters, and
    # splitting by files where the files do not lead the pipeline or the shard is every n-th record.
    reader = source.reader if fmt in COLUMNAR_FORMATS else ""
    return remember(out, fmt, {"dropped": dropped}, num_epochs=num_epochs, whole_files=whole_files, reader=reader)


def _schema_from_shard(path: str, shard_format: str) -> Schema:
    """A schema guessed from a shard's Arrow schema when no schema.json exists (`Schema.from_arrow`).

    Columns no feature can describe are left out: only the selected ones must be readable.
    """
    from sparse_io.shard_files import open_shard

    with open_shard(path, shard_format) as shard:
        return Schema.from_arrow(shard.schema_arrow, skip_unsupported=True)
