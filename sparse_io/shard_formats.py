"""The shard formats, one object each: names, suffix, writer, reader, row count and integrity check.

Everything that depends on a shard's format asks its object here instead of
comparing names: `write_shard`/`read_shard` (`sparse_io.shard_set`), the
manifest's row counts (`sparse_io.manifest`), the columnar readers' choice
of formats (`sparse_io.shard_files`), `WriteShards` and `pipelines.convert`. A new
format is one new `ShardFormat` in `SHARD_FORMAT_OBJECTS`; the names and
suffixes of `sparse_io.formats` are derived from them. A name or suffix no
object claims is an error, never another format's.

Nothing here imports TensorFlow (or a format's reader) until it is used.

Example:
  >>> shard_format("arrow").suffix, shard_format("arrow").unit
  ('.arrow', 'record batch')
  >>> shard_format_for("out/part-00000-of-00002.tfrecords").name
  'tfrecord'
  >>> shard_format_for("out/schema.json") is None
  True
"""

from __future__ import annotations

import abc
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "ShardFormat",
    "suffix_list",
    "SHARD_FORMAT_OBJECTS",
    "shard_format",
    "shard_format_for",
]


class ShardFormat(abc.ABC):
    """One shard format. Subclasses set the attributes and implement the abstract methods.

    Attributes:
      name: the format's name (`output.format`, `--format`).
      title: its name in messages ("Parquet").
      suffix: the suffix its shards are written with.
      read_suffixes: every suffix read as this format (`suffix` first).
      unit: what its shards are read in ("row group", "record batch"), or
        None for a format not read through `sparse_io.shard_files` (its
        rows are not in units the columnar reader can address).
      self_describing: whether a shard carries its own column types (else
        reading one needs a `Schema`).
    """

    name: str
    title: str
    suffix: str
    read_suffixes: tuple[str, ...]
    unit: str | None
    self_describing: bool = True

    @property
    def codecs(self) -> tuple[str, ...]:
        """The codecs its shards may be written with (empty: none)."""
        return ()

    @property
    def default_codec(self) -> str | None:
        """The codec used when none is asked (None: the format takes none)."""
        return None

    @property
    def columnar(self) -> bool:
        """Whether shards of this format open as a `sparse_io.shard_files.ShardFile` (in units)."""
        return self.unit is not None

    def check_codec(self, codec: str) -> str:
        """Returns `codec` if shards of this format may be written with it.

        Raises:
          ValueError: naming the codec and the format's choices, or saying
            the format takes no codec.
        """
        if not self.codecs:
            raise ValueError(f"{self.name} shards take no compression, got {codec!r}")
        if codec not in self.codecs:
            raise ValueError(f"{self.name} compression must be one of {', '.join(self.codecs)}, got {codec!r}")
        return codec

    @abc.abstractmethod
    def write(self, path: str, batches: Iterable, schema, *, row_group_size: int, compression: str | None = None,
              output_root: str | None = None) -> int:
        """Writes one shard atomically from Arrow batches or tables with `schema`; returns its rows.

        `row_group_size`: rows per unit; `compression`: one of `codecs`
        (None: `default_codec`).

        Raises:
          ValueError: a codec the format does not take.
        """

    @abc.abstractmethod
    def read(self, path: str, schema=None) -> pa.Table:
        """A whole shard as a table, every check of the format made; `schema` selects and checks the columns.

        Raises:
          ValueError: a column missing or of another type (or no `schema`
            where the format needs one).
          CorruptFileError: the shard is damaged.
        """

    def frame_counter(self):
        """A counter of rows fed the file's bytes in order (`feed(chunk)`, `records`, `complete`), or None.

        Formats whose row count is in the file's footer return None: their
        rows come from `count_rows`.
        """
        return None

    @abc.abstractmethod
    def count_rows(self, path: str) -> int:
        """The rows a shard holds, from its metadata where it has them.

        Raises:
          CorruptFileError: the file is not a readable shard of this format.
        """

    @abc.abstractmethod
    def check(self, path: str) -> int:
        """Reads every byte of a shard through the format's own checks; returns its rows.

        Raises:
          CorruptFileError: naming the file and what is damaged.
        """

    def __repr__(self) -> str:
        return f"<shard format {self.name}>"


def _codec(fmt: ShardFormat, compression: str | None) -> str:
    """`compression` checked (`ShardFormat.check_codec`), or the format's default for None."""
    return str(fmt.default_codec) if compression is None else fmt.check_codec(compression)


class _ParquetFormat(ShardFormat):
    """Parquet shards: list columns, zstd pages with checksums, read in row groups (`sparse_io.parquet_shards`)."""

    name, title, suffix, read_suffixes, unit = "parquet", "Parquet", ".parquet", (".parquet",), "row group"

    @property
    def codecs(self) -> tuple[str, ...]:
        from sparse_io.parquet_shards import PARQUET_CODECS

        return PARQUET_CODECS

    @property
    def default_codec(self) -> str | None:
        from sparse_io.parquet_shards import DEFAULT_PARQUET_CODEC

        return DEFAULT_PARQUET_CODEC

    def write(self, path, batches, schema, *, row_group_size, compression=None, output_root=None) -> int:
        from sparse_io.parquet_shards import write_parquet_shard

        return write_parquet_shard(path, batches, schema, row_group_size=row_group_size,
                                   compression=_codec(self, compression), output_root=output_root)

    def read(self, path, schema=None) -> pa.Table:
        from sparse_io.parquet_shards import read_parquet_shard

        return read_parquet_shard(path, schema)

    def count_rows(self, path) -> int:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from sparse_io.errors import CorruptFileError
        from sparse_io.readers._source import open_binary

        with open_binary(path) as f:
            try:
                return pq.ParquetFile(f).metadata.num_rows
            except (pa.ArrowInvalid, OSError) as e:
                raise CorruptFileError(path, f"not a readable Parquet shard ({e})") from None

    def check(self, path) -> int:
        return self.read(path).num_rows


