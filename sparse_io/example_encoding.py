"""`tf.train.Example` protobufs for a whole record batch at once, encoded with numpy.

Building one Example object per row costs most of a per-row pipeline's time
(several Python calls per field per row). The wire format is simple enough
to write directly: every message is a concatenation of fields, and every
length-delimited field is `tag, varint(length), content`. Here each piece
is a "ragged" byte array (one byte string per row, as offsets + bytes), and
the pieces of all rows are assembled with a handful of vectorised numpy
operations per column, whatever the number of rows.

The output parses to exactly the Example a per-row build would give (the
canonical encoding: packed numeric lists, empty lists as empty messages,
features in name order), one row per element of a binary array.
TensorFlow is not needed.

Where sparse_io's native helpers build (`sparse_io.native_build`: plain C++
through ctypes, the GIL released), `encode_examples` (and
`sparse_io.tfrecord.encode_tfrecords`) run the native encoder (sparse_io/native/example_encoding.cc), which also
frames each record for a TFRecord file in the same pass; the numpy encoder
here is its reference (the two give the same bytes) and runs where no
compiler works.

Column mapping (see `sparse_io.schema`): a sparse feature becomes an
int64_list (int ids) or bytes_list (string ids), its weights a float_list;
a dense feature a float_list (int64_list for int dtypes) with 0 values when
missing or 1; the label an int64_list or float_list of one value.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools

import numpy as np
import pyarrow as pa

from sparse_io.arrow import _offsets_and_values
from sparse_io.schema import Schema, weights_column

__all__ = ["encode_examples", "native_encoder_available"]

# Wire tags of length-delimited fields 1, 2 and 3: (field_number << 3) | 2.
_F1, _F2, _F3 = 0x0A, 0x12, 0x1A


@dataclasses.dataclass(frozen=True)
class _Ragged:
    """One byte string per row: row r is `data[offsets[r]:offsets[r + 1]]`; offsets[0] == 0."""

    offsets: np.ndarray  # int64 [n + 1]
    data: np.ndarray  # uint8 [offsets[-1]]
    width: int | None = None  # every row has this many bytes (lets _concat skip per-byte bookkeeping)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1


def _from_lengths(lengths: np.ndarray, data: np.ndarray) -> _Ragged:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _Ragged(offsets, data)


def _varints(values: np.ndarray) -> _Ragged:
    """Base-128 varints of uint64 values (negative int64 are 10 bytes, as protobuf writes them)."""
    v = values.astype(np.uint64, copy=False)
    if not len(v) or v.max() < 0x80:  # the common case for lengths: one byte each
        return _Ragged(np.arange(len(v) + 1, dtype=np.int64), v.astype(np.uint8), width=1)
    nbytes = _varint_len(v)
    k = np.arange(int(nbytes.max()), dtype=np.uint64)  # no wider than the longest varint here
    groups = ((v[:, None] >> (np.uint64(7) * k)) & np.uint64(0x7F)).astype(np.uint8)
    groups |= np.where(k[None, :] < (nbytes[:, None] - 1).astype(np.uint64), np.uint8(0x80), np.uint8(0))
    return _from_lengths(nbytes, groups[k[None, :] < nbytes[:, None].astype(np.uint64)])


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _constant(num_rows: int, payload: bytes) -> _Ragged:
    data = np.tile(np.frombuffer(payload, dtype=np.uint8), num_rows)
    return _Ragged(np.arange(num_rows + 1, dtype=np.int64) * len(payload), data, width=len(payload))


def _keep_rows(r: _Ragged, keep: np.ndarray) -> _Ragged:
    """Rows where `keep` is False become empty."""
    if keep.all():
        return r
    return _from_lengths(r.lengths * keep, r.data[np.repeat(keep, r.lengths)])


def _concat(pieces: list[_Ragged]) -> _Ragged:
    """Row-wise concatenation: row r of the result is row r of each piece, in order."""
    lengths = sum((p.lengths for p in pieces[1:]), pieces[0].lengths)
    out = _from_lengths(lengths, np.empty(int(lengths.sum()), dtype=np.uint8))
    start = out.offsets[:-1].copy()
    for p in pieces:
        if p.width is not None:
            if p.width:
                out.data[(start[:, None] + np.arange(p.width)).ravel()] = p.data
            start += p.width
            continue
        lengths = p.lengths
        # Byte j of piece row r goes to start[r] + (j - p.offsets[r]).
        dest = np.repeat(start - p.offsets[:-1], lengths) + np.arange(p.offsets[-1])
        out.data[dest] = p.data
        start += lengths
    return out


def _group(elements: _Ragged, row_splits: np.ndarray) -> _Ragged:
    """Rows made of consecutive elements: row r is elements row_splits[r]..row_splits[r+1]-1."""
    return _Ragged(elements.offsets[row_splits], elements.data)


def _varint_len(values: np.ndarray) -> np.ndarray:
    """Bytes in the varint of each (non-negative) value."""
    v = values.astype(np.uint64, copy=False)
    n = np.ones(len(v), dtype=np.int64)
    for k in range(1, 10):
        n += v >= np.uint64(1 << (7 * k))
    return n


def _packed_payload(splits: np.ndarray, values: np.ndarray, dtype: str) -> _Ragged:
    """Per row, the packed content of an Int64List / FloatList."""
    if dtype == "float32":
        return _Ragged(splits * 4, np.ascontiguousarray(values, dtype="<f4").view(np.uint8))
    return _group(_varints(values.astype(np.int64, copy=False).view(np.uint64)), splits)


def _bytes_payload(splits: np.ndarray, values: pa.Array) -> _Ragged:
    """Per row, the repeated `value` fields of a BytesList."""
    values = values.cast(pa.large_binary())
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[
        values.offset : values.offset + len(values) + 1
    ]
    buffer = values.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.zeros(0, np.uint8)
    elements = _Ragged(offsets - offsets[0], data[offsets[0] : offsets[-1]])
    tagged = _concat([_constant(len(values), bytes([_F1])), _varints(elements.lengths), elements])
    return _group(tagged, splits)


def _entry_header(key: bytes, payload: _Ragged, list_tag: int, packed: bool) -> tuple[_Ragged, np.ndarray]:
    """Everything of one map entry that precedes its payload, per row, and the entry's full size.

    entry = 0x0A len(entry) | 0x0A len(key) key | 0x12 len(feature) | feature
    feature = list_tag len(list) | list;  list = [0x0A len(packed)] packed  (packed: omitted when empty)
    """
    n = payload.num_rows
    payload_len = payload.lengths
    if packed:
        list_len = np.where(payload_len > 0, 1 + _varint_len(payload_len) + payload_len, 0)
    else:
        list_len = payload_len
    feature_len = 1 + _varint_len(list_len) + list_len
    key_field = bytes([_F1]) + _varint_bytes(len(key)) + key
    entry_len = len(key_field) + 1 + _varint_len(feature_len) + feature_len
    pieces = [
        _constant(n, bytes([_F1])),
        _varints(entry_len),
        _constant(n, key_field + bytes([_F2])),
        _varints(feature_len),
        _constant(n, bytes([list_tag])),
        _varints(list_len),
    ]
    if packed:
        prefix = _concat([_constant(n, bytes([_F1])), _varints(payload_len)])
        pieces.append(_keep_rows(prefix, payload_len > 0))
    return _concat(pieces), 1 + _varint_len(entry_len) + entry_len


def _parts(column: pa.Array, name: str, sparse: bool) -> tuple[np.ndarray, pa.Array]:
    if sparse:
        splits, values = _offsets_and_values(column, name)
    else:
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        splits = np.zeros(len(column) + 1, dtype=np.int64)
        np.cumsum(valid, out=splits[1:])
        values = column.drop_null()
    if values.null_count:
        raise ValueError(f"feature {name!r}: null values inside lists cannot be written to an Example")
    return np.asarray(splits, dtype=np.int64), values


def _entry(column: pa.Array, name: str, dtype: str, sparse: bool) -> tuple[_Ragged, _Ragged, np.ndarray]:
    """(header, payload, entry size) of one feature's map entry, per row."""
    splits, values = _parts(column, name, sparse)
    if dtype == "string":
        payload, list_tag, packed = _bytes_payload(splits, values), _F1, False
    else:
        array = values.to_numpy(zero_copy_only=False)
        payload = _packed_payload(splits, array, dtype)
        list_tag, packed = (_F2 if dtype == "float32" else _F3), True
    header, size = _entry_header(name.encode("utf-8"), payload, list_tag, packed)
    return header, payload, size


