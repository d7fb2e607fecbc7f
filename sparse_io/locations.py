r"""Where a path lives, by one rule for every module: local (read through `os`) or remote (a URL).

A path is remote when it starts with a URL scheme of two or more characters
followed by "://" (`gs://`, `s3://`, `hdfs://`, `file://`): such paths go
through a file-system layer (Beam's `FileSystems`, `tf.io.gfile`, pyarrow's
`FileSystem.from_uri`). Anything else is local: relative or absolute paths,
and Windows drives (`C:\x`).

Example:
  >>> is_remote("gs://bucket/out"), is_remote("/tmp/out"), is_remote("C:\\out")
  (True, False, False)
  >>> join("gs://bucket/out/", "vocab/C1.txt")
  'gs://bucket/out/vocab/C1.txt'
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["is_remote", "join", "split", "open_binary", "exists", "is_directory", "list_sizes", "remove"]

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a URL (see the module doc)."""
    return _URL.match(os.fspath(path)) is not None


def join(directory: str, relative: str) -> str:
    """`relative` ("/"-separated) under `directory`: with "/" for a URL, with `os.path.join` for a local path."""
    if is_remote(directory):
        return directory.rstrip("/") + "/" + relative
    return os.path.join(directory, *relative.split("/"))


def open_binary(path: str):
    """A binary file object for reading `path`: `open` locally, a file system's reader remotely.

    Remote paths go through TensorFlow's gfile where TensorFlow is already loaded
    (its file systems), else Beam's `FileSystems`.

    Raises:
      FileNotFoundError (local), or the file system's own error for a missing remote file.
    """
    if not is_remote(path):
        return open(path, "rb")
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "rb")
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type="uncompressed")


def exists(path: str) -> bool:
    """Whether a file or directory `path` exists, through the same file systems as `open_binary`."""
    if not is_remote(path):
        return os.path.exists(path)
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def split(path: str) -> tuple[str, str]:
    """(directory, name) of `path`: a local one made absolute first, a URL split at its last "/"."""
    if not is_remote(path):
        return os.path.split(os.path.abspath(path))
    head, _, tail = path.rstrip("/").rpartition("/")
    return head, tail


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


def list_sizes(directory: str) -> dict[str, int]:
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


def remove(path: str) -> None:
    """Removes the file `path` if there is one (locally a symbolic link itself, not its target)."""
    if not is_remote(path):
        if os.path.lexists(path):
            os.remove(path)
        return
    from apache_beam.io.filesystems import FileSystems

    if FileSystems.exists(path):
        FileSystems.delete([path])
