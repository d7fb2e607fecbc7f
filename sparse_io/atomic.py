"""Atomic file creation: a file appears under its final name only when complete.

Writers open a hidden temporary name in the destination directory and rename
it on success, so a reader globbing for shards never sees a partial one and a
crashed run leaves only `.tmp-*` files behind, which a re-run removes.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import IO

from apache_beam.io.filesystems import FileSystems

__all__ = ["atomic_output", "atomic_write_text", "remove_stale_temporaries", "TMP_PREFIX"]

TMP_PREFIX = ".tmp-"


def _split(path: str) -> tuple[str, str]:
    directory, name = FileSystems.split(path)
    return directory, name


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[IO[bytes]]:
    """Opens a binary stream whose content lands at `path` only on success.

    On an exception the temporary file is removed and `path` is untouched; on
    success an existing file at `path` is replaced.

    Example:
      >>> import tempfile; d = tempfile.mkdtemp()
      >>> with atomic_output(os.path.join(d, "a.bin")) as f:
      ...     _ = f.write(b"ok")
      >>> sorted(os.listdir(d))
      ['a.bin']
    """
    directory, name = _split(path)
    tmp = FileSystems.join(directory, f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}-{name}")
    local = FileSystems.get_scheme(path) is None
    if local:
        os.makedirs(directory or ".", exist_ok=True)
        if os.path.islink(path):
            raise OSError(f"refusing to replace symbolic link {path!r}")
    stream = open(tmp, "wb") if local else FileSystems.create(tmp)
    try:
        yield stream
        stream.close()
        if local:
            os.replace(tmp, path)
        else:
            if FileSystems.exists(path):
                FileSystems.delete([path])
            FileSystems.rename([tmp], [path])
    except BaseException:
        stream.close()
        with contextlib.suppress(Exception):
            FileSystems.delete([tmp])
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically."""
    with atomic_output(path) as f:
        f.write(text.encode("utf-8"))


def remove_stale_temporaries(directory: str) -> int:
    """Deletes `.tmp-*` files a crashed run left in `directory`; returns how many."""
    pattern = FileSystems.join(directory, TMP_PREFIX + "*")
    stale = [m.path for r in FileSystems.match([pattern]) for m in r.metadata_list]
    if stale:
        FileSystems.delete(stale)
    return len(stale)
