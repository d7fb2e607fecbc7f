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

This module is the public face; the parts live in modules of one job each:
`sparse_io.manifest_format` (the format, `ManifestError`, well-formedness),
`sparse_io.manifest_entries` (one file's size, checksum and row count),
`sparse_io.manifest_write` (`build_manifest`, `commit_directory`),
`sparse_io.manifest_verify` (reading and verifying) and
`sparse_io.locations` (local and remote paths, listings).
"""

from __future__ import annotations

from sparse_io.locations import is_directory
from sparse_io.manifest_entries import file_checksum
from sparse_io.manifest_format import LOCK_FILE, MANIFEST_FILE, VERIFY_LEVELS, ManifestError, check_verify_level
from sparse_io.manifest_verify import (
    directory_differences,
    read_manifest,
    read_verified,
    verify_directory,
    verify_paths,
)
from sparse_io.manifest_write import build_manifest, commit_directory

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
