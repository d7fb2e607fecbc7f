"""`make_dataset`: shards written by the Beam stage (or sparse_io) to training batches.

Which reader runs depends on the shard format:

| | Parquet shards | TFRecord shards |
|---|---|---|
| reader | Python (pyarrow in a `tf.py_function`) | graph-native (TFRecordDataset, parse_example) |
| tf.data service | no (needs the Python process) | yes |
| `tf.train.Checkpoint(iterator=...)` | yes | yes |
| explicit `InputState` (`start=`, `return_position=`) | yes | no |
| sharding | whole files, else row ranges | whole files, else every n-th record |
| shuffle | units each epoch + rows within units | files each epoch + a record buffer |
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from sparse_io.schema import FeatureSpec, Schema, weights_column
from transforms.tfdata.columns import Column, select_columns
from transforms.tfdata.coo import capacity_from_stats, load_stats, pad_to_capacity, to_coo
from transforms.tfdata.parquet_source import ALIGNMENT, ParquetSource
from transforms.tfdata.paths import list_files, read_schema, shard_format
from transforms.tfdata.sharding import resolve_worker
from transforms.tfdata.state import InputState
from transforms.tfdata.tfrecord_source import tfrecord_dataset

__all__ = ["make_dataset", "finish_batches", "OUTPUTS"]

OUTPUTS = ("coo", "ragged", "sparse")
POSITION = "__position__"
_ENDLESS = 1 << 62
_SUFFIXES = {"parquet": (".parquet",), "tfrecord": (".tfrecord", ".tfrecords")}


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
) -> tf.data.Dataset:
    """A `tf.data.Dataset` of `(features, label)` batches from Parquet or TFRecord shards.

    Args:
      path: a shard directory (as the Beam `WriteShards` or sparse_io writers
        leave it: `part-*.parquet` or `.tfrecord` plus schema.json), a glob
        pattern, or a list of files.
      batch_size: rows per batch, independent of the row-group size.
      features: feature names to deliver (default: every non-label feature).
      label: the label column (default: the schema's label), or False for
        elements that are the features dict alone.
      shuffle: Parquet: permute row-group slices every epoch and the rows
        inside each; TFRecord: permute files every epoch, then records
        through a `shuffle_buffer`.
      seed: makes the shuffle reproducible; a Parquet dataset resumed from a
        shuffled `InputState` needs the same seed.
      num_epochs: passes over the data (None: endlessly). Each epoch ends with
        its own partial batch unless `drop_remainder`.
      input_context: a `tf.distribute.InputContext` (from
        `distribute_datasets_from_function`); or give `num_shards` and `index`.
        Each worker reads a disjoint part: whole files when every worker can
        get one, else row ranges (Parquet) or every n-th record (TFRecord).
      output: "coo" (each sparse feature a `Coo(row_ids, col_ids, gains)`
        with the combiner and weights folded in), "ragged" (`[B, None]`
        RaggedTensors, weights under `f__weights`) or "sparse" (SparseTensors).
        Dense features are float32 `[B]`, NaN where missing.
      drop_remainder: drop each epoch's last partial batch; every shape is
        then static (with `capacities`, COO lengths too).
      deterministic: allow tf.data to reorder batches for speed when False.
      capacities: pad every COO feature to a static length (output="coo"):
        "stats" (the directory's stats.json), a path to a stats.json, a
        stats.json dict, or a dict feature -> int.
      combiner: "sum", "mean", "sqrtn", or a dict feature -> combiner.
      overflow, capacity_kind, dropped: see `pad_to_capacity`.
      start: resume at this `InputState` (Parquet).
      return_position: elements get a third part, the int64 `[4]` position
        after the batch; `InputState.from_tensor` makes it a `start` (Parquet).
      shuffle_buffer: records in the TFRecord shuffle buffer.
      format: "parquet" or "tfrecord" (default: from the file suffixes).
      schema: overrides the directory's schema.json.

    Returns:
      The dataset; its `element_spec` is exact: `[batch_size]` leading
      dimensions when `drop_remainder`, `[None]` otherwise.

    Raises:
      ValueError: bad arguments, no files, a column missing from the schema or
        the files, a worker that would read nothing, or a `start` from a
        different plan.

    The Parquet reader runs Python (pyarrow) per batch, not per row; see
    `parquet_source`. Use TFRecord shards for the tf.data service.

    Example:
      >>> ds = make_dataset("/data/shards", 4096, capacities="stats", drop_remainder=True)
      >>> features, label = next(iter(ds))
      >>> features["C1"].row_ids.shape
      TensorShape([...])
    """
    _check_args(batch_size, output, num_epochs, capacities, shuffle_buffer, overflow)
    if format is not None and format not in _SUFFIXES:
        raise ValueError(f"format must be 'parquet' or 'tfrecord', got {format!r}")
    suffixes = _SUFFIXES[format] if format else _SUFFIXES["parquet"] + _SUFFIXES["tfrecord"]
    files = list_files(path, suffixes)
    fmt = format or shard_format(files)
    directory = path if isinstance(path, str) and tf.io.gfile.isdir(path) else os.path.dirname(files[0])
    if schema is None:
        schema = read_schema(directory)
    if schema is None:
        if fmt != "parquet":
            raise ValueError(f"{directory}: no schema.json; TFRecord shards need one (or pass schema=)")
        schema = _schema_from_parquet(files[0])
    columns, label_column = select_columns(schema, features, label)
    shards, worker = resolve_worker(input_context, num_shards, index)
    caps = _capacities(capacities, directory, columns, batch_size, capacity_kind) if output == "coo" else None

    if fmt == "parquet":
        if shuffle and seed is None:
            if start is not None:
                raise ValueError("start: resuming a shuffled Parquet dataset needs the seed it was made with")
            seed = int(np.random.SeedSequence().entropy % (1 << 63))
        source = ParquetSource(
            files,
            columns,
            label_column,
            batch_size,
            shuffle=shuffle,
            seed=seed or 0,
            num_shards=shards,
            index=worker,
            drop_remainder=drop_remainder,
            start=start,
        )
        raw = _parquet_batches(source, num_epochs, columns, label_column, drop_remainder)
    else:
        if start is not None or return_position:
            raise ValueError(
                "start/return_position need Parquet shards; save TFRecord input with "
                "tf.train.Checkpoint(iterator=iter(dataset)) instead"
            )
        raw = tfrecord_dataset(
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
        )
    out = finish_batches(
        raw,
        columns,
        label_column,
        batch_size,
        output=output,
        drop_remainder=drop_remainder,
        deterministic=deterministic,
        capacities=caps,
        combiner=combiner,
        overflow=overflow,
        dropped=dropped,
        return_position=return_position,
    )
    options = tf.data.Options()
    # The reader's py_function is a pure function of the batch number, so the
    # iterator state (a counter and buffers) is the whole state to save.
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    options.deterministic = deterministic
    return out.with_options(options)


def _check_args(batch_size, output, num_epochs, capacities, shuffle_buffer, overflow) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
    if num_epochs is not None and (
        isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs < 1
    ):
        raise ValueError(f"num_epochs must be a positive integer or None, got {num_epochs!r}")
    if capacities is not None and output != "coo":
        raise ValueError("capacities pad COO batches: they need output='coo'")
    if not isinstance(shuffle_buffer, int) or shuffle_buffer < 1:
        raise ValueError(f"shuffle_buffer must be a positive integer, got {shuffle_buffer!r}")
    if overflow not in ("error", "drop"):
        raise ValueError(f"overflow must be 'error' or 'drop', got {overflow!r}")


def _capacities(capacities, directory: str, columns: Sequence[Column], batch_size: int, kind: str):
    if capacities is None:
        return None
    sparse = [c.name for c in columns if c.is_sparse]
    if isinstance(capacities, str):
        capacities = load_stats(directory if capacities == "stats" else capacities)
    if isinstance(capacities, Mapping) and "format_version" in capacities and "features" in capacities:
        return {name: capacity_from_stats(capacities, name, batch_size, kind=kind) for name in sparse}
    if not isinstance(capacities, Mapping):
        raise ValueError(f"capacities: expected 'stats', a path or a dict, got {type(capacities).__name__}")
    missing = sorted(set(sparse) - set(capacities))
    if missing:
        raise ValueError(f"capacities: no capacity for sparse feature(s) {missing}")
    return {name: int(capacities[name]) for name in sparse}


def _schema_from_parquet(path: str) -> Schema:
    """A schema guessed from a shard's Arrow schema when no schema.json exists.

    List columns are sparse features (weighted when a `f__weights` column
    exists), a scalar column named "label" is the label, other scalar columns
    are dense.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = pq.read_schema(path)
    names = set(arrow.names)
    specs = []
    for field in arrow:
        t = field.type
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            if field.name.endswith("__weights"):
                continue
            inner = t.value_type
            dtype = "int64" if pa.types.is_int64(inner) else "int32" if pa.types.is_int32(inner) else "string"
            specs.append(
                FeatureSpec(field.name, "sparse", dtype, weighted=weights_column(field.name) in names)
            )
        else:
            dtype = "int64" if pa.types.is_integer(t) else "float32"
            kind = "label" if field.name == "label" else "dense"
            specs.append(FeatureSpec(field.name, kind, dtype if kind == "label" else "float32"))
    return Schema(specs)


def _tensor(array: np.ndarray):
    if array.dtype == object:
        return array  # strings: py_function converts (and copies) them
    if array.ctypes.data % ALIGNMENT == 0 and array.flags.writeable and array.flags.c_contiguous:
        # Aliases the arena: no copy. Only for aligned memory (TF aborts otherwise).
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    return tf.convert_to_tensor(array)


def _parquet_batches(source: ParquetSource, num_epochs, columns, label, drop_remainder) -> tf.data.Dataset:
    """`range -> map(py_function(source.read))`, then the flat arrays regrouped per column."""
    dtypes = [tf.string if d == "string" else tf.as_dtype(d) for d in source.output_dtypes()]
    total = source.num_batches(num_epochs)

    def read(i):
        return [_tensor(a) for a in source.read(int(i))]

    rows = source.batch_size if drop_remainder else None
    splits_len = rows + 1 if rows is not None else None

    def regroup(*flat):
        flat = list(flat)
        out = {}
        at = 0
        for c in columns:
            if c.is_sparse:
                splits = tf.ensure_shape(flat[at], [splits_len])
                ids = tf.ensure_shape(flat[at + 1], [None])
                out[c.name] = tf.RaggedTensor.from_row_splits(ids, splits, validate=False)
                at += 2
                if c.weighted:
                    weights = tf.ensure_shape(flat[at], [None])
                    out[c.weights_name] = tf.RaggedTensor.from_row_splits(weights, splits, validate=False)
                    at += 1
            else:
                out[c.name] = tf.ensure_shape(flat[at], [rows])
                at += 1
        if label is not None:
            out[label.name] = tf.ensure_shape(flat[at], [rows])
            at += 1
        out[POSITION] = tf.ensure_shape(flat[at], [4])
        return out

    ds = tf.data.Dataset.range(_ENDLESS if total is None else total)
    ds = ds.map(lambda i: tuple(tf.py_function(read, [i], dtypes)))
    return ds.map(regroup)


def _to_sparse(ragged: tf.RaggedTensor) -> tf.SparseTensor:
    sparse = ragged.to_sparse()
    sparse.set_shape(ragged.shape)  # keep the static batch size
    return sparse


def _row_count(raw: dict, columns: Sequence[Column], label: Column | None):
    if label is not None:
        return tf.shape(raw[label.name], out_type=tf.int64)[0]
    c = columns[0]
    value = raw[c.name]
    if isinstance(value, tf.RaggedTensor):
        return value.nrows()
    return tf.shape(value, out_type=tf.int64)[0]


def finish_batches(
    raw: tf.data.Dataset,
    columns: Sequence[Column],
    label: Column | None,
    batch_size: int,
    *,
    output: str,
    drop_remainder: bool,
    deterministic: bool,
    capacities: Mapping[str, int] | None,
    combiner,
    overflow: str,
    dropped: tf.Variable | None,
    return_position: bool = False,
) -> tf.data.Dataset:
    """Turns batches of raw columns (ragged ids, dense, label) into the delivered elements.

    Shared by `make_dataset` and `make_log_dataset`, so both deliver the same
    structure: `(features, label)`, `features` alone when there is no label,
    plus the position when asked.
    """
    feature_keys = []
    for c in columns:
        feature_keys.append(c.name)
        if c.is_sparse and c.weighted:
            feature_keys.append(c.weights_name)

    def convert(raw_batch):
        feats = {k: raw_batch[k] for k in feature_keys}
        if output == "sparse":
            feats = {k: _to_sparse(v) if isinstance(v, tf.RaggedTensor) else v for k, v in feats.items()}
        elif output == "coo":
            feats = to_coo(feats, combiner, validate=False)
            if capacities:
                rows = batch_size if drop_remainder else _row_count(raw_batch, columns, label)
                feats = pad_to_capacity(
                    feats,
                    capacities,
                    sample_count=rows,
                    batch_size=batch_size,
                    overflow=overflow,
                    dropped=dropped,
                )
        parts = [feats]
        if label is not None:
            parts.append(raw_batch[label.name])
        if return_position:
            parts.append(raw_batch[POSITION])
        return tuple(parts) if len(parts) > 1 else feats

    ds = raw.map(convert, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds.prefetch(tf.data.AUTOTUNE)
