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

from sparse_io.arrow_shards import ArrowShard
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
    """A Parquet shard opened for reading (a local path or a URL pyarrow's file systems know)."""
    if "://" in path:
        import pyarrow.fs

        fs, inner = pyarrow.fs.FileSystem.from_uri(path)
        return pq.ParquetFile(fs.open_input_file(inner))
    # Read, not memory-mapped: mapped shards count in the resident set as they are read (a 5M-row
    # epoch grew it by the 244 MiB of its shards), while reads keep it at the read-ahead buffers;
    # same speed here.
    return pq.ParquetFile(path, memory_map=False)


class ParquetShard:
    """A Parquet shard as a `ShardFile`: its units are its row groups, decoded on each read."""

    def __init__(self, path: str):
        self.path = path
        self._file = open_parquet(path)
        self.schema_arrow = self._file.schema_arrow
        meta = self._file.metadata
        self.unit_rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]

    def read_unit(self, index: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Row group `index` decoded (`columns`, default all), with pyarrow's threads."""
        return self._file.read_row_group(index, columns=None if columns is None else list(columns), use_threads=True)

    def close(self) -> None:
        """Closes the file (also one opened through a URL)."""
        self._file.close(force=True)

    def __enter__(self) -> ParquetShard:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# How each columnar format (`ShardFormat.unit` set) opens as a ShardFile.
_OPENERS: dict[str, type[ParquetShard] | type[ArrowShard]] = {"parquet": ParquetShard, "arrow": ArrowShard}


def open_shard(path: str, shard_format: str | None = None) -> ParquetShard | ArrowShard:
    """Shard `path` of `shard_format` ("parquet" or "arrow"; default: its suffix's) opened as a `ShardFile`.

    Raises:
      ValueError: another format.
      CorruptFileError: an Arrow file that is truncated or not Arrow (Parquet
        errors are pyarrow's, as they were).
    """
    if shard_format is None:
        found = shard_format_for(path)
        shard_format = None if found is None else found.name
    opener = _OPENERS.get(shard_format or "")
    if opener is None:
        raise ValueError(f"shard_format must be one of {COLUMNAR_FORMATS}, got {shard_format!r}")
    return opener(path)
