"""The graph-native reader behind `make_dataset` for TFRecord shards.

TFRecordDataset -> (shuffle) -> batch -> `tf.io.parse_example` with
`RaggedFeature`s: every step is a tf.data op, so the pipeline runs inside the
tf.data service, can be saved with `tf.train.Checkpoint(iterator=...)`, and
needs no Python at run time. Records are the shard contract's
`tf.train.Example`s, one per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from transforms.tfdata.core.columns import MISSING_INT, Column, dense_dtype
from transforms.tfdata.core.epochs import (
    draw_seed,
    epoch_seed,
    file_order,
    over_epochs,
    plain,
    seed_in_state,
    seeded_shuffle,
)
from transforms.tfdata.core.sharding import plan_units, split_files
from transforms.tfdata.tfrecord.pins import RecordPin, pin_records, pinned_records

__all__ = ["tfrecord_dataset", "parse_spec"]

_ID_DTYPES = {"int64": tf.int64, "int32": tf.int64, "string": tf.string}


def parse_spec(columns: Sequence[Column], label: Column | None) -> dict:
    """The `tf.io.parse_example` features spec for the contract's Examples."""
    spec = {}
    for c in columns:
        if c.is_sparse:
            spec[c.name] = tf.io.RaggedFeature(_ID_DTYPES[c.dtype], row_splits_dtype=tf.int64)
            if c.weighted:
                spec[c.weights_name] = tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64)
        else:
            dtype = tf.int64 if dense_dtype(c.dtype) == "int64" else tf.float32
            spec[c.name] = tf.io.RaggedFeature(dtype, row_splits_dtype=tf.int64)
    if label is not None:
        dtype = tf.int64 if label.dtype in ("int64", "int32") else tf.float32
        spec[label.name] = tf.io.FixedLenFeature([], dtype)
    return spec


def _check_rows(ok: tf.Tensor, message: str) -> tf.Operation:
    """An assertion that names the first row where `ok` is False."""
    first = tf.argmin(tf.cast(ok, tf.int32), output_type=tf.int64)
    return tf.debugging.Assert(tf.reduce_all(ok), [message, "first offending row of the batch:", first])


def parse_batch(serialized: tf.Tensor, columns: Sequence[Column], label: Column | None) -> dict:
    """Parses a batch of serialized Examples into one dict of columns.

    Sparse `f` -> `[n, None]` RaggedTensor of ids (row_splits int64) and,
    when weighted, `f__weights` -> float32 RaggedTensor with the same
    row_splits; dense `f` -> float32 `[n]`, NaN where the Example holds no
    value (an integer column: int64, `MISSING_INT` where missing); the label (under its name) -> `[n]`.

    Raises (at run time) InvalidArgumentError naming the feature and the
    first offending row: weights whose row lengths differ from the ids', a
    dense feature with more than one value, or a missing label.
    """
    parsed = tf.io.parse_example(serialized, parse_spec(columns, label))
    checks = []
    features = {}
    for c in columns:
        value = parsed[c.name]
        if c.is_sparse:
            if c.dtype == "int32":
                value = value.with_flat_values(tf.cast(value.flat_values, tf.int32))
            features[c.name] = value
            if c.weighted:
                weights = parsed[c.weights_name]
                checks.append(
                    _check_rows(
                        tf.equal(value.row_lengths(), weights.row_lengths()),
                        f"feature {c.name!r}: check 'weights row lengths' failed: "
                        f"{c.weights_name} has a different number of values than the ids",
                    )
                )
                features[c.weights_name] = weights
        else:
            lengths = value.row_lengths()
            checks.append(
                _check_rows(
                    lengths <= 1,
                    f"feature {c.name!r}: check 'one value per row' failed: a dense feature holds 0 or 1 values",
                )
            )
            missing = MISSING_INT if value.dtype == tf.int64 else float("nan")
            first = value.to_tensor(default_value=missing, shape=[None, 1])[:, 0]
            features[c.name] = first
    if label is not None:
        y = parsed[label.name]
        features[label.name] = tf.cast(y, tf.int32) if label.dtype == "int32" else y
    if not checks:
        return features
    with tf.control_dependencies(checks):
        return {k: tf.identity(v) if isinstance(v, tf.Tensor) else _ragged_identity(v) for k, v in features.items()}


def _ragged_identity(r: tf.RaggedTensor) -> tf.RaggedTensor:
    return r.with_flat_values(tf.identity(r.flat_values))


