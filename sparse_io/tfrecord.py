"""TFRecord shards of `tf.train.Example`, one per row, for training code that reads Examples.

Writing needs no TensorFlow: Examples are encoded for a whole batch at once
(`sparse_io.example_encoding`) and framed as TFRecords here (length, masked
CRC32C of the length, data, masked CRC32C of the data). The CRC of each
record's data is the one per-row call left, made in C by `google_crc32c`;
the length CRCs are computed for all rows at once with numpy.

Reading back imports TensorFlow on first use and parses Examples a batch at
a time with `tf.io.parse_example`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import google_crc32c
import numpy as np
import pyarrow as pa

from sparse_io import example_encoding
from sparse_io.atomic import atomic_output
from sparse_io.errors import CorruptFileError
from sparse_io.example_encoding import _concat, _from_lengths, _Ragged
from sparse_io.schema import Schema, weights_column
from sparse_io.shard_batches import conform_batch

__all__ = ["encode_tfrecords", "frame_records", "write_tfrecord_shard", "read_tfrecord_shard"]

_MASK_DELTA = 0xA282EAD8
_CASTAGNOLI = 0x82F63B78


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_CASTAGNOLI), table >> 1).astype(np.uint32)
    return table


_CRC_TABLE = _crc_table()


def _crc32c_rows(rows: np.ndarray) -> np.ndarray:
    """CRC32C of each row of a uint8 `[n, k]` matrix (for the fixed 8-byte length headers)."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        crc = _CRC_TABLE[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)


def _masked(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint64)
    rotated = ((crc >> np.uint64(15)) | (crc << np.uint64(17))) & np.uint64(0xFFFFFFFF)
    return ((rotated + np.uint64(_MASK_DELTA)) & np.uint64(0xFFFFFFFF)).astype("<u4")


def frame_records(records: pa.Array) -> bytes:
    """TFRecord framing of a binary array of records: the bytes of a TFRecord file holding them."""
    n = len(records)
    if n == 0:
        return b""
    width = np.int64 if pa.types.is_large_binary(records.type) else np.int32
    stored = np.frombuffer(records.buffers()[1], dtype=width)[records.offset : records.offset + n + 1]
    offsets = stored.astype(np.int64)
    buffer = records.buffers()[2]
    raw = (buffer.to_pybytes() if buffer is not None else b"")[offsets[0] : offsets[-1]]
    offsets -= offsets[0]
    lengths = np.diff(offsets)
    header = lengths.astype("<u8").view(np.uint8).reshape(n, 8)
    header_crc = _masked(_crc32c_rows(header))
    data_crc = np.fromiter(
        (google_crc32c.value(raw[o:e]) for o, e in zip(offsets[:-1].tolist(), offsets[1:].tolist())),
        dtype=np.uint32,
        count=n,
    )
    fours = np.arange(n + 1, dtype=np.int64) * 4
    framed = _concat(
        [
            _Ragged(np.arange(n + 1, dtype=np.int64) * 8, header.reshape(-1)),
            _Ragged(fours, header_crc.view(np.uint8)),
            _from_lengths(lengths, np.frombuffer(raw, dtype=np.uint8)),
            _Ragged(fours, _masked(data_crc).view(np.uint8)),
        ]
    )
    return framed.data.tobytes()


def encode_tfrecords(batch: pa.RecordBatch, schema: Schema) -> np.ndarray:
    """The bytes of a TFRecord file holding one `tf.train.Example` per row of `batch` (uint8 [n]).

    The same bytes as `frame_records(encode_examples(batch, schema))`, made
    in one pass where the native encoder runs (`sparse_io.example_encoding`).

    Raises:
      ValueError: as `encode_examples`.
    """
    columns = example_encoding._columns(batch, schema)
    if example_encoding._native() is None:
        example = example_encoding._encode_numpy(batch, columns)
        framed = frame_records(example_encoding._binary_array(example.offsets, example.data))
        return np.frombuffer(framed, dtype=np.uint8)
    return example_encoding._encode_native(batch, columns, framed=True)[1]


def write_tfrecord_shard(
    path: str, batches: Iterable[pa.RecordBatch | pa.Table], schema: Schema, *, output_root: str | None = None
) -> int:
    """Writes one `tf.train.Example` per row to a TFRecord file at `path`, atomically.

    Sparse `f` -> int64_list (bytes_list for string ids), `f__weights` ->
    float_list, dense -> float_list (int64_list for int dtypes) with 0
    (missing) or 1 value, label -> int64_list or float_list. Returns the row
    count; no rows still writes an (empty) file.

    `output_root`: the output directory `path` must stay in, symbolic links
    followed (see `sparse_io.atomic`); pass it whenever it is known.

    Raises:
      ValueError: a batch lacks a column, has an uncastable one, or a null
        inside a list; nothing is left at `path` then.
      PermissionError: `path` is a symbolic link or leads out of `output_root`.
    """
    rows = 0
    with atomic_output(path, output_root=output_root) as stream:
        for batch in batches:
            batch = conform_batch(batch, schema)
            for part in batch.to_batches() if isinstance(batch, pa.Table) else [batch]:
                if part.num_rows:
                    stream.write(encode_tfrecords(part, schema).data)
                    rows += part.num_rows
    return rows


