"""`python -m pipelines.convert SRC DST --format arrow`: an ingest output in another shard format.

Reads every shard of SRC (Parquet, TFRecord or Arrow; local or gs://),
checked against SRC's `_MANIFEST.json` first, and writes the same rows, in
the same order, to DST as shards of `--format` with the same names
(`part-00000-of-00004.arrow` for `part-00000-of-00004.parquet`) and, by
default, the same unit size (Parquet row groups, Arrow record batches), so
`make_dataset` reads the same batches from both, shuffled or not. Every other
file the manifest lists (schema.json, stats.json, vocabularies, the report)
is copied byte for byte, and DST is committed with a manifest that keeps
SRC's config, inputs and totals. Converting back gives the same rows.

The common use: training reads the same shards for many epochs, and Arrow
shards on local disk are read memory-mapped, without decoding, where
Parquet is decoded again every epoch; so the shards kept on gs:// as
Parquet (small) are converted once into a local training cache::

    $ python -m pipelines.convert gs://bucket/criteo/train /mnt/cache/train --format arrow
    pipelines.convert: 64/64 shards, 45,840,617 rows: gs://bucket/criteo/train -> /mnt/cache/train (arrow)

DST must not exist or be an empty directory: nothing there is ever deleted
or overwritten. While it runs, DST's `_INGEST.lock` (`pipelines.output_lock`)
keeps out a second convert or an ingest into it: they are refused at once.
Memory holds one shard at a time. DST is committed last, and
its manifest must count as many rows as SRC's; a conversion that fails
part-way leaves DST without a manifest, which every reader refuses: remove it
and convert again.

Exit status: 0 when DST is committed; 2 for bad flags, a SRC that is not a
committed output (or differs from its manifest), or a DST that is not
empty or that another convert or ingest is writing; 1 for an internal error, with one line saying so.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from sparse_io.locations import is_remote, join

__all__ = ["convert_output", "main"]

_LOGGER = logging.getLogger("sparseflow.convert")


def _parser() -> argparse.ArgumentParser:
    from pipelines import cli
    from sparse_io.formats import SHARD_FORMATS
    from sparse_io.shard_batches import DEFAULT_ROW_GROUP_SIZE

    p = cli.parser(
        "pipelines.convert",
        __doc__,
        "SRC DST --format {parquet,tfrecord,arrow} [--compression CODEC] [--row_group_size N] [--verify LEVEL]",
    )
    p.add_argument("source", metavar="SRC", help="a committed output directory (local or gs://)")
    p.add_argument("destination", metavar="DST", help="a new or empty directory (local or gs://)")
    p.add_argument("--format", required=True, choices=SHARD_FORMATS, help="the shard format to write")
    p.add_argument("--compression", default=None,
                   help="the codec of the new shards (default: the format's: Parquet zstd, Arrow none)")
    p.add_argument("--row_group_size", type=int, default=None,
                   help="rows per Parquet row group or Arrow record batch (default: SRC's; "
                   f"{DEFAULT_ROW_GROUP_SIZE} from TFRecord)")
    p.add_argument("--verify", choices=("sizes", "checksums"), default="sizes",
                   help="how much of SRC's manifest is checked before reading")
    return p


def _is_empty_or_absent(path: str) -> bool:
    """Whether `path` holds nothing but (at most) this run's lock."""
    from sparse_io.manifest import LOCK_FILE

    if not is_remote(path):
        return not os.path.exists(path) or (os.path.isdir(path) and not set(os.listdir(path)) - {LOCK_FILE})
    from apache_beam.io.filesystems import FileSystems  # remote paths only: a local check needs no Beam

    prefix = path.rstrip("/") + "/"
    return not any(m.path != prefix + LOCK_FILE for r in FileSystems.match([prefix + "**"]) for m in r.metadata_list)




