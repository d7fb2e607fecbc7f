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
  ('parquet', 'tfrecord', 'arrow')
  >>> shard_format_of("out/part-00000-of-00004.tfrecord"), shard_format_of("out/schema.json")
  ('tfrecord', None)
"""

from __future__ import annotations

import os

from sparse_io.shard_formats import SHARD_FORMAT_OBJECTS, shard_format, shard_format_for

__all__ = [
    "DELIMITED_FORMATS",
    "LOG_FORMATS",
    "LOG_SUFFIXES",
    "SHARD_CODECS",
    "DEFAULT_SHARD_CODEC",
    "SHARD_FORMATS",
    "SHARD_SUFFIX",
    "SHARD_SUFFIXES",
    "check_shard_codec",
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

# Derived from the format objects (`sparse_io.shard_formats`), which are the one place a shard format is defined.
SHARD_FORMATS: tuple[str, ...] = tuple(f.name for f in SHARD_FORMAT_OBJECTS)
# The suffix a shard of each format is written with.
SHARD_SUFFIX: dict[str, str] = {f.name: f.suffix for f in SHARD_FORMAT_OBJECTS}
# Every suffix read as a shard, and its format (".tfrecords" too: TensorFlow's own writers' spelling).
SHARD_SUFFIXES: dict[str, str] = {suffix: f.name for f in SHARD_FORMAT_OBJECTS for suffix in f.read_suffixes}
# The codecs each shard format may be written with (readers find the codec in the file), and the
# default: Parquet pages zstd (the smallest files); Arrow buffers uncompressed, read memory-mapped
# without decoding; TFRecord shards are written uncompressed.
SHARD_CODECS: dict[str, tuple[str, ...]] = {f.name: f.codecs for f in SHARD_FORMAT_OBJECTS}
DEFAULT_SHARD_CODEC: dict[str, str | None] = {f.name: f.default_codec for f in SHARD_FORMAT_OBJECTS}


def check_shard_codec(codec: str, format: str) -> str:
    """Returns `codec` if shards of `format` may be written with it.

    Raises:
      ValueError: naming the codec and the format's choices, or the format
        that takes no codec (TFRecord shards are written uncompressed).

    Example:
      >>> check_shard_codec("lz4", "arrow")
      'lz4'
    """
    return shard_format(format).check_codec(codec)


def shard_format_of(path: str | os.PathLike) -> str | None:
    """The shard format a file's suffix names ("parquet", "tfrecord" or "arrow"), or None for any other file.

    The suffix is matched as written (shards are always written in lower case).

    Example:
      >>> shard_format_of("gs://bucket/out/part-00001-of-00002.parquet")
      'parquet'
      >>> shard_format_of("part-00000-of-00001.tfrecords")
      'tfrecord'
    """
    fmt = shard_format_for(path)
    return None if fmt is None else fmt.name
