"""Atomic file creation: a file appears under its final name only when complete.

Writers open a hidden temporary name in the destination directory and rename
it on success, so a reader globbing for shards never sees a partial one and a
crashed run leaves only `.tmp-*` files behind, which a re-run removes.

Symbolic links (local files only; object stores have none): a link at the
final path is never replaced, and the temporary file is created with
O_NOFOLLOW | O_EXCL. When the caller names the output root (`output_root=`,
which every sparse_io writer passes through: `write_parquet_shard`,
`write_tfrecord_shard`, `Schema.save`, `DeadLetterSink.write_jsonl`,
`atomic_write_text`), the path must also stay inside that root once links
are followed: a link below the root that leads out of it (a linked
subdirectory, `..`) makes the write fail with PermissionError before any
directory or file is created. The root itself may be a link. This is
checked once, before writing; it guards against links already in the output
tree, not against someone swapping directories while the write runs.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import IO

from sparse_io.write_records import ChecksummingStream, keep_record

__all__ = ["atomic_output", "atomic_write_text", "check_inside_root", "remove_stale_temporaries", "TMP_PREFIX"]

TMP_PREFIX = ".tmp-"


def _filesystems():
    """Beam's FileSystems (local paths, gs://, s3://...), imported on first write.

    Not at module import: reading shards in training input code never writes, and importing
    Beam costs over a second and 150 MiB there.
    """
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_inside_root(path: str, output_root: str) -> None:
    """Raises PermissionError unless local `path` stays inside `output_root` with links followed.

    `output_root` may itself be a link. Only the part of `path` that exists is
    resolved; directories still to be created cannot be links.

    Example:
      >>> check_inside_root("/tmp/out/a/b.parquet", "/tmp/out")
      >>> check_inside_root("/tmp/out/../etc/passwd", "/tmp/out")
      Traceback (most recent call last):
      PermissionError: refusing to write '/tmp/out/../etc/passwd': it is outside the output directory '/tmp/out'
    """
    root = os.path.abspath(output_root)
    target = os.path.abspath(path)
    if not _inside(target, root) or target == root:
        raise PermissionError(f"refusing to write {path!r}: it is outside the output directory {output_root!r}")
    existing = os.path.dirname(target)
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not _inside(existing, root):  # the root is still to be made: nothing below it can be a link
        return
    resolved, real_root = os.path.realpath(existing), os.path.realpath(root)
    if not _inside(resolved, real_root):
        raise PermissionError(
            f"refusing to write {path!r}: a symbolic link leads out of the output directory {output_root!r} "
            f"(to {resolved!r})"
        )


@contextlib.contextmanager
def atomic_output(path: str, *, output_root: str | None = None) -> Iterator[IO[bytes]]:
    """Opens a binary stream whose content lands at `path` only on success.

    On an exception the temporary file is removed and `path` is untouched; on
    success an existing file at `path` is replaced, and the file's CRC-32C
    and size, computed from the bytes written, are kept for the commit
    (`sparse_io.write_records.take_record(path)`). The stream only appends.

    Args:
      path: where the file goes; missing directories are created.
      output_root: the output directory `path` must stay in (see the module
        docstring); None skips that check.

    Raises:
      PermissionError: `path` is a symbolic link, or leaves `output_root`.

    Example:
      >>> import tempfile; d = tempfile.mkdtemp()
      >>> with atomic_output(os.path.join(d, "a.bin"), output_root=d) as f:
      ...     _ = f.write(b"ok")
      >>> sorted(os.listdir(d))
      ['a.bin']
    """
    fs = _filesystems()
    directory, name = fs.split(path)
    tmp = fs.join(directory, f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}-{name}")
    local = fs.get_scheme(path) is None
    if local:
        if output_root is not None:
            check_inside_root(path, output_root)
        os.makedirs(directory or ".", exist_ok=True)
        if os.path.islink(path):
            raise PermissionError(f"refusing to replace symbolic link {path!r}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        stream = os.fdopen(os.open(tmp, flags, 0o666), "wb")
    else:
        stream = fs.create(tmp)
    # The bytes are checksummed as they go out, so a commit need not read the file back (sparse_io.write_records).
    checked = ChecksummingStream(stream)
    try:
        yield checked  # type: ignore[misc]
        stream.close()
        if local:
            os.replace(tmp, path)
        else:
            if fs.exists(path):
                fs.delete([path])
            fs.rename([tmp], [path])
        keep_record(path, checked.record())
    except BaseException:
        stream.close()
        with contextlib.suppress(Exception):
            fs.delete([tmp])
        raise


def atomic_write_text(path: str, text: str, *, output_root: str | None = None) -> None:
    """Writes `text` (UTF-8) to `path` atomically (see `atomic_output`)."""
    with atomic_output(path, output_root=output_root) as f:
        f.write(text.encode("utf-8"))


def remove_stale_temporaries(directory: str) -> int:
    """Deletes `.tmp-*` files a crashed run left in `directory`; returns how many."""
    fs = _filesystems()
    pattern = fs.join(directory, TMP_PREFIX + "*")
    stale = [m.path for r in fs.match([pattern]) for m in r.metadata_list]
    if stale:
        fs.delete(stale)
    return len(stale)
