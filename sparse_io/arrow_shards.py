"""Arrow IPC shards: record batches laid out as training reads them, memory-mapped, no decoding.

An Arrow shard is an Arrow IPC *file* (`part-00000-of-00004.arrow`) of
record batches of `record_batch_size` rows (the last one fewer), each batch
a unit the training reader shuffles and reads, as a Parquet row group is.
Uncompressed (the default), a column's offsets and values are read where
they lie in the page cache: nothing is decoded, and the process's resident
memory for them is file-backed (the kernel drops it under pressure), not
anonymous. lz4 or zstd buffer compression makes smaller files that are
decompressed on every read.

Integrity, as Parquet's page checksums and TFRecord's record CRCs give:
each record batch carries in its custom metadata the CRC-32C of what the
reader gets from it: its metadata (row count, each column's type, length,
null count and buffer sizes, children included) and its buffers
(decompressed), checked the first time an `ArrowShard` reads it. So a
same-size edit of a batch's length or null count is an error, as a flipped
bit in its values is. Shards written before the metadata was covered carry
the CRC of the buffers alone (`LEGACY_CHECKSUM_KEY`); they are still read,
with that check, and readers that have the manifest (`make_dataset`,
`iter_shards`, `pipelines.convert`) compare each shard's rows with it. The IPC reader itself checks every buffer against
the body it lies in, so a damaged or truncated file is an error, never a
read past its end. Every buffer of every record batch lies at a multiple of
64 bytes in the file (`sparse_io.ipc_alignment`: pyarrow's writer alone
pads to 8), so a mapped shard's buffers are 64-byte aligned; the training
reader copies each batch's ids once, into a 64-byte-aligned arena.

Example:
  >>> import os, tempfile
  >>> from sparse_io.schema import FeatureSpec, Schema
  >>> from sparse_io.output_files import shard_name
  >>> schema = Schema([FeatureSpec("label", "label"), FeatureSpec("C1")])
  >>> batches = [pa.record_batch({"label": [1, 0], "C1": [[7], [3, 5]]}, schema=schema.arrow_schema())]
  >>> path = os.path.join(tempfile.mkdtemp(), shard_name(0, 1, ".arrow"))
  >>> write_arrow_shard(path, batches, schema)
  2
  >>> with ArrowShard(path) as shard:
  ...     shard.read_unit(0, ["C1", "label"]).to_pydict()
  {'C1': [[7], [3, 5]], 'label': [1, 0]}
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Sequence

import google_crc32c
import pyarrow as pa
import pyarrow.ipc as ipc

from sparse_io.atomic import atomic_output
from sparse_io.errors import CorruptFileError, damage_is_corruption
from sparse_io.ipc_alignment import AlignedIpcSink
from sparse_io.locations import is_remote
from sparse_io.schema import Schema
from sparse_io.shard_batches import DEFAULT_ROW_GROUP_SIZE, fixed_size_tables

__all__ = [
    "ARROW_CODECS",
    "DEFAULT_ARROW_CODEC",
    "ArrowShard",
    "batch_checksum",
    "buffers_checksum",
    "read_arrow_shard",
    "write_arrow_shard",
]

# Buffer codecs an Arrow shard may be written with; "none" is the one read without decoding.
# (The Arrow format object, sparse_io.shard_formats, offers these.)
ARROW_CODECS = ("none", "lz4", "zstd")
DEFAULT_ARROW_CODEC = "none"
# The custom-metadata key of a record batch's checksum of its metadata and buffers.
CHECKSUM_KEY = b"sparseflow.batch_crc32c"
# The key of shards written before: the checksum of the buffers alone (`buffers_checksum`).
LEGACY_CHECKSUM_KEY = b"sparseflow.crc32c"
# The file-footer key of the rows of every record batch but the last, so a reader learns the
# batches' sizes without decoding (compressed) batches.
BATCH_ROWS_KEY = b"sparseflow.record_batch_rows"


def _layout(array: pa.Array) -> list:
    """What an array's metadata says: type, length, null count, offset, and its children's, nested."""
    layout: list = [str(array.type), len(array), array.null_count, array.offset]
    kind = array.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        layout.append(_layout(array.values))
    elif pa.types.is_struct(kind):
        layout.extend(_layout(array.field(i)) for i in range(kind.num_fields))
    return layout


def batch_checksum(batch: pa.RecordBatch) -> str:
    """The CRC-32C (8 hex digits) of `batch`'s metadata and every buffer, as the IPC reader returns them.

    The metadata: the row count, and per column its name, type,
    nullability, length, null count, offset (children included) and the
    size of each buffer (absent: -1); then the bytes of every buffer in
    column order (validity, offsets, values; absent buffers count as
    empty). Of a batch read back from a shard, it equals the value stored
    when the batch was written.

    Example:
      >>> batch = pa.record_batch({"a": pa.array([1, None])})
      >>> batch_checksum(batch) == batch_checksum(batch.slice(0, 1))
      False
    """
    return f"{_extend_buffers(_metadata_crc(batch), batch):08x}"


def _metadata_crc(batch: pa.RecordBatch) -> int:
    """The CRC-32C of what `batch_checksum` covers before the buffers (reads no buffer's bytes)."""
    described: list = [batch.num_rows]
    for field, column in zip(batch.schema, batch.columns):
        sizes = [-1 if b is None else b.size for b in column.buffers()]
        described.append([field.name, field.nullable, _layout(column), sizes])
    return google_crc32c.value(json.dumps(described, separators=(",", ":")).encode())


def buffers_checksum(batch: pa.RecordBatch) -> str:
    """The CRC-32C of `batch`'s buffers alone: the checksum of shards written before `batch_checksum`."""
    return f"{_extend_buffers(0, batch):08x}"


def _checksummed_buffers(batch: pa.RecordBatch):
    """The buffers a record batch's checksum covers, in order: every non-empty buffer of every column."""
    for column in batch.columns:
        for buffer in column.buffers():
            if buffer is not None and buffer.size:
                yield buffer


def _extend_buffers(crc: int, batch: pa.RecordBatch) -> int:
    for buffer in _checksummed_buffers(batch):
        crc = google_crc32c.extend(crc, buffer)
    return crc


def decode_names(schema: pa.Schema) -> None:
    """Decodes every field name of `schema`, children's included, so a name that is no UTF-8 fails here.

    pyarrow decodes names only when asked; a damaged name would otherwise
    surface later, as a bare UnicodeDecodeError, wherever a reader asks.
    """

    def fields(kind: pa.DataType):
        for i in range(kind.num_fields):
            child = kind.field(i)
            _ = child.name
            fields(child.type)

    _ = schema.names
    for field in schema:
        fields(field.type)


def _canonical(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`batch` as the IPC reader will return it: its buffers rebased and cut to the rows it holds.

    A sliced array keeps its parent's buffers; the writer writes only the
    slice. Checksums are taken of what is read, so of this round trip.
    """
    return ipc.read_record_batch(batch.serialize(), batch.schema)


def write_arrow_shard(
    path: str,
    batches: Iterable[pa.RecordBatch | pa.Table],
    schema: Schema,
    *,
    record_batch_size: int = DEFAULT_ROW_GROUP_SIZE,
    compression: str = DEFAULT_ARROW_CODEC,
    output_root: str | None = None,
) -> int:
    """Writes `batches` to one Arrow IPC file at `path`, atomically; returns the row count.

    Record batches hold `record_batch_size` rows (the last one fewer)
    whatever the sizes of the incoming batches: the training reader
    shuffles whole record batches and rows within them, as it does Parquet
    row groups, so the same size gives the same shuffle quality (65,536
    rows: ~20 MiB of a Criteo-like batch). No batches writes a valid shard
    of no record batch. The file's schema is `schema.arrow_schema()`.
    Every buffer starts at a multiple of 64 bytes in the file.

    `compression`: one of `ARROW_CODECS`; "none" (the default) is read
    without decoding, memory-mapped; lz4/zstd buffers are decompressed on
    every read.

    Raises:
      ValueError: a bad `record_batch_size` or `compression`; a batch lacks
        a column or has one of an uncastable type (nothing is left at
        `path` then, and an earlier file there is kept).
      PermissionError: `path` is a symbolic link or leads out of `output_root`.
    """
    if isinstance(record_batch_size, bool) or not isinstance(record_batch_size, int) or record_batch_size <= 0:
        raise ValueError(f"record_batch_size must be a positive integer, got {record_batch_size!r}")
    if compression not in ARROW_CODECS:
        raise ValueError(f"arrow compression must be one of {', '.join(ARROW_CODECS)}, got {compression!r}")
    target = schema.arrow_schema()
    options = ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    rows = 0
    with atomic_output(path, output_root=output_root) as stream, AlignedIpcSink(stream) as aligned:
        footer = {BATCH_ROWS_KEY: str(record_batch_size).encode()}
        with ipc.new_file(aligned, target, options=options, metadata=footer) as writer:
            for table in fixed_size_tables(batches, schema, record_batch_size):
                for part in table.combine_chunks().to_batches():
                    part = _canonical(part)
                    writer.write_batch(part, custom_metadata={CHECKSUM_KEY: batch_checksum(part).encode()})
                rows += table.num_rows
    return rows


class ArrowShard:
    """One Arrow shard opened for reading: memory-mapped (a local path) or read through a file system (a URL).

    Args:
      path: the shard.

    Attributes:
      schema_arrow: the file's Arrow schema.
      unit_rows: the rows of each record batch, in file order.

    Raises:
      CorruptFileError: the file is truncated, damaged or not an Arrow IPC file.
      FileNotFoundError: no file at `path`.
    """

    def __init__(self, path: str):
        self.path = path
        self._source = _open_source(path)
        try:
            with damage_is_corruption(path, "Arrow"):
                self._reader = ipc.open_file(self._source)
                self.schema_arrow = self._reader.schema
                decode_names(self.schema_arrow)
                self.unit_rows = self._unit_rows()
        except BaseException:
            self._source.close()
            raise
        self._verified: set[int] = set()

    def _unit_rows(self) -> list[int]:
        count = self._reader.num_record_batches
        stated = (self._reader.metadata or {}).get(BATCH_ROWS_KEY)
        if stated is None or count == 0:
            return [self._reader.get_batch(i).num_rows for i in range(count)]
        if not stated.isdigit() or int(stated) <= 0:
            raise CorruptFileError(self.path, f"footer states record batches of {stated!r} rows")
        # Only the last batch is read; each batch's size is checked when it is read.
        return [int(stated)] * (count - 1) + [self._reader.get_batch(count - 1).num_rows]

    @property
    def num_rows(self) -> int:
        """Rows in the whole shard."""
        return sum(self.unit_rows)

    def read_unit(self, index: int, columns: Sequence[str] | None = None, *, defer_checksum: bool = False) -> pa.Table:
        """Record batch `index` (its `columns`, default all) as a one-chunk table, checksum checked on first read.

        Uncompressed buffers are views of the mapped file (no copy). With
        `defer_checksum` the checksum is left to the caller (`checksum_parts`
        says what to check) and nothing counts as verified; the rest is checked.

        Raises:
          CorruptFileError: the batch's buffers do not match their checksum, or
            the batch cannot be read.
          ValueError: a column the file lacks.
        """
        with damage_is_corruption(self.path, "Arrow"):
            batch, metadata = self._reader.get_batch_with_custom_metadata(index)
        if index not in self._verified:
            stored, checksum = self._stored_checksum(index, metadata)
            found = None if defer_checksum else checksum(batch)
            if found is not None and found.encode() != stored:
                raise CorruptFileError(
                    self.path, f"record batch {index}: checksum {found} differs from the stored {stored.decode()}"
                )
            if batch.num_rows != self.unit_rows[index]:
                stated = self.unit_rows[index]
                raise CorruptFileError(
                    self.path, f"record batch {index} holds {batch.num_rows} rows, its footer says {stated}"
                )
            with damage_is_corruption(self.path, "Arrow"):
                batch.validate()
            if not defer_checksum:
                self._verified.add(index)
        if columns is not None:
            present = set(batch.schema.names)  # (`names` builds a new list at each call)
            missing = [c for c in columns if c not in present]
            if missing:
                raise ValueError(f"{self.path}: shard lacks column(s) {missing}; it has {batch.schema.names}")
            batch = batch.select(list(columns))
        return pa.Table.from_batches([batch])

    def _stored_checksum(self, index: int, metadata) -> tuple[bytes, Callable[[pa.RecordBatch], str]]:
        """`(the checksum record batch index stores, the function that computes it)`."""
        stored, checksum = None if metadata is None else metadata.get(CHECKSUM_KEY), batch_checksum
        if stored is None and metadata is not None and LEGACY_CHECKSUM_KEY in metadata:
            stored, checksum = metadata[LEGACY_CHECKSUM_KEY], buffers_checksum
        if stored is None:
            raise CorruptFileError(self.path, f"record batch {index} carries no checksum (not written as a shard)")
        return stored, checksum

    def checksum_parts(self, index: int) -> tuple[str, int, list[tuple[int, int]]]:
        """What checking record batch `index`'s checksum takes, for a reader that checks it itself, later.

        Returns `(the stored checksum, hex; the CRC-32C its buffers extend;
        (address, bytes) of each of its non-empty buffers, in order)`: the
        batch is intact when the CRC-32C of those bytes, extended from the
        second value, is the first. Reads only the batch's metadata.

        Raises:
          CorruptFileError: the batch carries no checksum or cannot be read.
        """
        with damage_is_corruption(self.path, "Arrow"):
            batch, metadata = self._reader.get_batch_with_custom_metadata(index)
        stored, checksum = self._stored_checksum(index, metadata)
        initial = _metadata_crc(batch) if checksum is batch_checksum else 0
        spans = [(b.address, b.size) for b in _checksummed_buffers(batch)]
        return stored.decode(), initial, spans

    def mapped_range(self) -> tuple[int, int] | None:
        """`(address, bytes)` of the whole file as mapped (buffers read from it lie inside), or None (a URL)."""
        if not isinstance(self._source, pa.MemoryMappedFile):
            return None
        at = self._source.tell()
        self._source.seek(0)
        whole = self._source.read_buffer()  # a view of the mapping, not a copy
        self._source.seek(at)
        return whole.address, whole.size

    def close(self) -> None:
        """Closes the file; tables already read keep the mapping alive while they live."""
        self._source.close()

    def __enter__(self) -> ArrowShard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open_source(path: str):
    if is_remote(path):
        import pyarrow.fs

        fs, inner = pyarrow.fs.FileSystem.from_uri(path)
        return fs.open_input_file(inner)
    # Memory-mapped: the buffers the reader returns are views of the page cache.
    return pa.memory_map(path, "r")


def read_arrow_shard(path: str, schema: Schema | None = None) -> pa.Table:
    """Reads a whole Arrow shard, every checksum checked (local path or URL).

    With `schema`, only its columns are read and their types must be
    `schema.arrow_schema()`'s.

    Raises:
      ValueError: a schema column is missing or has another type.
      CorruptFileError: the shard is truncated, damaged or not an Arrow shard.
      FileNotFoundError: no file at `path`.
    """
    target = schema.arrow_schema() if schema is not None else None
    with contextlib.closing(ArrowShard(path)) as shard:
        columns = target.names if target is not None else None
        if target is not None:
            for field in target:
                if field.name not in shard.schema_arrow.names:
                    raise ValueError(
                        f"{path}: shard lacks column(s) {[field.name]}; it has {shard.schema_arrow.names}"
                    )
                found = shard.schema_arrow.field(field.name).type
                if found != field.type:
                    raise ValueError(f"{path}: column {field.name!r} has type {found}, expected {field.type}")
        tables = [shard.read_unit(i, columns) for i in range(len(shard.unit_rows))]
        empty_schema = target if target is not None else shard.schema_arrow
        # The tables' buffers keep the mapping alive after the shard is closed.
        table = pa.concat_tables(tables) if tables else empty_schema.empty_table()
    return table if target is None else table.cast(target)