def _tf_dtype(tf, dtype: str):
    return {"int64": tf.int64, "int32": tf.int64, "float32": tf.float32, "string": tf.string}[dtype]


def _arrow_values(values: np.ndarray, dtype: str, name: str, path: str) -> pa.Array:
    if dtype == "string":
        return pa.array(values, type=pa.binary()).cast(pa.string())
    if dtype == "int32":
        info = np.iinfo(np.int32)
        if values.size and (values.min() < info.min or values.max() > info.max):
            raise ValueError(f"{path}: feature {name!r}: a value is out of int32 range")
        values = values.astype(np.int32)
    return pa.array(values)


def _column(ragged, name: str, dtype: str, kind: str, path: str) -> pa.Array:
    values = _arrow_values(ragged.flat_values.numpy(), dtype, name, path)
    splits = ragged.row_splits.numpy()
    if kind == "sparse":
        return pa.ListArray.from_arrays(pa.array(splits.astype(np.int32)), values)
    lengths = np.diff(splits)
    allowed = (1, 1) if kind == "label" else (0, 1)
    wrong = (lengths < allowed[0]) | (lengths > allowed[1])
    if wrong.any():
        row = int(np.argmax(wrong))
        raise ValueError(
            f"{path}: feature {name!r}: an Example in batch row {row} has {lengths[row]} values, "
            f"expected {' or '.join(map(str, sorted(set(allowed))))}"
        )
    return values.take(pa.array(splits[:-1], mask=lengths == 0))


def _tf_message(exc) -> str:
    """A TensorFlow op error's own words, without the function-node prefix and the op suffix."""
    text = getattr(exc, "message", str(exc))
    text = re.sub(r"^\{\{[^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:.*$", "", text, flags=re.S).strip()


def read_tfrecord_shard(path: str, schema: Schema, *, batch_size: int = 8192) -> pa.Table:
    """Reads a TFRecord shard of Examples back into a table with `schema.arrow_schema()`.

    An absent feature reads as an empty list (sparse) or a missing value
    (dense). Every record's CRCs are checked, and the records must fill the
    file exactly, so a shard cut short even inside the first record header
    is an error rather than an empty table. Imports TensorFlow.

    Raises:
      CorruptFileError: a record fails its CRC, the file is truncated, or a
        record is not a tf.train.Example (a ValueError naming the file).
      ValueError: Examples that do not fit `schema`: a dense feature with
        more than one value, a label without exactly one, a value of another
        type, an int32 feature out of range.
      FileNotFoundError: no file at `path`.
    """
    import tensorflow as tf

    features, layout = {}, []
    for spec in schema:
        features[spec.name] = tf.io.RaggedFeature(_tf_dtype(tf, spec.dtype), row_splits_dtype=tf.int64)
        layout.append((spec.name, spec.dtype, spec.kind))
        if spec.weighted:
            name = weights_column(spec.name)
            features[name] = tf.io.RaggedFeature(tf.float32, row_splits_dtype=tf.int64)
            layout.append((name, "float32", "sparse"))
    target = schema.arrow_schema()
    batches = []
    framed_bytes = 0  # what the records read so far take in the file, framing included
    try:
        for serialized in tf.data.TFRecordDataset(path).batch(batch_size):
            framed_bytes += int(tf.size(serialized)) * 16 + int(tf.reduce_sum(tf.strings.length(serialized)))
            try:
                parsed = tf.io.parse_example(serialized, features)
            except UnicodeDecodeError:  # TensorFlow fails to word the parse error of binary junk
                raise CorruptFileError(path, "a record is not a tf.train.Example") from None
            arrays = [_column(parsed[name], name, dtype, kind, path) for name, dtype, kind in layout]
            batches.append(pa.RecordBatch.from_arrays(arrays, schema=target))
        size = tf.io.gfile.stat(path).length
    except tf.errors.NotFoundError:
        raise FileNotFoundError(f"no TFRecord shard at {path!r}") from None
    except tf.errors.DataLossError as e:
        raise CorruptFileError(path, f"damaged TFRecord file: {_tf_message(e)}") from None
    except tf.errors.InvalidArgumentError as e:
        message = _tf_message(e)
        if "Could not parse example input" in message:  # the CRCs hold, but the bytes are no Example
            raise CorruptFileError(path, f"a record is not a tf.train.Example: {message}") from None
        raise ValueError(f"{path}: the Examples do not fit the schema: {message}") from None
    if size != framed_bytes:  # TensorFlow takes a file cut inside a record header for a clean end
        raise CorruptFileError(
            path, f"damaged TFRecord file: {size - framed_bytes} bytes after the last whole record (truncated?)"
        )
    return pa.Table.from_batches(batches, schema=target)
