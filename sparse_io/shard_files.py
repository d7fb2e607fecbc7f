"""The columnar shard formats behind one small interface: a file of units (row groups or record batches).

The training reader (`transforms.tfdata`'s `ColumnarSource` and
`UnitLoader`) and `pipelines.convert` read Parquet and Arrow shards the same
way: a file's Arrow schema, the rows of each unit, and a unit's columns as
a table. Parquet units are row groups, decoded on every read; Arrow units
are record batches, memory-mapped and read without decoding
(`sparse_io.arrow_shards`).

Example:
  >>> import os, tempfile
  >>> import pyarrow as pa
  >>> from sparse_io.arrow_shards import write_arrow_shard
  >>> from sparse_io.schema import FeatureSpec, Schema
  >>> schema = Schema([FeatureSpec("label", "label"), FeatureSpec("C1")])
  >>> path = os.path.join(tempfile.mkdtemp(), "part-00000-of-00001.arrow")
  >>> write_arrow_shard(path, [pa.record_batch({"label": [1], "C1": [[4, 2]]}, schema=schema.arrow_schema())], schema)
  1
  >>> with open_shard(path, "arrow") as shard:
  ...     shard.read_unit(0, ["C1", "label"]).to_pydict()
  {'C1': [[4, 2]], 'label': [1]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from sparse_io.arrow_shards import ArrowShard, decode_names
from sparse_io.errors import CorruptFileError, damage_is_corruption, first_line
from sparse_io.locations import is_remote
from sparse_io.pins import ShardPin
from sparse_io.shard_formats import SHARD_FORMAT_OBJECTS, shard_format_for

__all__ = ["COLUMNAR_FORMATS", "ParquetShard", "ShardFile", "open_parquet", "open_shard"]

# The shard formats read through this interface (TFRecord shards are read graph-natively instead).
COLUMNAR_FORMATS = tuple(fmt.name for fmt in SHARD_FORMAT_OBJECTS if fmt.columnar)


class ShardFile(Protocol):
    """A shard of units: its schema, each unit's rows, and a unit's columns read as a table."""

    schema_arrow: pa.Schema
    unit_rows: list[int]

    def read_unit(self, index: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Unit `index`'s `columns` (default: all)."""
        ...

    def close(self) -> None:
        """Releases the file."""
        ...


def open_parquet(path: str) -> pq.ParquetFile:
    """A Parquet shard opened for reading (a local path or a URL pyarrow's file systems know).

    Page checksums are verified on every read where the file has them (every
    shard `write_parquet_shard` writes does): a damaged page is an error,
    never other values.

    Raises:
      CorruptFileError: the footer is damaged or the file is not Parquet.
    """
    with damage_is_corruption(path, "Parquet"):
        if is_remote(path):
            import pyarrow.fs

            fs, inner = pyarrow.fs.FileSystem.from_uri(path)
            return pq.ParquetFile(fs.open_input_file(inner), page_checksum_verification=True)
        # Read, not memory-mapped: mapped shards count in the resident set as they are read (a 5M-row
        # epoch grew it by the 244 MiB of its shards), while reads keep it at the read-ahead buffers;
        # same speed here.
        return pq.ParquetFile(path, memory_map=False, page_checksum_verification=True)


class ParquetShard:
    """A Parquet shard as a `ShardFile`: its units are its row groups, decoded on each read."""

    def __init__(self, path: str):
        self.path = path
        self._file = open_parquet(path)
        try:
            with damage_is_corruption(path, "Parquet"):  # the footer's schema and row groups, decoded here
                self.schema_arrow = self._file.schema_arrow
                decode_names(self.schema_arrow)
                meta = self._file.metadata
                self.unit_rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        except BaseException:
            self._file.close(force=True)
            raise

    def read_unit(self, index: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Row group `index` decoded (`columns`, default all), with pyarrow's threads.

        Raises:
          CorruptFileError: a page of the row group fails its checksum or
            cannot be decoded (naming the row group and, where one column
            alone fails, the column).
        """
        if not 0 <= index < len(self.unit_rows):
            raise IndexError(f"{self.path}: no row group {index}; the shard has {len(self.unit_rows)}")
        names = None if columns is None else list(columns)
        try:
            table = self._file.read_row_group(index, columns=names, use_threads=True)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
            if isinstance(e, OSError) and e.errno is not None:  # the file system's, not the bytes'
                raise
            raise CorruptFileError(self.path, f"row group {index}{self._damaged_column(index, names)}: "
                                              f"damaged Parquet page: {first_line(e)}") from e
        if table.num_rows != self.unit_rows[index]:
            raise CorruptFileError(self.path, f"row group {index} decodes to {table.num_rows} rows, "
                                              f"its footer says {self.unit_rows[index]}")
        return table

    def _damaged_column(self, index: int, names: list[str] | None) -> str:
        """", column 'x'" for the first column of row group `index` that fails alone; "" when none does."""
        for name in self.schema_arrow.names if names is None else names:
            try:
                self._file.read_row_group(index, columns=[name], use_threads=False)
            except (pa.ArrowException, OSError, UnicodeDecodeError):
                return f", column {name!r}"
        return ""

    def close(self) -> None:
        """Closes the file (also one opened through a URL)."""
        self._file.close(force=True)

    def __enter__(self) -> ParquetShard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# How each columnar format (`ShardFormat.unit` set) opens as a ShardFile.
_OPENERS: dict[str, type[ParquetShard] | type[ArrowShard]] = {"parquet": ParquetShard, "arrow": ArrowShard}


def open_shard(
    path: str, shard_format: str | None = None, pin: ShardPin | None = None
) -> ParquetShard | ArrowShard:
    """Shard `path` of `shard_format` ("parquet" or "arrow"; default: its suffix's) opened as a `ShardFile`.

    With `pin` (`sparse_io.pins`), the file opened must be the one pinned
    when it was verified, holding the rows its manifest lists.

    Raises:
      ValueError: another format.
      CorruptFileError: a file that is truncated or not in its format, or
        that holds other rows than `pin` says.
      ChangedFileError: the file at `path` is not the one `pin` holds.
    """
    if shard_format is None:
        found = shard_format_for(path)
        shard_format = None if found is None else found.name
    opener = _OPENERS.get(shard_format or "")
    if opener is None:
        raise ValueError(f"shard_format must be one of {COLUMNAR_FORMATS}, got {shard_format!r}")
    shard = opener(path)
    if pin is not None:
        try:
            pin.check()  # after the open: the file now open is the one verified
            pin.check_rows(sum(shard.unit_rows))
        except BaseException:
            shard.close()
            raise
    return shard
