"""The commit record of an output directory: `_MANIFEST.json`, written last, atomically.

A directory of shards is an output only when its `_MANIFEST.json` lists
exactly the files there: every shard with its row count, byte size and
checksum, and every other file (schema.json, stats.json, vocab/, errors/...)
with its size and checksum, plus what the writer records about the run (its
config, its input files with their sizes, and the totals rows in, rows out,
bad). Writers write it after every other file (`commit_directory`), and
readers check the directory against it before reading (`verify_directory`,
`verify_paths`), so a killed, failed or half-copied output is refused
instead of read short.

Checksums are CRC-32C (Castagnoli), the checksum Cloud Storage keeps for
every object and TFRecord frames use, computed by google-crc32c's
hardware-accelerated C code (several GB/s), as 8 lowercase hex digits.

Verification levels:
  "sizes"      (the default) the manifest is there and well formed (every
               field of the right type: `ManifestError` naming the one that
               is not), its rows_out total equals its shards' rows; every file
               it lists exists with its byte size, and no other file is there.
               One directory listing: cheap at any size.
  "checksums"  "sizes", and every file's content matches its checksum and
               every shard its row count (reads every byte).
  "none"       nothing is checked: for shards written by other tools.

A glob or list of shards (`verify_paths`) is checked to the same level: the
named shards, and every other file the manifest lists (schema.json,
stats.json, vocab/...), since readers take those from beside the shards.

The lock file of a running ingest (`LOCK_FILE`) is not part of an output.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence

from sparse_io import output_files
from sparse_io.locations import exists, is_remote, join, open_binary
from sparse_io.shard_formats import ShardFormat, shard_format_for, suffix_list
from sparse_io.write_records import WRITE_RECORDS_FILE, parse_write_records

__all__ = [
    "MANIFEST_FILE",
    "LOCK_FILE",
    "VERIFY_LEVELS",
    "ManifestError",
    "build_manifest",
    "commit_directory",
    "read_manifest",
    "directory_differences",
    "verify_directory",
    "verify_paths",
    "read_verified",
    "is_directory",
    "check_verify_level",
    "file_checksum",
]

MANIFEST_FILE = output_files.MANIFEST_FILE
LOCK_FILE = "_INGEST.lock"
VERIFY_LEVELS = ("sizes", "checksums", "none")
FORMAT = "sparseflow-manifest"
VERSION = 1
_TMP_PREFIX = ".tmp-"
_CHUNK = 4 << 20
_NOT_OUTPUT_FILES = (MANIFEST_FILE, LOCK_FILE)


class ManifestError(ValueError):
    """A directory is not a complete output: no manifest, or files that differ from it (one line)."""


def check_verify_level(level: str) -> str:
    """Returns `level` when it is one of `VERIFY_LEVELS`; ValueError otherwise."""
    if level not in VERIFY_LEVELS:
        raise ValueError(f"verify must be one of {list(VERIFY_LEVELS)}, got {level!r}")
    return level


# --- the file system: local paths through os, others through TensorFlow (if loaded) or Beam ---------------


def _list_files(directory: str) -> dict[str, int]:
    """The byte size of every file under `directory` (recursively), by relative path."""
    found = {}
    if not is_remote(directory):
        for root, _, names in os.walk(directory):
            for name in names:
                path = os.path.join(root, name)
                found[os.path.relpath(path, directory).replace(os.sep, "/")] = os.stat(path).st_size
        return found
    prefix = directory.rstrip("/") + "/"
    # Beam's match lists names with their sizes in one paginated listing; tf.io.gfile would stat file by file.
    from apache_beam.io.filesystems import FileSystems

    for result in FileSystems.match([prefix + "**"]):
        for m in result.metadata_list:
            found[m.path[len(prefix):]] = m.size_in_bytes
    return found


def _directory_exists(path: str) -> bool:
    # Locally a file is not a directory; a remote prefix exists as soon as anything is under it.
    return os.path.isdir(path) if not is_remote(path) else exists(path)


# --- checksums and row counts ------------------------------------------------------------------------------


def _scan(path: str, counter=None) -> tuple[str, int, int | None]:
    """(crc32c hex, bytes, records the `counter` counted or None) of a file, read once in chunks."""
    import google_crc32c

    crc, size = 0, 0
    with open_binary(path) as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            crc = google_crc32c.extend(crc, chunk)
            size += len(chunk)
            if counter is not None:
                counter.feed(chunk)
    records = None
    if counter is not None:
        if not counter.complete:
            raise ManifestError(f"{path}: ends inside a TFRecord frame (truncated)")
        records = counter.records
    return f"{crc:08x}", size, records


def file_checksum(path: str) -> str:
    """The CRC-32C of a file's bytes as 8 hex digits (local or any remote path).

    Example:
      >>> import tempfile; p = os.path.join(tempfile.mkdtemp(), "a.bin")
      >>> _ = open(p, "wb").write(b"123456789")
      >>> file_checksum(p)  # the CRC-32C check value
      'e3069283'
    """
    return _scan(path)[0]


def _shard_format(relative: str) -> ShardFormat | None:
    """The format of a top-level shard (by its suffix, `sparse_io.shard_formats`); None for any other file."""
    return shard_format_for(relative) if "/" not in relative else None


def _describe(directory: str, relative: str) -> dict:
    from sparse_io.errors import CorruptFileError

    path = join(directory, relative)
    fmt = _shard_format(relative)
    counter = fmt.frame_counter() if fmt is not None else None
    crc, size, records = _scan(path, counter)
    entry = {"path": relative, "bytes": size, "crc32c": crc}
    if fmt is not None:
        if records is None:
            try:
                records = fmt.count_rows(path)
            except CorruptFileError as e:
                raise ManifestError(f"{path}: not a readable {fmt.title} shard ({e.reason})") from None
        entry["rows"] = records
    return entry


def _recorded(directory: str, relative: str, size: int, record: dict) -> dict:
    """A manifest entry from a writer's record: no byte read; the file must still have the recorded size."""
    path = join(directory, relative)
    crc, recorded, rows = record.get("crc32c"), record.get("bytes"), record.get("rows")
    if not (isinstance(crc, str) and len(crc) == 8 and _is_count(recorded)):
        raise ManifestError(f"{path}: its write record is malformed ({record!r})")
    if size != recorded:
        raise ManifestError(f"{path}: has {size} bytes, its writer recorded {recorded} (changed since it was written)")
    entry = {"path": relative, "bytes": recorded, "crc32c": crc}
    if _shard_format(relative) is not None:
        if not _is_count(rows):
            raise ManifestError(f"{path}: its write record has no row count")
        entry["rows"] = rows
    return entry


