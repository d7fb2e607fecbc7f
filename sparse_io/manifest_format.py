r"""What a `_MANIFEST.json` is: its format tag and version, the verification levels, and its well-formedness.

`sparse_io.manifest` is the public face (its docstring tells the whole
contract); this module holds the vocabulary the writing side
(`sparse_io.manifest_write`) and the reading side (`sparse_io.manifest_verify`)
share: `ManifestError`, the names of the files that are not part of an
output, which listed path is a shard, and `malformed`, the check a parsed
manifest passes before anything trusts its fields.

Example:
  >>> check_verify_level("sizes")
  'sizes'
  >>> malformed({"shards": [{"path": "part-00000-of-00001.parquet", "bytes": 10, "crc32c": "0000000g"}]})
  'shards[0] (part-00000-of-00001.parquet) has no 8-hex-digit "crc32c" (got \'0000000g\')'
"""

from __future__ import annotations

from sparse_io import output_files
from sparse_io.shard_formats import ShardFormat, shard_format_for

__all__ = ["MANIFEST_FILE", "LOCK_FILE", "VERIFY_LEVELS", "FORMAT", "VERSION", "ManifestError", "check_verify_level",
           "malformed", "entries_by_path", "shard_format", "is_count"]

MANIFEST_FILE = output_files.MANIFEST_FILE
LOCK_FILE = "_INGEST.lock"
VERIFY_LEVELS = ("sizes", "checksums", "none")
FORMAT = "sparseflow-manifest"
VERSION = 1
TMP_PREFIX = ".tmp-"  # the temporaries of sparse_io.atomic's unfinished writes
NOT_OUTPUT_FILES = (MANIFEST_FILE, LOCK_FILE)


class ManifestError(ValueError):
    """A directory is not a complete output: no manifest, or files that differ from it (one line)."""


def check_verify_level(level: str) -> str:
    """Returns `level` when it is one of `VERIFY_LEVELS`; ValueError otherwise."""
    if level not in VERIFY_LEVELS:
        raise ValueError(f"verify must be one of {list(VERIFY_LEVELS)}, got {level!r}")
    return level


def shard_format(relative: str) -> ShardFormat | None:
    """The format of a top-level shard (by its suffix, `sparse_io.shard_formats`); None for any other file."""
    return shard_format_for(relative) if "/" not in relative else None


def is_count(value) -> bool:
    """Whether `value` is a count: a non-negative int (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def entry_fault(entry, where: str, shard: bool) -> str | None:
    """What is wrong with one `shards`/`files` entry, or None."""
    if not isinstance(entry, dict):
        return f"{where} is {type(entry).__name__}, not an object"
    relative = entry.get("path")
    if not isinstance(relative, str) or not relative:
        return f"{where} has no \"path\" string"
    parts = relative.split("/")
    if relative.startswith("/") or "\\" in relative or any(p in ("", ".", "..") for p in parts):
        return f"{where} has path {relative!r}, not a file inside the directory"
    if shard and shard_format(relative) is None:
        return f"{where} has path {relative!r}, not a shard's name"
    if not is_count(entry.get("bytes")):
        return f"{where} ({relative}) has no \"bytes\" count (got {entry.get('bytes')!r})"
    crc = entry.get("crc32c")
    if not isinstance(crc, str) or len(crc) != 8 or any(c not in "0123456789abcdef" for c in crc):
        return f"{where} ({relative}) has no 8-hex-digit \"crc32c\" (got {crc!r})"
    if shard and not is_count(entry.get("rows")):
        return f"{where} ({relative}) has no \"rows\" count (got {entry.get('rows')!r})"
    return None


def malformed(manifest: dict) -> str | None:
    """The first field of a parsed manifest of the wrong type or missing, as a phrase; None when well formed."""
    files = manifest.get("files", [])
    if not isinstance(files, list):
        return f"\"files\" is {type(files).__name__}, not a list"
    seen: set[str] = set()
    for key, entries in (("shards", manifest["shards"]), ("files", files)):
        for i, entry in enumerate(entries):
            fault = entry_fault(entry, f"{key}[{i}]", key == "shards")
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
        if value is not None and not is_count(value):
            return f"totals.{name} is {value!r}, not a count"
    return None


def entries_by_path(manifest: dict) -> dict[str, dict]:
    """Every file a well-formed manifest lists, shards and others, by relative path."""
    return {e["path"]: e for e in manifest["shards"] + manifest.get("files", [])}
