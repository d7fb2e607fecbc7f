"""TFRecord shards pinned by their records: each open checks the file still holds what was verified.

The TFRecord reader is graph-native (it must run on tf.data service workers),
so it cannot keep a Python file handle open, and a path like /proc/self/fd/N
means nothing in another process. A pin is therefore data the graph carries:
per shard, its record count and a digest of its records (a chained
FarmHash fingerprint, `tf.fingerprint`, over every record in order). Each
time the reader opens a shard (every epoch) it first reads the file through
once more to recompute both, and reads its records only when they match;
otherwise the iterator fails with `ChangedFileError: <path>: replaced or
changed since it was verified ...` (inside a tf.errors.OpError), before any
record of the file reaches a batch. A shard rewritten in place with other
valid records of the same size is caught, as is one renamed over it.

The cost: the pin is computed when the dataset is made (one read of every
shard), and every epoch reads each shard twice (the check, then the
records); the second read of a local file mostly comes from the page cache.
A file changed between the check and the read of the same epoch (a window of
one file's read) is not caught.

Example:
  >>> import os, tempfile
  >>> path = os.path.join(tempfile.mkdtemp(), "part-00000-of-00001.tfrecord")
  >>> with tf.io.TFRecordWriter(path) as w:
  ...     w.write(b"a record")
  >>> pin = pin_records([path])
  >>> [r.numpy() for r in pinned_records(pin, 0)]
  [b'a record']
  >>> with tf.io.TFRecordWriter(path) as w:
  ...     w.write(b"b record")
  >>> [r.numpy() for r in pinned_records(pin, 0)]  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ...
  tensorflow...InvalidArgumentError: ...ChangedFileError: ...part-00000-of-00001.tfrecord: replaced or changed...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import tensorflow as tf

from sparse_io.pins import ShardPin

__all__ = ["RecordPin", "pin_records", "pinned_records", "records_digest"]

# Records fingerprinted per step of the digest: a fixed size, so the digest does not depend on how the file is read.
_CHUNK = 1024


def _fold(state: tuple[tf.Tensor, tf.Tensor], records: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(count, digest uint8 [8]) after `records` ([n] strings): the digest fingerprints its old value and theirs."""
    count, digest = state
    prints = tf.reshape(tf.fingerprint(records), [-1])  # uint8 [8 n]
    digest = tf.fingerprint(tf.reshape(tf.concat([digest, prints], 0), [1, -1]))[0]
    return count + tf.size(records, out_type=tf.int64), digest


def records_digest(path: str | tf.Tensor, compression_type: str | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """(int64 record count, int64 digest) of the TFRecord file at `path` (graph-native; eager gives tensors).

    Raises (when run) tf.errors.DataLossError for a damaged record, NotFoundError for a missing file.
    """
    chunks = tf.data.TFRecordDataset(path, compression_type=compression_type).batch(_CHUNK)
    count, digest = chunks.reduce((tf.constant(0, tf.int64), tf.zeros([8], tf.uint8)), _fold)
    return count, tf.bitcast(digest, tf.int64)


@dataclasses.dataclass(frozen=True)
class RecordPin:
    """Shards as verified: their paths, record counts and record digests, in one order (`pinned_records`' numbers)."""

    paths: tuple[str, ...]
    rows: tuple[int, ...]
    digests: tuple[int, ...]
    compression_type: str | None = None


def pin_records(
    paths: Sequence[str], shard_pins: Sequence[ShardPin] | None = None, compression_type: str | None = None
) -> RecordPin:
    """Reads each shard once and pins its records; `shard_pins` (from `sparse_io.pins.pin_shards`) are checked too.

    Raises:
      CorruptFileError: a shard holding other rows than its manifest lists.
      ChangedFileError: a shard replaced while it was being pinned.
      tf.errors.DataLossError: a damaged record.
    """
    rows, digests = [], []
    for i, path in enumerate(paths):
        count, digest = records_digest(path, compression_type)
        if shard_pins is not None:
            shard_pins[i].check()
            shard_pins[i].check_rows(int(count))
        rows.append(int(count))
        digests.append(int(digest))
    return RecordPin(tuple(paths), tuple(rows), tuple(digests), compression_type)


def pinned_records(pin: RecordPin, number: int | tf.Tensor) -> tf.data.Dataset:
    """The records of shard `number` of `pin`, read only after the file was checked against its pin.

    Graph-native (use it inside `flat_map`/`interleave` over file numbers):
    the graph carries the pin as constants and nothing local to this process.

    Raises (when iterated) tf.errors.InvalidArgumentError with
    "ChangedFileError: <path>: replaced or changed since it was verified ..."
    when the file holds other records than it did when pinned.
    """
    paths = tf.constant(pin.paths, tf.string)
    path = tf.gather(paths, number)
    count, digest = records_digest(path, pin.compression_type)
    same = tf.logical_and(
        tf.equal(count, tf.gather(tf.constant(pin.rows, tf.int64), number)),
        tf.equal(digest, tf.gather(tf.constant(pin.digests, tf.int64), number)),
    )
    message = tf.strings.join([
        "ChangedFileError: ", path, ": replaced or changed since it was verified (its records differ from those "
        "pinned when the dataset was made: another run wrote this output?); make the dataset again\n",
    ])  # The line ends the message: programs report it as one line (pipelines.errors.cli_errors).
    check = tf.debugging.Assert(same, [message])
    with tf.control_dependencies([check]):
        path = tf.identity(path)
    return tf.data.TFRecordDataset(path, compression_type=pin.compression_type)