# --- writing -----------------------------------------------------------------------------------------------


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
    on_disk = _list_files(directory)
    if WRITE_RECORDS_FILE in on_disk:  # left by the shard writer (transforms.beam.WriteShards): not an output file
        with open_binary(join(directory, WRITE_RECORDS_FILE)) as f:
            try:
                left = parse_write_records(f.read(), join(directory, WRITE_RECORDS_FILE))
            except ValueError as e:
                raise ManifestError(str(e)) from None
        records = {**left, **(records or {})}
        del on_disk[WRITE_RECORDS_FILE]
    if files is None:
        names = sorted(n for n in on_disk if n not in _NOT_OUTPUT_FILES)
        unfinished = [n for n in names if n.rsplit("/", 1)[-1].startswith(_TMP_PREFIX)]
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
    entries = [_recorded(directory, n, on_disk[n], recorded[n]) if n in recorded else _describe(directory, n)
               for n in names]
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
    _remove_write_records(directory)
    atomic_write_text(join(directory, MANIFEST_FILE), json.dumps(manifest, indent=1, sort_keys=True) + "\n",
                      output_root=output_root)
    return manifest


def _remove_write_records(directory: str) -> None:
    path = join(directory, WRITE_RECORDS_FILE)
    if not is_remote(path):
        if os.path.lexists(path):
            os.remove(path)
        return
    from apache_beam.io.filesystems import FileSystems

    if FileSystems.exists(path):
        FileSystems.delete([path])


# --- reading and verifying ---------------------------------------------------------------------------------


def _no_manifest(directory: str) -> ManifestError:
    return ManifestError(
        f"{directory}: no {MANIFEST_FILE}, so not a complete output (an ingest that failed, was killed or is still "
        "running, or shards written by other means: commit them with sparse_io.manifest.commit_directory, or read "
        "them with verify='none')"
    )


