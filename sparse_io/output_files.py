"""The names of the files an ingest writes into its output directory, spelled once.

    <output>/
      part-00000-of-00004.parquet ...   the shards: `shard_name`, `parse_shard_name` (the suffix is the format's)
      schema.json                       SCHEMA_FILE: the features, how values became ids
      stats.json                        STATS_FILE: the statistics, capacities, validation
      vocab/<feature>.txt               VOCAB_DIR, `vocab_file`: one token a line, in id order
      errors/dead_letters.jsonl         ERRORS_DIR, DEAD_LETTERS_FILE: the records refused
      report.html                       REPORT_FILE: the statistics as a page
      _MANIFEST.json                    MANIFEST_FILE: the commit record, written last

Example:
  >>> vocab_file("C9"), DEAD_LETTERS_PATH
  ('vocab/C9.txt', 'errors/dead_letters.jsonl')
  >>> shard_name(3, 4, ".parquet")
  'part-00003-of-00004.parquet'
"""

from __future__ import annotations

import re

__all__ = ["SCHEMA_FILE", "STATS_FILE", "MANIFEST_FILE", "REPORT_FILE", "VOCAB_DIR", "ERRORS_DIR",
           "DEAD_LETTERS_FILE", "DEAD_LETTERS_PATH", "vocab_file", "shard_name", "parse_shard_name"]

SCHEMA_FILE = "schema.json"
STATS_FILE = "stats.json"
MANIFEST_FILE = "_MANIFEST.json"
REPORT_FILE = "report.html"
VOCAB_DIR = "vocab"
ERRORS_DIR = "errors"
DEAD_LETTERS_FILE = "dead_letters.jsonl"
DEAD_LETTERS_PATH = f"{ERRORS_DIR}/{DEAD_LETTERS_FILE}"  # relative to the output directory


def vocab_file(name: str) -> str:
    """The path of vocabulary `name` (a feature's, or a shared vocabulary's), relative to the output directory."""
    return f"{VOCAB_DIR}/{name}.txt"


def shard_name(index: int, num_shards: int, suffix: str) -> str:
    """The file name of shard `index` of `num_shards`.

    Example:
      >>> shard_name(0, 4, ".parquet")
      'part-00000-of-00004.parquet'
      >>> shard_name(3, 4, "tfrecord")
      'part-00003-of-00004.tfrecord'

    Raises:
      ValueError: `index` not in [0, num_shards).
    """
    if not (
        isinstance(num_shards, int) and num_shards > 0 and isinstance(index, int) and 0 <= index < num_shards
    ):
        raise ValueError(
            f"shard index must be in [0, num_shards), got index={index!r} num_shards={num_shards!r}"
        )
    if suffix and not suffix.startswith("."):
        suffix = "." + suffix
    return f"part-{index:05d}-of-{num_shards:05d}{suffix}"


_SHARD_NAME = re.compile(r"part-(\d{5,})-of-(\d{5,})(\.[a-z]+)")


def parse_shard_name(name: str) -> tuple[int, int, str] | None:
    """(index, num_shards, suffix) of a name `shard_name` writes, or None for any other name.

    Example:
      >>> parse_shard_name("part-00003-of-00004.arrow")
      (3, 4, '.arrow')
      >>> parse_shard_name("part-time-schedule.xlsx") is None
      True
    """
    found = _SHARD_NAME.fullmatch(name)
    if found is None:
        return None
    index, count = int(found.group(1)), int(found.group(2))
    if not 0 <= index < count or shard_name(index, count, found.group(3)) != name:
        return None
    return index, count, found.group(3)
