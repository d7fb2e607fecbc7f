"""Finding shard files and the schema.json beside them (local paths or anything tf.io.gfile opens)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf

from sparse_io.formats import SHARD_SUFFIXES
from sparse_io.schema import SCHEMA_FILE, Schema

__all__ = ["NoInputFilesError", "list_files", "shard_format", "read_schema"]

_FORMATS = SHARD_SUFFIXES


class NoInputFilesError(FileNotFoundError, ValueError):
    """Nothing to read where the caller pointed: a missing input, not a bad argument value.

    A ValueError as it always was, and a FileNotFoundError, so that programs
    report it as the missing input it is (exit status 2).
    """


def list_files(path: str | Sequence[str], suffixes: Sequence[str] | None = None) -> list[str]:
    """Sorted files named by a directory, a glob pattern or a list of paths.

    A directory yields its files ending in one of `suffixes` (hidden and
    `.tmp-` files left by an unfinished write are skipped).

    Raises:
      NoInputFilesError (a ValueError): nothing matches.
    """
    if isinstance(path, (list, tuple)):
        files = [str(p) for p in path]
        missing = [p for p in files if not tf.io.gfile.exists(p)]
        if missing:
            raise NoInputFilesError(f"no such file(s): {missing[:3]}")
    elif tf.io.gfile.isdir(path):
        files = [
            os.path.join(path, name)
            for name in tf.io.gfile.listdir(path)
            if not name.startswith(".") and (suffixes is None or name.endswith(tuple(suffixes)))
        ]
    else:
        files = [f for f in tf.io.gfile.glob(path) if not os.path.basename(f).startswith(".")]
    files = sorted(set(files))
    if not files:
        raise NoInputFilesError(
            f"no input files match {path!r}" + (f" (looking for {list(suffixes)})" if suffixes else "")
        )
    return files


def shard_format(files: Sequence[str]) -> str:
    """The shard format, "parquet", "tfrecord" or "arrow", from the file suffixes (all must agree).

    Raises:
      ValueError: unknown suffix, or a mix of formats.
    """
    kinds = set()
    for f in files:
        suffix = os.path.splitext(f)[1].lower()
        if suffix not in _FORMATS:
            raise ValueError(f"{f}: unknown shard format (expected one of {sorted(_FORMATS)}); pass format=")
        kinds.add(_FORMATS[suffix])
    if len(kinds) > 1:
        raise ValueError(f"the input mixes shard formats {sorted(kinds)}; pass format= or a narrower path")
    return kinds.pop()


def read_schema(directory: str) -> Schema | None:
    """The schema.json in `directory`, or None when there is none.

    Read with tf.io.gfile rather than `Schema.load`, which would import
    Beam into the training process.
    """
    path = os.path.join(directory, SCHEMA_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        return Schema.from_json(f.read())