def read_manifest(directory: str | os.PathLike) -> dict:
    """The parsed `_MANIFEST.json` of `directory`.

    Raises:
      ManifestError: there is none, it is not a manifest (not JSON, another
        format or version, a directory), or a field is missing or of the
        wrong type (one line naming the field: `shards[2] (part-...) has no
        "bytes" count`).
    """
    directory = os.fspath(directory)
    path = join(directory, MANIFEST_FILE)
    try:
        with open_binary(path) as f:
            text = f.read()
    except (FileNotFoundError, NotADirectoryError):
        raise _no_manifest(directory) from None
    except IsADirectoryError:
        raise ManifestError(f"{path}: a directory, not a file") from None
    except Exception as e:  # remote file systems raise their own not-found errors
        if not _directory_exists(directory) or "not found" in str(e).lower() or "no such" in str(e).lower():
            raise _no_manifest(directory) from None
        raise
    try:
        manifest = json.loads(text)
        ok = manifest.get("format") == FORMAT and isinstance(manifest.get("shards"), list)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise ManifestError(f"{path}: not a sparseflow manifest (unreadable JSON or missing fields)")
    if manifest.get("version") != VERSION:
        raise ManifestError(f"{path}: manifest version {manifest.get('version')!r}; this reader knows {VERSION}")
    fault = _malformed(manifest)
    if fault:
        raise ManifestError(f"{path}: malformed manifest: {fault}")
    return manifest


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry_fault(entry, where: str, shard: bool) -> str | None:
    """What is wrong with one `shards`/`files` entry, or None."""
    if not isinstance(entry, dict):
        return f"{where} is {type(entry).__name__}, not an object"
    relative = entry.get("path")
    if not isinstance(relative, str) or not relative:
        return f"{where} has no \"path\" string"
    parts = relative.split("/")
    if relative.startswith("/") or "\\" in relative or any(p in ("", ".", "..") for p in parts):
        return f"{where} has path {relative!r}, not a file inside the directory"
    if shard and _shard_format(relative) is None:
        return f"{where} has path {relative!r}, not a shard's name"
    if not _is_count(entry.get("bytes")):
        return f"{where} ({relative}) has no \"bytes\" count (got {entry.get('bytes')!r})"
    crc = entry.get("crc32c")
    if not isinstance(crc, str) or len(crc) != 8 or any(c not in "0123456789abcdef" for c in crc):
        return f"{where} ({relative}) has no 8-hex-digit \"crc32c\" (got {crc!r})"
    if shard and not _is_count(entry.get("rows")):
        return f"{where} ({relative}) has no \"rows\" count (got {entry.get('rows')!r})"
    return None


def _malformed(manifest: dict) -> str | None:
    """The first field of a parsed manifest of the wrong type or missing, as a phrase; None when well formed."""
    files = manifest.get("files", [])
    if not isinstance(files, list):
        return f"\"files\" is {type(files).__name__}, not a list"
    seen: set[str] = set()
    for key, entries in (("shards", manifest["shards"]), ("files", files)):
        for i, entry in enumerate(entries):
            fault = _entry_fault(entry, f"{key}[{i}]", key == "shards")
            if fault:
                return fault
            if entry["path"] in seen:
                return f"{key}[{i}] lists {entry['path']} a second time"
            seen.add(entry["path"])
    totals = manifest.get("totals")
    if totals is not None and not isinstance(totals, dict):
        return f"\"totals\" is {type(totals).__name__}, not an object"
    for name in ("rows_in", "rows_out", "bad"):
        value = (totals or {}).get(name)
        if value is not None and not _is_count(value):
            return f"totals.{name} is {value!r}, not a count"
    return None


def _entries(manifest: dict) -> dict[str, dict]:
    return {e["path"]: e for e in manifest["shards"] + manifest.get("files", [])}


def _differences(directory: str, manifest: dict, on_disk: dict[str, int], names: Iterable[str] | None,
                 level: str) -> list[str]:
    listed = _entries(manifest)
    problems = []
    if names is None:  # the whole directory: nothing may be missing or extra
        for name in sorted(listed):
            if name not in on_disk:
                problems.append(f"{name} is missing")
        for name in sorted(on_disk):
            if name not in listed and name not in _NOT_OUTPUT_FILES:
                problems.append(f"{name} is not in the manifest")
        names = [n for n in sorted(listed) if n in on_disk]
    else:
        names = list(names)
        for name in names:
            if name not in listed:
                problems.append(f"{name} is not in the manifest")
            elif name not in on_disk:
                problems.append(f"{name} is missing")
        names = [n for n in names if n in listed and n in on_disk]
    for name in names:
        entry = listed[name]
        if on_disk[name] != entry["bytes"]:
            problems.append(f"{name} has {on_disk[name]} bytes, the manifest says {entry['bytes']}")
            continue
        if level != "checksums":
            continue
        found = _describe(directory, name)
        if found["crc32c"] != entry["crc32c"]:
            problems.append(f"{name} has checksum {found['crc32c']}, the manifest says {entry['crc32c']}")
        elif "rows" in entry and found.get("rows") != entry["rows"]:
            problems.append(f"{name} holds {found.get('rows')} rows, the manifest says {entry['rows']}")
    return problems


def _raise(directory: str, problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more difference(s))" if len(problems) > 1 else ""
        raise ManifestError(f"{directory}: differs from its {MANIFEST_FILE}: {problems[0]}{more}")


def directory_differences(directory: str | os.PathLike, level: str = "checksums") -> tuple[dict, list[str]]:
    """(manifest, every difference found as a line) for `directory`; ManifestError when it has no manifest."""
    check_verify_level(level)
    directory = os.fspath(directory)
    manifest = read_manifest(directory)
    problems = _differences(directory, manifest, _list_files(directory), None, level) + _total_differences(manifest)
    return manifest, problems