def _unit_size(path: str) -> int | None:
    """The rows of the first row group (Parquet) or record batch (Arrow) of a shard; None for TFRecord or none."""
    from sparse_io.shard_files import open_shard
    from sparse_io.shard_formats import shard_format_for

    fmt = shard_format_for(path)
    if fmt is None or not fmt.columnar:
        return None
    with open_shard(path, fmt.name) as shard:
        return shard.unit_rows[0] if shard.unit_rows else None


def _copy(source: str, target: str, output_root: str) -> None:
    """Copies a file's bytes as they are (a compressed file stays compressed)."""
    from apache_beam.io.filesystems import FileSystems

    from sparse_io.atomic import atomic_output

    opened = open(source, "rb") if not is_remote(source) else FileSystems.open(source, compression_type="uncompressed")
    with opened as src, atomic_output(target, output_root=output_root) as dst:
        while chunk := src.read(8 << 20):
            dst.write(chunk)


def convert_output(
    source: str,
    destination: str,
    shard_format: str,
    *,
    compression: str | None = None,
    row_group_size: int | None = None,
    verify: str = "sizes",
) -> dict:
    """Writes `source`'s rows to `destination` as `shard_format` shards and commits it; returns its manifest.

    `row_group_size`: rows per Parquet row group or Arrow record batch;
    None: the source's (the largest first unit of its shards), or
    `DEFAULT_ROW_GROUP_SIZE` from TFRecord shards.

    Raises:
      ManifestError: `source` has no manifest or differs from it.
      UsageError: `destination` exists and is not empty, or another convert
        or ingest is writing to it (its lock); `source` and `destination`
        are the same directory.
      ValueError: a bad format, codec or `row_group_size`.
      CorruptFileError: a damaged shard in `source`.
    """
    from pipelines.errors import UsageError
    from pipelines.output_lock import acquire_output_lock
    from sparse_io.formats import SHARD_FORMATS, check_shard_codec
    from sparse_io.manifest import verify_directory

    if shard_format not in SHARD_FORMATS:
        raise ValueError(f"format must be one of {', '.join(SHARD_FORMATS)}, got {shard_format!r}")
    if compression is not None:
        check_shard_codec(compression, shard_format)
    if row_group_size is not None and (
        isinstance(row_group_size, bool) or not isinstance(row_group_size, int) or row_group_size <= 0
    ):
        raise ValueError(f"row_group_size must be a positive integer, got {row_group_size!r}")
    if os.path.abspath(source.rstrip("/")) == os.path.abspath(destination.rstrip("/")):
        raise UsageError(f"{destination}: SRC and DST are the same directory")
    if not _is_empty_or_absent(destination):  # before the lock, which would create DST
        raise UsageError(f"{destination}: exists and is not empty; convert into a new directory")
    if not is_remote(destination) and os.path.islink(destination):
        raise UsageError(f"{destination}: is a symbolic link; give the real directory")
    verify_directory(source, verify)  # a source refused leaves DST as it was
    _check_derived_at_read(source, shard_format)
    with acquire_output_lock(destination, [], program="convert"):
        # Emptiness again, holding the lock: a run that finished meanwhile left its files.
        if not _is_empty_or_absent(destination):
            raise UsageError(f"{destination}: exists and is not empty; convert into a new directory")
        return _convert(source, destination, shard_format, compression, row_group_size, verify)


def _check_derived_at_read(source: str, shard_format: str) -> None:
    """Refuses TFRecord as the target of shards with features derived at read: its reader cannot derive them."""
    from sparse_io.schema import SCHEMA_FILE, Schema
    from sparse_io.shard_formats import shard_format as shard_format_named

    at_read = [f.name for f in Schema.load(join(source, SCHEMA_FILE)) if f.at_read]
    if at_read and not shard_format_named(shard_format).columnar:
        raise ValueError(f"{source}: feature(s) {at_read} are derived at read (schema.json's at_read), which "
                         f"{shard_format} shards cannot do; convert to parquet or arrow, or ingest with "
                         "output.derived: stored")