def _columns(batch: pa.RecordBatch, schema: Schema) -> list[tuple[str, str, bool]]:
    """(column, dtype, sparse) of every column an Example of `schema` holds, in name order.

    Raises:
      ValueError: a float64 feature, or a column missing from `batch`.
    """
    columns = []
    for spec in schema:
        if spec.dtype == "float64":
            # A FloatList holds float32: writing one would round silently.
            raise ValueError(
                f"feature {spec.name!r}: a tf.train.Example has no float64 list; write Parquet shards "
                "or declare the column float32"
            )
        columns.append((spec.name, spec.dtype, spec.is_sparse))
        if spec.weighted:
            columns.append((weights_column(spec.name), "float32", True))
    for name, _, _ in columns:
        if name not in batch.schema.names:
            raise ValueError(f"feature {name!r}: column missing from the batch; it has {batch.schema.names}")
    return sorted(columns)


def encode_examples(batch: pa.RecordBatch, schema: Schema) -> pa.Array:
    """One serialized `tf.train.Example` per row of `batch`.

    Args:
      batch: a record batch with `schema.arrow_schema()` (extra columns ignored).
      schema: which columns to write and how (see the module docstring).

    Returns:
      A binary (large_binary past 2 GiB) array of `batch.num_rows` serialized Examples.

    Raises:
      ValueError: a column is missing, a list holds a null, or a column is
        float64 (an Example's FloatList is float32).

    Example:
      >>> from sparse_io.schema import FeatureSpec
      >>> s = Schema([FeatureSpec("label", "label"), FeatureSpec("items")])
      >>> b = pa.record_batch({"label": [1], "items": [[3, 4]]}, schema=s.arrow_schema())
      >>> len(encode_examples(b, s))
      1
    """
    columns = _columns(batch, schema)
    if _native() is None:
        example = _encode_numpy(batch, columns)
        offsets, data = example.offsets, example.data
    else:
        lengths, data = _encode_native(batch, columns, framed=False)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
    return _binary_array(offsets, data)


