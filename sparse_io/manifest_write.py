"""Writing the commit record: `build_manifest` describes a directory, `commit_directory` writes it last, atomically.

Every file is described (`sparse_io.manifest_entries`): read, or taken from
the records its writer left (`sparse_io.write_records`), which a commit uses
and then removes. See `sparse_io.manifest` for what the manifest promises.

Example:
  >>> import os, tempfile, pyarrow as pa
  >>> from sparse_io import FeatureSpec, Schema, write_parquet_shard
  >>> d = tempfile.mkdtemp(); schema = Schema([FeatureSpec("C1")])
  >>> write_parquet_shard(os.path.join(d, "part-00000-of-00001.parquet"), [pa.table({"C1": [[1], [2, 3]]})], schema)
  2
  >>> commit_directory(d)["totals"]
  {'rows_in': None, 'rows_out': 2, 'bad': None}
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterable, Mapping, Sequence

from sparse_io import manifest_entries
from sparse_io.locations import is_remote, join, list_sizes, open_binary, remove
from sparse_io.manifest_format import FORMAT, MANIFEST_FILE, NOT_OUTPUT_FILES, TMP_PREFIX, VERSION, ManifestError
from sparse_io.shard_formats import suffix_list
from sparse_io.write_records import WRITE_RECORDS_FILE, parse_write_records

__all__ = ["build_manifest", "commit_directory"]


def build_manifest(
    directory: str,
    files: Iterable[str] | None = None,
    *,
    config: dict | None = None,
    inputs: Sequence[dict] | None = None,
    totals: dict | None = None,
    records: Mapping[str, dict] | None = None,
) -> dict:
    """The manifest of `directory` as a dict (nothing is written; see `commit_directory`).

    `records` (`{relative path: {"bytes", "crc32c"[, "rows"]}}`, as the writers
    computed them while writing: `sparse_io.write_records`) describe those
    files without reading them; each must still have its recorded size on
    disk. Every other file is read.
    """
    directory = os.fspath(directory)
    on_disk = list_sizes(directory)
    if WRITE_RECORDS_FILE in on_disk:  # left by the shard writer (transforms.beam.WriteShards): not an output file
        with open_binary(join(directory, WRITE_RECORDS_FILE)) as f:
            try:
                left = parse_write_records(f.read(), join(directory, WRITE_RECORDS_FILE))
            except ValueError as e:
                raise ManifestError(str(e)) from None
        records = {**left, **(records or {})}
        del on_disk[WRITE_RECORDS_FILE]
    if files is None:
        names = sorted(n for n in on_disk if n not in NOT_OUTPUT_FILES)
        unfinished = [n for n in names if n.rsplit("/", 1)[-1].startswith(TMP_PREFIX)]
        if unfinished:
            raise ManifestError(
                f"{directory}: {unfinished[0]} is the temporary of an unfinished write; remove it before committing"
            )
    else:
        names = sorted({f.replace(os.sep, "/") for f in files})
        missing = [n for n in names if n not in on_disk]
        if missing:
            raise ManifestError(f"{directory}: cannot commit {missing[0]}: no such file")
    recorded = dict(records or {})
    entries = [manifest_entries.from_record(directory, n, on_disk[n], recorded[n]) if n in recorded
               else manifest_entries.describe(directory, n) for n in names]
    shards = [e for e in entries if "rows" in e]
    if not shards:
        raise ManifestError(f"{directory}: no {suffix_list()} shard to commit")
    others = [e for e in entries if "rows" not in e]
    rows_out = sum(e["rows"] for e in shards)
    record_totals = {"rows_in": None, "rows_out": rows_out, "bad": None}
    record_totals.update(totals or {})
    if record_totals["rows_out"] != rows_out:
        raise ManifestError(
            f"{directory}: the shards hold {rows_out} rows but the writer counted {record_totals['rows_out']}"
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "checksum": "crc32c",
        "shards": shards,
        "files": others,
        "config": config,
        "inputs": list(inputs or []),
        "totals": record_totals,
    }


def commit_directory(
    directory: str | os.PathLike,
    files: Iterable[str] | None = None,
    *,
    config: dict | None = None,
    inputs: Sequence[dict] | None = None,
    totals: dict | None = None,
    records: Mapping[str, dict] | None = None,
) -> dict:
    """Commits a directory of shards: writes its `_MANIFEST.json`, atomically, after reading every file not recorded.

    Use it after writing shards by any means other than the ingest (which
    commits its own output): `write_parquet_shard`/`write_tfrecord_shard`
    loops, copies, test fixtures. Readers (`make_dataset`, `iter_shards`,
    `pipelines.train`) refuse a directory without one.

    Args:
      directory: the output directory (local or any FileSystems URL).
      files: paths relative to `directory` to list; None lists every file
        under it (recursively), except the manifest and an ingest's lock.
        The records `transforms.beam.WriteShards` leaves beside its shards
        (`sparse_io.write_records`) are used, then removed: the shards
        and schema.json it wrote are not read back.
        Top-level `.parquet`/`.tfrecord` files are the shards. A file left
        out of the list makes readers refuse the directory (an extra file).
      config: JSON-able description of how the output was made (optional).
      inputs: the input files, e.g. `[{"path": "day_0.tsv", "bytes": 1234}]`.
      totals: `rows_in`, `bad` (and `rows_out`, which must then equal the
        rows the shards hold).
      records: what the writers recorded of files they wrote (see
        `build_manifest`): those files are not read back.

    Returns:
      The manifest written.

    Raises:
      ManifestError: no shard, a listed file missing, a `.tmp-*` temporary of
        an unfinished write present (with `files=None`), a Parquet shard
        without a readable footer, or a TFRecord shard
        cut inside a record.

    Example:
      >>> from sparse_io import write_parquet_shard, shard_name
      >>> from sparse_io.manifest import commit_directory
      >>> for i in range(2):  # doctest: +SKIP
      ...     write_parquet_shard(f"out/{shard_name(i, 2, '.parquet')}", batches[i], schema)
      >>> schema.save("out")  # doctest: +SKIP
      >>> commit_directory("out")["totals"]["rows_out"]  # doctest: +SKIP
      2000
    """
    from sparse_io.atomic import atomic_write_text

    directory = os.fspath(directory)
    manifest = build_manifest(directory, files, config=config, inputs=inputs, totals=totals, records=records)
    output_root = directory if not is_remote(directory) else None
    remove(join(directory, WRITE_RECORDS_FILE))
    atomic_write_text(join(directory, MANIFEST_FILE), json.dumps(manifest, indent=1, sort_keys=True) + "\n",
                      output_root=output_root)
    return manifest