def _convert(source: str, destination: str, shard_format: str, compression: str | None,
             row_group_size: int | None, verify: str) -> dict:
    from sparse_io.manifest import commit_directory, read_manifest
    from sparse_io.pins import pin_shards
    from sparse_io.schema import SCHEMA_FILE, Schema
    from sparse_io.shard_batches import DEFAULT_ROW_GROUP_SIZE
    from sparse_io.shard_formats import shard_format as shard_format_named
    from sparse_io.shard_set import read_shard, write_shard
    from sparse_io.write_records import mark

    manifest = read_manifest(source)
    schema = Schema.load(join(source, SCHEMA_FILE))
    schema = schema.stored()  # what the files hold; schema.json (copied) keeps the features derived at read
    if not is_remote(destination):
        os.makedirs(destination, exist_ok=True)
    # What was written is checksummed as it is written: the commit reads none of it back.
    began, records = mark(), {}
    for entry in manifest.get("files", []):
        _copy(join(source, entry["path"]), join(destination, entry["path"]), destination)
        _recorded(records, destination, entry["path"], began)
    shards = manifest["shards"]
    # Each shard read must be the file verified, holding the rows the manifest lists.
    pins = pin_shards([join(source, e["path"]) for e in shards], verify)
    if row_group_size is None:
        # The largest first unit: a shard smaller than one unit holds a single, smaller one.
        found = [size for e in shards if (size := _unit_size(join(source, e["path"]))) is not None]
        row_group_size = max(found, default=DEFAULT_ROW_GROUP_SIZE)
        _LOGGER.info("%s rows per row group / record batch", f"{row_group_size:,}")
    rows = 0
    started = time.monotonic()
    for done, (entry, pin) in enumerate(zip(shards, pins), 1):
        name = entry["path"]
        stem = os.path.splitext(name)[0]
        table = read_shard(join(source, name), schema, derive=False)
        pin.check()
        pin.check_rows(table.num_rows)
        target = join(destination, stem + shard_format_named(shard_format).suffix)
        written = write_shard(target, [table], schema, row_group_size=row_group_size, compression=compression,
                              output_root=destination)
        rows += written
        _recorded(records, destination, os.path.basename(target), began, rows=written)
        del table
        _LOGGER.info("%d/%d shards, %s rows (%.0f s)", done, len(shards), f"{rows:,}", time.monotonic() - started)
    totals = dict(manifest.get("totals") or {})
    return commit_directory(destination, config=manifest.get("config"), inputs=manifest.get("inputs"),
                            totals=totals, records=records)


def _recorded(records: dict, destination: str, relative: str, began: int, rows: int | None = None) -> None:
    """Adds what this process recorded of `destination/relative` since `began` (nothing: the commit reads it)."""
    from sparse_io.write_records import take_record

    found = take_record(join(destination, relative), since=began)
    if found is not None:
        records[relative] = {"crc32c": found[0], "bytes": found[1], **({} if rows is None else {"rows": rows})}


def main(argv: list[str] | None = None) -> None:
    """Runs `python -m pipelines.convert` with `argv` (default: the command line); exits as the module doc says."""
    from pipelines import cli
    from sparse_io.formats import check_shard_codec

    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.compression is not None:
        try:
            check_shard_codec(args.compression, args.format)
        except ValueError as e:
            parser.error(f"--compression: {e}")
    if args.row_group_size is not None and args.row_group_size <= 0:
        parser.error(f"--row_group_size must be a positive integer, got {args.row_group_size}")
    cli.configure_logging(args.verbose)
    with cli.cli_errors("pipelines.convert"):
        manifest = convert_output(
            args.source,
            args.destination,
            args.format,
            compression=args.compression,
            row_group_size=args.row_group_size,
            verify=args.verify,
        )
        rows = sum(e["rows"] for e in manifest["shards"])
        print(
            f"pipelines.convert: {len(manifest['shards'])}/{len(manifest['shards'])} shards, {rows:,} rows: "
            f"{args.source} -> {args.destination} ({args.format})"
        )


if __name__ == "__main__":
    main()