def _total_differences(manifest: dict) -> list[str]:
    """The manifest's rows_out total against its shards' rows: cheap (the manifest alone), so at every level."""
    rows = sum(e["rows"] for e in manifest["shards"])
    rows_out = (manifest.get("totals") or {}).get("rows_out")
    if rows_out is not None and rows_out != rows:
        return [f"the shards are listed with {rows} rows but the totals say rows_out {rows_out}"]
    return []


def verify_directory(directory: str | os.PathLike, level: str = "sizes") -> dict | None:
    """Checks that `directory` is a complete output, to `level`; returns its manifest (None for "none").

    Raises:
      ManifestError: no manifest, or the first difference found (one line,
        with how many more there are).
      ValueError: an unknown `level`.

    Example:
      >>> verify_directory("out/train")  # doctest: +SKIP
      ManifestError: out/train: differs from its _MANIFEST.json: part-00001-of-00002.parquet is missing
    """
    if check_verify_level(level) == "none":
        return None
    manifest, problems = directory_differences(directory, level)
    _raise(os.fspath(directory), problems)
    return manifest


def _split(path: str) -> tuple[str, str]:
    if not is_remote(path):
        return os.path.split(os.path.abspath(path))
    head, _, tail = path.rstrip("/").rpartition("/")
    return head, tail


def verify_paths(paths: Sequence[str], level: str = "sizes") -> None:
    """Checks that each shard file named is listed, with its size (and checksum), in its directory's manifest.

    For a glob or a list of shards rather than a whole directory: files the
    manifest does not list, or whose size differs, are refused. Every other
    file the manifest lists beside the shards (schema.json, stats.json,
    vocab/ files, the dead letters) is checked to the same level, since
    readers take them from there: only the shards left unnamed are not.

    Raises:
      ManifestError: a directory without a manifest, or the first difference.
      ValueError: an unknown `level`.
    """
    if check_verify_level(level) == "none":
        return
    by_directory: dict[str, list[str]] = {}
    for path in paths:
        directory, name = _split(os.fspath(path))
        by_directory.setdefault(directory, []).append(name)
    for directory, names in sorted(by_directory.items()):
        manifest = read_manifest(directory)
        names = names + [e["path"] for e in manifest.get("files", []) if e["path"] not in names]
        sizes = {}
        for name in names:
            path = join(directory, name)
            if not is_remote(path):
                if os.path.isfile(path):
                    sizes[name] = os.stat(path).st_size
            else:
                sizes.update({n: s for n, s in _list_files(directory).items() if n in names})
                break
        _raise(directory, _differences(directory, manifest, sizes, names, level) + _total_differences(manifest))


def read_verified(directory: str | os.PathLike, relative: str, manifest: dict | None = None) -> bytes:
    r"""The bytes of a file of the output `directory`, once they match its manifest entry (size and CRC-32C).

    The file is read once and the check is made on the bytes returned, so
    what the caller uses is what was verified, even if the file changes
    meanwhile.

    Args:
      directory: the output directory (local or any FileSystems URL).
      relative: the file, relative to `directory` (`schema.json`, `vocab/C9.txt`).
      manifest: `directory`'s manifest, when already read (`read_manifest`).

    Raises:
      ManifestError: no manifest, the file not listed in it, missing, or of
        another size or checksum (one line naming the file).

    Example:
      >>> read_verified("out/train", "vocab/C9.txt")  # doctest: +SKIP
      b'C1\nC2\n'
    """
    import google_crc32c

    directory = os.fspath(directory)
    manifest = read_manifest(directory) if manifest is None else manifest

    def differs(problem: str) -> ManifestError:
        return ManifestError(f"{directory}: differs from its {MANIFEST_FILE}: {problem}")

    entry = _entries(manifest).get(relative)
    if entry is None:
        raise differs(f"{relative} is not in the manifest")
    try:
        with open_binary(join(directory, relative)) as f:
            data = f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise differs(f"{relative} is missing") from None
    crc = f"{google_crc32c.value(data):08x}"
    if len(data) != entry["bytes"]:
        raise differs(f"{relative} has {len(data)} bytes, the manifest says {entry['bytes']}")
    if crc != entry["crc32c"]:
        raise differs(f"{relative} has checksum {crc}, the manifest says {entry['crc32c']}")
    return data


def is_directory(path: str | os.PathLike) -> bool:
    """Whether `path` is a directory (local, or a prefix with objects under it), whatever characters it holds.

    Readers ask this first: a directory named `out[1]` or `runs*` is a
    directory, checked whole against its manifest, never a glob.
    """
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.isdir(path)
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        return bool(tf.io.gfile.isdir(path))
    from apache_beam.io.filesystems import FileSystems

    prefix = path.rstrip("/") + "/"
    return any(r.metadata_list for r in FileSystems.match([prefix + "*"], limits=[1]))
