"""Reading the shards of a directory one by one, skipping damaged ones when asked (counted and reported).

`iter_shards` yields each shard as a whole `pa.Table`: a shard is read
completely before any of its rows are handed out, so skipping a damaged
shard never leaves half of it behind in the output. Memory holds one shard
at a time.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence

import pyarrow as pa

from sparse_io import formats
from sparse_io.errors import CorruptFileError
from sparse_io.formats import shard_format_of
from sparse_io.numeric_maps import append_derived_columns, derived_of_feature
from sparse_io.schema import SCHEMA_FILE, Schema
from sparse_io.shard_formats import shard_format_for, suffix_list

__all__ = ["SHARD_SUFFIXES", "ShardReport", "SkippedShard", "iter_shards", "read_shard", "shard_paths", "write_shard"]

SHARD_SUFFIXES = tuple(formats.SHARD_SUFFIXES)  # the suffixes read as shards
_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SkippedShard:
    """A shard left out by `iter_shards(..., skip_bad_shards=True)`, and why."""

    path: str
    reason: str


@dataclasses.dataclass
class ShardReport:
    """What `iter_shards` found and read; updated while it runs.

    Attributes:
      shards: shard files found.
      read: shards read whole and yielded.
      rows: rows yielded.
      skipped: damaged shards left out, with their reasons (in reading order).

    Example:
      >>> report = ShardReport()
      >>> tables = list(iter_shards("out/", skip_bad_shards=True, report=report))  # doctest: +SKIP
      >>> report.summary()  # doctest: +SKIP
      {'shards': 4, 'read': 3, 'rows': 3000, 'skipped': [{'path': 'out/part-00002-of-00004.parquet', ...}]}
    """

    shards: int = 0
    read: int = 0
    rows: int = 0
    skipped: list[SkippedShard] = dataclasses.field(default_factory=list)

    def summary(self) -> dict:
        """JSON-able counts and the skipped shards."""
        return {
            "shards": self.shards,
            "read": self.read,
            "rows": self.rows,
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
        }


def shard_paths(directory_or_files: str | os.PathLike | Sequence[str]) -> list[str]:
    """The shard files of a directory, or the files a path, glob or list of them names.

    A directory gives its `.parquet`/`.tfrecord`/`.tfrecords`/`.arrow` files, sorted, hidden
    and `_` files left out.

    Raises:
      FileNotFoundError: nothing found.
      ValueError: a named file is not a `.parquet`, `.tfrecord` or `.arrow` shard.
    """
    from apache_beam.io.filesystems import FileSystems

    from sparse_io.locations import is_directory
    from sparse_io.readers._source import expand_paths, is_local

    if isinstance(directory_or_files, (str, os.PathLike)):
        location = os.fspath(directory_or_files)
        if is_local(location) and os.path.isdir(location):
            names = sorted(n for n in os.listdir(location) if shard_format_of(n) and not n.startswith((".", "_")))
            if not names:
                raise FileNotFoundError(f"no .parquet, .tfrecord or .arrow shard in {location!r}")
            return [os.path.join(location, n) for n in names]
        if not is_local(location) and is_directory(location):
            found = [m.path for r in FileSystems.match([FileSystems.join(location, "part-*")]) for m in r.metadata_list]
            found = sorted(p for p in found if shard_format_of(p))
            if not found:
                raise FileNotFoundError(f"no .parquet, .tfrecord or .arrow shard in {location!r}")
            return found
    paths = expand_paths(directory_or_files)
    others = [p for p in paths if not shard_format_of(p)]
    if others:
        raise ValueError(f"not a .parquet, .tfrecord or .arrow shard: {others[0]!r}")
    return paths


def read_shard(path: str, schema: Schema | None = None, *, derive: bool = True) -> pa.Table:
    """A whole shard of any format (by its suffix) as a table; `schema` selects and checks the columns.

    The features `schema` marks derived at read (`FeatureSpec.at_read`) are computed from their source
    columns and appended, as every reader does; `derive=False` gives the columns the file holds.

    Raises:
      ValueError: not a shard suffix, a TFRecord shard without `schema`, a
        column missing or of another type.
      CorruptFileError: the shard is damaged (its format's own check).
    """
    fmt = shard_format_for(path)
    if fmt is None:
        raise ValueError(f"not a {suffix_list()} shard: {path!r}")
    if schema is None:
        return fmt.read(path, schema)
    found = [derived_of_feature(f) for f in schema if f.at_read] if derive else []
    derived = [f for f in found if f is not None]  # at_read implies a transform (FeatureSpec checks it)
    missing = sorted({f.source for f in derived} - set(schema.names))
    if missing:
        raise ValueError(f"{path}: the schema names features derived at read from {missing}, which it does not "
                         "name: a schema that selects columns keeps their sources")
    table = fmt.read(path, schema.stored())
    return append_derived_columns(table, derived) if derived else table


def write_shard(
    path: str,
    batches,
    schema: Schema,
    *,
    row_group_size: int,
    compression: str | None = None,
    output_root: str | None = None,
) -> int:
    """Writes one shard in the format its suffix names, atomically; returns its rows.

    `row_group_size` is the Parquet row group or Arrow record batch size;
    `compression` the format's codec (None: its default; TFRecord takes none).
    """
    fmt = shard_format_for(path)
    if fmt is None:
        raise ValueError(f"not a {suffix_list()} shard name: {path!r}")
    return fmt.write(path, batches, schema, row_group_size=row_group_size, compression=compression,
                     output_root=output_root)


def _schema_beside(paths: list[str]) -> Schema | None:
    from apache_beam.io.filesystems import FileSystems

    directory = FileSystems.split(paths[0])[0]
    candidate = FileSystems.join(directory, SCHEMA_FILE)
    return Schema.load(candidate) if FileSystems.exists(candidate) else None


def iter_shards(
    directory_or_files: str | os.PathLike | Sequence[str],
    *,
    schema: Schema | None = None,
    skip_bad_shards: bool = False,
    report: ShardReport | None = None,
    verify: str = "sizes",
) -> Iterator[pa.Table]:
    """Yields every shard of a directory (or of the files named) as a table, in name order.

    Args:
      directory_or_files: a shard directory, or a shard path, glob, or list
        of them (local or any FileSystems URL).
      schema: the columns to read; by default the `schema.json` beside the
        shards when there is one. TFRecord shards need one.
      skip_bad_shards: a damaged shard (`CorruptFileError`: truncated,
        corrupted, not in its format) is left out, logged, and listed in
        `report.skipped` instead of raising. Other errors (a schema
        mismatch, a missing file) always raise.
      report: filled in with what was found, read and skipped.
      verify: how much of the directory's `_MANIFEST.json` is checked before
        anything is read (`sparse_io.manifest`): "sizes" (every file there
        with its size, no other), "checksums" (and every byte), "none" (for
        shards written without a manifest). Named files are checked against
        their directory's manifest, with every non-shard file it lists. A
        directory is a directory whatever its name holds (`[`, `*`, `?`).
        Each shard read must then be the file verified (its size, mtime and
        inode, `sparse_io.pins`) holding the rows its manifest lists; its
        format's own checks (Parquet page checksums, Arrow record-batch
        checksums, TFRecord CRCs) run at every level.

    Raises:
      ManifestError: (a ValueError) no manifest, or files that differ from it;
        ChangedFileError (one) for a shard replaced since the check.
      CorruptFileError: a damaged shard (or one holding other rows than its
        manifest lists) when `skip_bad_shards` is False.
      FileNotFoundError: no shard found.
      ValueError: a named file is no shard, TFRecord shards without a
        schema, a shard lacking a schema column.

    Example:
      >>> import os, tempfile
      >>> from sparse_io.manifest import commit_directory
      >>> from sparse_io.schema import FeatureSpec
      >>> out = tempfile.mkdtemp()
      >>> s = Schema([FeatureSpec("label", "label"), FeatureSpec("items")])
      >>> b = pa.record_batch({"label": [1, 0], "items": [[3, 4], []]}, schema=s.arrow_schema())
      >>> write_shard(os.path.join(out, "part-00000-of-00001.parquet"), [b], s, row_group_size=1024)
      2
      >>> _ = s.save(out); _ = commit_directory(out)
      >>> report = ShardReport()
      >>> sum(t.num_rows for t in iter_shards(out, skip_bad_shards=True, report=report))
      2
      >>> report.skipped  # a SkippedShard(path, reason) for each damaged shard
      []
    """
    from sparse_io.locations import is_directory
    from sparse_io.manifest_format import check_verify_level
    from sparse_io.manifest_verify import verify_directory, verify_paths
    from sparse_io.pins import pin_shards

    check_verify_level(verify)
    location = os.fspath(directory_or_files) if isinstance(directory_or_files, (str, os.PathLike)) else None
    # A directory first, whatever its name holds: "out[1]" is a directory, checked whole, not a glob.
    whole = location is not None and is_directory(location)
    paths = shard_paths(directory_or_files)
    if location is not None and whole:
        verify_directory(location, verify)
    else:
        verify_paths(paths, verify)
    pins = pin_shards(paths, verify)  # each shard read must be the file verified, holding its manifest's rows
    if schema is None:
        schema = _schema_beside(paths)
    if schema is None and any(not fmt.self_describing for p in paths if (fmt := shard_format_for(p))):
        raise ValueError(f"reading TFRecord shards needs a schema: none given and no {SCHEMA_FILE} beside them")
    report = report if report is not None else ShardReport()
    report.shards += len(paths)
    for path, pin in zip(paths, pins):
        try:
            table = read_shard(path, schema)
            pin.check()
            pin.check_rows(table.num_rows)
        except CorruptFileError as e:
            if not skip_bad_shards:
                raise
            report.skipped.append(SkippedShard(path, e.reason))
            _log.warning("skipping damaged shard %s: %s", path, e.reason)
            continue
        report.read += 1
        report.rows += table.num_rows
        yield table