def tfrecord_dataset(
    files: Sequence[str],
    columns: Sequence[Column],
    label: Column | None,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int | None,
    num_epochs: int | None,
    num_shards: int,
    index: int,
    drop_remainder: bool,
    deterministic: bool,
    shuffle_buffer: int,
    compression_type: str | None = None,
    pin: RecordPin | None = None,
    balance: str = "files",
) -> tuple[tf.data.Dataset, bool]:
    """This worker's batches as dicts of columns (see `parse_batch`), graph-native; and whether it reads whole files.

    With at least as many non-empty files as workers each worker reads whole
    files (the second value is True); otherwise every worker reads the files
    in the same order and keeps every `num_shards`-th record
    (`Dataset.shard`), so the union is still each record once (False).
    With `balance="rows"` every worker reads its own contiguous range of
    the records (the files laid end to end, `sharding.plan_units`), the same
    count +-1, however uneven the files (False: not whole files).
    Every shard is read through `pinned_records`: each epoch checks that it
    still holds the records pinned (`pin`, made here from `files` when not
    given) before any of them is read.
    Shuffling permutes the files each epoch (when each worker has whole
    files) and then records through a buffer of `shuffle_buffer`, with seeds
    derived from `seed` and the epoch number. Without a `seed` one is drawn
    here and kept in the iterator's state, so a checkpoint restores the same
    order (`seed_in_state`, `file_order`).
    Each epoch ends with its own partial batch unless `drop_remainder`.

    With `num_epochs=1` the first source dataset is the list of files (the
    file numbers of `file_order`, or the `TFRecordDataset` of the files),
    so the tf.data service can split the epoch between its workers by
    files; with more epochs it is the range of epochs (`over_epochs`).
    """
    if pin is None:
        pin = pin_records(files, compression_type=compression_type)
    mine = None if balance == "rows" else split_files([rows > 0 for rows in pin.rows], num_shards, index)
    # balance="rows": this worker's record range of the files laid end to end, as (file, skip, take) units.
    units = plan_units([[rows] for rows in pin.rows], num_shards, index, "rows")[0] if balance == "rows" else []
    unit_files = tf.constant([u.file for u in units], tf.int64)
    unit_starts = tf.constant([u.start for u in units], tf.int64)
    unit_rows = tf.constant([u.num_rows for u in units], tf.int64)

    def shard(number: tf.Tensor) -> tf.data.Dataset:
        return pinned_records(pin, number)

    def unit(n: tf.Tensor) -> tf.data.Dataset:
        return shard(tf.gather(unit_files, n)).skip(tf.gather(unit_starts, n)).take(tf.gather(unit_rows, n))

    def one_epoch(seed: int | tf.Tensor | None, epoch: int | tf.Tensor) -> tf.data.Dataset:
        if balance == "rows" and shuffle:
            # The units in a new order each epoch (then the record buffer), as whole files are.
            picked = file_order(len(units), seed, epoch).map(plain(lambda _, n: n))
            records = picked.interleave(
                unit,
                cycle_length=max(1, min(len(units), 4)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=deterministic,
            )
        elif balance == "rows":
            records = tf.data.Dataset.range(len(units)).flat_map(unit)
        elif mine is not None and shuffle:
            numbers = tf.constant(mine, tf.int64)
            picked = file_order(len(mine), seed, epoch).map(plain(lambda _, n: tf.gather(numbers, n)))
            records = picked.interleave(
                shard,
                cycle_length=min(len(mine), 4),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=deterministic,
            )
        elif mine is not None:
            # Unshuffled: file after file, in name order.
            numbers = tf.constant(mine, tf.int64)
            records = tf.data.Dataset.range(len(mine)).map(plain(lambda n: tf.gather(numbers, n))).flat_map(shard)
        else:
            # Every worker must see the records in the same order for shard() to split them.
            records = tf.data.Dataset.range(len(files)).flat_map(shard).shard(num_shards, index)
        if shuffle:
            records = seeded_shuffle(records, shuffle_buffer, epoch_seed(seed, epoch, 1))
        return records.batch(batch_size, drop_remainder=drop_remainder)

    if num_epochs == 1:
        # No epoch loop: the files lead the pipeline. An unseeded shuffle keeps its drawn seed in
        # the iterator's state through file_order's scan and the record shuffle's saved seeds.
        batches = one_epoch(draw_seed() if shuffle and seed is None else seed, 0)
    else:

        def epochs(seed: int | tf.Tensor | None) -> tf.data.Dataset:
            return over_epochs(num_epochs, lambda epoch: one_epoch(seed, epoch))

        batches = seed_in_state(draw_seed(), epochs) if shuffle and seed is None else epochs(seed)
    parsed = batches.map(
        plain(lambda serialized: parse_batch(serialized, columns, label)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )
    return parsed, mine is not None