class _ArrowFormat(ShardFormat):
    """Arrow IPC shards: record batches with checksums, read memory-mapped (`sparse_io.arrow_shards`)."""

    name, title, suffix, read_suffixes, unit = "arrow", "Arrow", ".arrow", (".arrow",), "record batch"

    @property
    def codecs(self) -> tuple[str, ...]:
        from sparse_io.arrow_shards import ARROW_CODECS

        return ARROW_CODECS

    @property
    def default_codec(self) -> str | None:
        from sparse_io.arrow_shards import DEFAULT_ARROW_CODEC

        return DEFAULT_ARROW_CODEC

    def write(self, path, batches, schema, *, row_group_size, compression=None, output_root=None) -> int:
        from sparse_io.arrow_shards import write_arrow_shard

        return write_arrow_shard(path, batches, schema, record_batch_size=row_group_size,
                                 compression=_codec(self, compression), output_root=output_root)

    def read(self, path, schema=None) -> pa.Table:
        from sparse_io.arrow_shards import read_arrow_shard

        return read_arrow_shard(path, schema)

    def count_rows(self, path) -> int:
        from sparse_io.arrow_shards import ArrowShard

        with ArrowShard(path) as shard:
            return shard.num_rows

    def check(self, path) -> int:
        return self.read(path).num_rows


class _TFRecordFormat(ShardFormat):
    """TFRecord shards: one `tf.train.Example` a row, framed with CRCs, uncompressed (`sparse_io.tfrecord`)."""

    name, title, suffix = "tfrecord", "TFRecord", ".tfrecord"
    # ".tfrecords" is the other spelling TensorFlow's own writers use, so shards written elsewhere are read too.
    read_suffixes = (".tfrecord", ".tfrecords")
    unit = None
    self_describing = False  # a tf.train.Example names its features, not their kinds or types

    def write(self, path, batches, schema, *, row_group_size, compression=None, output_root=None) -> int:
        from sparse_io.tfrecord import write_tfrecord_shard

        if compression is not None:
            _codec(self, compression)  # refuses it: TFRecord shards take no codec
        return write_tfrecord_shard(path, batches, schema, output_root=output_root)

    def read(self, path, schema=None) -> pa.Table:
        if schema is None:
            raise ValueError(f"{path}: reading a TFRecord shard needs a schema")
        from sparse_io.tfrecord import read_tfrecord_shard

        return read_tfrecord_shard(path, schema)

    def frame_counter(self):
        from sparse_io.tfrecord_frames import frame_counter

        return frame_counter()

    def count_rows(self, path) -> int:
        from sparse_io.errors import CorruptFileError
        from sparse_io.readers._source import open_binary

        counter = self.frame_counter()
        with open_binary(path) as f:
            while chunk := f.read(4 << 20):
                counter.feed(chunk)
        if not counter.complete:
            raise CorruptFileError(path, "ends inside a TFRecord frame (truncated)")
        return counter.records

    def check(self, path) -> int:
        """Every frame's length and data CRC-32C (masked, as TFRecord writes them); the frames fill the file."""
        import struct

        import google_crc32c

        from sparse_io.errors import CorruptFileError
        from sparse_io.readers._source import open_binary

        def masked(data: bytes) -> int:
            crc = google_crc32c.value(data)
            return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

        records = 0
        with open_binary(path) as f:
            while head := f.read(12):
                if len(head) < 12:
                    raise CorruptFileError(path, f"record {records}: truncated frame header")
                (length,) = struct.unpack("<Q", head[:8])
                if struct.unpack("<I", head[8:])[0] != masked(head[:8]):
                    raise CorruptFileError(path, f"record {records}: length checksum mismatch")
                body = f.read(length + 4)
                if len(body) < length + 4:
                    raise CorruptFileError(path, f"record {records}: truncated data")
                if struct.unpack("<I", body[length:])[0] != masked(body[:length]):
                    raise CorruptFileError(path, f"record {records}: data checksum mismatch")
                records += 1
        return records


# The formats, in the order their names are listed; a new format is one more object here.
SHARD_FORMAT_OBJECTS: tuple[ShardFormat, ...] = (_ParquetFormat(), _TFRecordFormat(), _ArrowFormat())


def _by_name() -> dict[str, ShardFormat]:
    return {fmt.name: fmt for fmt in SHARD_FORMAT_OBJECTS}


def shard_format(name: str) -> ShardFormat:
    """The format called `name`.

    Raises:
      ValueError: no format has that name (the message lists those there are).
    """
    found = _by_name().get(name)
    if found is None:
        raise ValueError(f"shard format must be one of {', '.join(_by_name())}, got {name!r}")
    return found


def shard_format_for(path: str | os.PathLike) -> ShardFormat | None:
    """The format a file's suffix names (matched as written: shards are written in lower case), or None."""
    suffix = os.path.splitext(os.fspath(path))[1]
    return next((fmt for fmt in SHARD_FORMAT_OBJECTS if suffix in fmt.read_suffixes), None)


def suffix_list() -> str:
    """The written suffixes as a phrase for messages: ".parquet, .tfrecord or .arrow"."""
    suffixes = [fmt.suffix for fmt in SHARD_FORMAT_OBJECTS]
    return " or ".join([", ".join(suffixes[:-1]), suffixes[-1]]) if len(suffixes) > 1 else suffixes[0]
