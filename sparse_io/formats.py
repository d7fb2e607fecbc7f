"""The names of the log formats read and the shard formats written, defined once.

A *log format* is what the readers parse (`read_logs`, `ReadLogs`, the
ingest config's ``input.format`` and the ``--format`` flag, `CreateLogs`);
a *shard format* is what an ingest writes and training reads
(``output.format``, `WriteShards`, `make_dataset`). Where both meet the
words are `log_format` and `shard_format`.

Example:
  >>> from sparse_io.formats import LOG_FORMATS, SHARD_FORMATS, shard_format_of
  >>> LOG_FORMATS
  ('criteo', 'csv', 'tsv', 'jsonl', 'parquet')
  >>> SHARD_FORMATS
  ('parquet', 'tfrecord')
  >>> shard_format_of("out/part-00000-of-00004.tfrecord"), shard_format_of("out/schema.json")
  ('tfrecord', None)
"""

from __future__ import annotations

import os

__all__ = [
    "DELIMITED_FORMATS",
    "LOG_FORMATS",
    "LOG_SUFFIXES",
    "SHARD_FORMATS",
    "SHARD_SUFFIX",
    "SHARD_SUFFIXES",
    "shard_format_of",
]

# "tsv" is "csv" with a tab; it stays a name of its own because the Criteo and
# tab-separated logs it reads are common enough to be spelled without a delimiter.
LOG_FORMATS: tuple[str, ...] = ("criteo", "csv", "tsv", "jsonl", "parquet")
# Header or schema column order, with a delimiter, a quote character and null tokens.
DELIMITED_FORMATS: tuple[str, ...] = ("csv", "tsv")
# The file suffix a log of each format usually carries (before any .gz/.zst/.bz2).
LOG_SUFFIXES: dict[str, str] = {
    "criteo": ".tsv", "csv": ".csv", "tsv": ".tsv", "jsonl": ".jsonl", "parquet": ".parquet",
}

SHARD_FORMATS: tuple[str, ...] = ("parquet", "tfrecord")
# The suffix a shard of each format is written with.
SHARD_SUFFIX: dict[str, str] = {"parquet": ".parquet", "tfrecord": ".tfrecord"}
# Every suffix read as a shard, and its format: ".tfrecords" is the other spelling
# TensorFlow's own writers use, so shards written elsewhere are read too.
SHARD_SUFFIXES: dict[str, str] = {".parquet": "parquet", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord"}


def shard_format_of(path: str | os.PathLike) -> str | None:
    """The shard format a file's suffix names ("parquet" or "tfrecord"), or None for any other file.

    The suffix is matched as written (shards are always written in lower case).

    Example:
      >>> shard_format_of("gs://bucket/out/part-00001-of-00002.parquet")
      'parquet'
      >>> shard_format_of("part-00000-of-00001.tfrecords")
      'tfrecord'
    """
    return SHARD_SUFFIXES.get(os.path.splitext(os.fspath(path))[1])
