"""The names of the files an ingest writes into its output directory, spelled once.

    <output>/
      part-00000-of-00004.parquet ...   the shards (`sparse_io.shard_formats` names them)
      schema.json                       SCHEMA_FILE: the features, how values became ids
      stats.json                        STATS_FILE: the statistics, capacities, validation
      vocab/<feature>.txt               VOCAB_DIR, `vocab_file`: one token a line, in id order
      errors/dead_letters.jsonl         ERRORS_DIR, DEAD_LETTERS_FILE: the records refused
      report.html                       REPORT_FILE: the statistics as a page
      _MANIFEST.json                    MANIFEST_FILE: the commit record, written last

Example:
  >>> vocab_file("C9"), DEAD_LETTERS_PATH
  ('vocab/C9.txt', 'errors/dead_letters.jsonl')
"""

from __future__ import annotations

__all__ = ["SCHEMA_FILE", "STATS_FILE", "MANIFEST_FILE", "REPORT_FILE", "VOCAB_DIR", "ERRORS_DIR",
           "DEAD_LETTERS_FILE", "DEAD_LETTERS_PATH", "vocab_file"]

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