def _binary_array(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    n = len(offsets) - 1
    if offsets[-1] > np.iinfo(np.int32).max:
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.BinaryArray.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


def _encode_numpy(batch: pa.RecordBatch, columns: list[tuple[str, str, bool]]) -> _Ragged:
    """The reference encoder: every row's Example as one ragged byte array."""
    n = batch.num_rows
    pieces, features_len = [], np.zeros(n, dtype=np.int64)
    for name, dtype, sparse in columns:
        header, payload, size = _entry(batch.column(name), name, dtype, sparse)
        pieces += [header, payload]
        features_len += size
    # Sizes are known before any byte is written, so each byte is copied once, in one pass.
    return _concat([_constant(n, bytes([_F1])), _varints(features_len), *pieces])


# The native encoder ------------------------------------------------------------------------------------------


class _NativeColumn(ctypes.Structure):
    # Mirrors `Column` in sparse_io/native/example_encoding.cc.
    _fields_ = [
        ("key", ctypes.c_void_p),
        ("key_len", ctypes.c_int64),
        ("kind", ctypes.c_int64),
        ("splits", ctypes.c_void_p),
        ("values", ctypes.c_void_p),
        ("value_offsets", ctypes.c_void_p),
    ]


_KINDS = {"int64": 0, "float32": 1, "string": 2}


@functools.cache
def _native():
    """(example_lengths, write_examples) of the native library, or None where it cannot be built or loaded."""
    from sparse_io import native_build

    library = native_build.load()
    if library is None:
        return None
    lengths, write = library.sparseflow_example_lengths, library.sparseflow_write_examples
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lengths.argtypes, lengths.restype = [i64, p, i64, p, p], i64
    write.argtypes, write.restype = [i64, p, i64, p, p, ctypes.c_int32, p], i64
    return lengths, write


def native_encoder_available() -> bool:
    """Whether encode_examples / encode_tfrecords run the native encoder in this process."""
    return _native() is not None


def _native_column(column: pa.Array, name: str, dtype: str, sparse: bool, keep: list) -> _NativeColumn:
    """The C view of one column; `keep` holds the arrays it points into until the call returns."""
    splits, values = _parts(column, name, sparse)
    splits = np.ascontiguousarray(splits, dtype=np.int64)
    key = np.frombuffer(name.encode("utf-8"), dtype=np.uint8)
    offsets = None
    if dtype == "string":
        values = values.cast(pa.large_binary())
        stored = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset : values.offset + len(values) + 1]
        buffer = values.buffers()[2]
        data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.zeros(1, np.uint8)
        offsets = np.ascontiguousarray(stored)
        kind = _KINDS["string"]
    elif dtype == "float32":
        data = np.ascontiguousarray(values.to_numpy(zero_copy_only=False), dtype="<f4")
        kind = _KINDS["float32"]
    else:
        data = np.ascontiguousarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
        kind = _KINDS["int64"]
    keep += [splits, key, data, offsets]
    return _NativeColumn(
        key.ctypes.data if len(key) else None, len(key), kind, splits.ctypes.data,
        data.ctypes.data if data.size else None, None if offsets is None else offsets.ctypes.data,
    )


def _encode_native(batch: pa.RecordBatch, columns: list[tuple[str, str, bool]], *, framed: bool):
    """(Example lengths int64 [n], the bytes uint8) by the native encoder; framed as a TFRecord file if asked."""
    example_lengths, write_examples = _native()
    n = batch.num_rows
    keep: list = []
    views = (_NativeColumn * max(len(columns), 1))(
        *(_native_column(batch.column(name), name, dtype, sparse, keep) for name, dtype, sparse in columns)
    )
    lengths = np.empty(n, dtype=np.int64)
    features = np.empty(n, dtype=np.int64)
    total = example_lengths(n, views, len(columns), lengths.ctypes.data, features.ctypes.data)
    out = np.empty(total + (16 * n if framed else 0), dtype=np.uint8)
    written = write_examples(n, views, len(columns), lengths.ctypes.data, features.ctypes.data, int(framed),
                             out.ctypes.data)
    if written != len(out):
        raise RuntimeError(f"native Example encoder wrote {written} bytes, planned {len(out)}")
    return lengths, out
