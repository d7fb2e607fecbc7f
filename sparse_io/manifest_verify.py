"""Reading and verifying an output against its `_MANIFEST.json`, to a level ("sizes", "checksums", "none").

`read_manifest` parses and checks the record itself; `verify_directory`
(a whole directory), `verify_paths` (a glob or list of shards, and the files
beside them) and `read_verified` (one file's bytes) compare what is on disk
with it; `directory_differences` lists every difference for
`pipelines.verify`. See `sparse_io.manifest` for the levels and what each
checks.

Example:
  >>> import tempfile
  >>> verify_directory(tempfile.mkdtemp())  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ...
  sparse_io.manifest_format.ManifestError: ...: no _MANIFEST.json, so not a complete output ...
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

from sparse_io import manifest_entries
from sparse_io.locations import exists, is_remote, join, list_sizes, open_binary, split
from sparse_io.manifest_format import (
    FORMAT,
    MANIFEST_FILE,
    NOT_OUTPUT_FILES,
    VERSION,
    ManifestError,
    check_verify_level,
    entries_by_path,
    malformed,
)

__all__ = ["read_manifest", "directory_differences", "verify_directory", "verify_paths", "read_verified"]


def _directory_exists(path: str) -> bool:
    # Locally a file is not a directory; a remote prefix exists as soon as anything is under it.
    return os.path.isdir(path) if not is_remote(path) else exists(path)


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
    fault = malformed(manifest)
    if fault:
        raise ManifestError(f"{path}: malformed manifest: {fault}")
    return manifest


def _differences(directory: str, manifest: dict, on_disk: dict[str, int], names: Iterable[str] | None,
                 level: str) -> list[str]:
    listed = entries_by_path(manifest)
    problems = []
    if names is None:  # the whole directory: nothing may be missing or extra
        for name in sorted(listed):
            if name not in on_disk:
                problems.append(f"{name} is missing")
        for name in sorted(on_disk):
            if name not in listed and name not in NOT_OUTPUT_FILES:
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
        found = manifest_entries.describe(directory, name)
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
    problems = _differences(directory, manifest, list_sizes(directory), None, level) + _total_differences(manifest)
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
        directory, name = split(os.fspath(path))
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
                sizes.update({n: s for n, s in list_sizes(directory).items() if n in names})
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

    entry = entries_by_path(manifest).get(relative)
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
