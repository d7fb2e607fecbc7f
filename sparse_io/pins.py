"""What a reader verified, pinned: each shard's identity on disk and the rows its manifest lists.

A reader checks an output against its `_MANIFEST.json` once, then opens its
shards by name, again and again (every epoch, every time a handle was
closed to bound the open files). A file replaced meanwhile (an
`--overwrite` ingest into the same directory, a copy) would be read as if
it had been verified. So the reader pins each shard right after verifying
it (`pin_shards`), and checks the pin at every open (`ShardPin.check`): a
local file must keep its size, modification time (ns) and inode; a remote
one (through TensorFlow's file systems where loaded, else Beam's) its size
and modification time. A shard whose manifest lists its rows must hold them
(`ShardPin.check_rows`): a same-size edit of a shard's footer is caught at
"sizes" where it changes the rows.

Example:
  >>> import os, tempfile
  >>> shard = os.path.join(tempfile.mkdtemp(), "part-00000-of-00001.parquet")
  >>> _ = open(shard, "wb").write(b"the shard verified")
  >>> (pin,) = pin_shards([shard], "none")  # "none": its identity only, no manifest to read rows from
  >>> pin.check()  # still the file verified: nothing to say
  >>> _ = open(shard + ".new", "wb").write(b"another output's rows")
  >>> os.replace(shard + ".new", shard)  # what an --overwrite ingest into the directory does
  >>> pin.check()  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  ...
  sparse_io.pins.ChangedFileError: ...part-00000-of-00001.parquet: ...
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence

from sparse_io.errors import CorruptFileError
from sparse_io.locations import is_remote
from sparse_io.manifest_format import ManifestError
from sparse_io.manifest_verify import read_manifest

__all__ = ["ChangedFileError", "ShardPin", "pin_shards"]


class ChangedFileError(ManifestError):
    """A shard is no longer the file that was verified (one line naming it): make the dataset again."""


def _view(path: str) -> str:
    """How a file's identity is read: "os" locally; remotely "tensorflow" where loaded, else "beam"."""
    if not is_remote(path):
        return "os"
    return "tensorflow" if "tensorflow" in sys.modules else "beam"


def _identity(path: str, view: str) -> tuple[int, int | None, int | None]:
    """(size, mtime_ns, inode) of a file: all three locally, size and mtime remotely (as `view` reports them)."""
    if view == "os":
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns, st.st_ino
    if view == "tensorflow":
        import tensorflow as tf

        try:
            st = tf.io.gfile.stat(path)
        except tf.errors.NotFoundError:
            raise FileNotFoundError(path) from None
        return int(st.length), int(st.mtime_nsec), None
    from apache_beam.io.filesystems import FileSystems

    found = [m for r in FileSystems.match([path]) for m in r.metadata_list]
    if len(found) != 1:
        raise FileNotFoundError(path)
    return int(found[0].size_in_bytes), int(found[0].last_updated_in_seconds * 1e9), None


@dataclasses.dataclass(frozen=True)
class ShardPin:
    """A shard as verified: its identity on disk and the rows its manifest lists (None: no manifest read).

    Attributes:
      path: the shard.
      identity: (size, mtime_ns, inode or None).
      rows: the rows the manifest lists for it, or None.
      view: how `identity` was read (`os`, `tensorflow` or `beam`); each
        check reads it the same way, so a module loaded since changes nothing.
    """

    path: str
    identity: tuple[int, int | None, int | None]
    rows: int | None = None
    view: str = "os"

    def check(self) -> None:
        """Raises `ChangedFileError` when the file at `path` is not the one pinned (called after each open)."""
        try:
            now = _identity(self.path, self.view)
        except FileNotFoundError:
            raise ChangedFileError(f"{self.path}: removed since it was verified; make the dataset again") from None
        if now != self.identity:
            raise ChangedFileError(
                f"{self.path}: replaced or changed since it was verified (size, mtime_ns, inode {self.identity} "
                f"then, {now} now: another run wrote this output?); make the dataset again"
            )

    def check_rows(self, found: int) -> None:
        """Raises `CorruptFileError` when the shard holds other than the rows its manifest lists."""
        if self.rows is not None and found != self.rows:
            raise CorruptFileError(self.path, f"holds {found} rows, its manifest lists {self.rows}")


def pin_shards(paths: Sequence[str], level: str) -> list[ShardPin]:
    """Pins `paths`, just verified to `level`: each file's identity, and (unless "none") its manifest's rows.

    Raises:
      ManifestError: a shard the manifest does not list, or whose size
        differs from it now (it changed since the check).
    """
    by_directory: dict[str, dict] = {}
    pins = []
    for path in paths:
        view = _view(path)
        identity = _identity(path, view)
        rows = None
        if level != "none":
            directory, name = (os.path.split(os.path.abspath(path)) if not is_remote(path)
                               else path.rstrip("/").rsplit("/", 1))
            if directory not in by_directory:
                by_directory[directory] = {e["path"]: e for e in read_manifest(directory)["shards"]}
            entry = by_directory[directory].get(name)
            if entry is None:
                raise ManifestError(f"{directory}: differs from its manifest: {name} is not in the manifest")
            if identity[0] != entry["bytes"]:
                raise ChangedFileError(f"{path}: has {identity[0]} bytes, its manifest says {entry['bytes']} "
                                       "(changed since it was verified)")
            rows = entry["rows"]
        pins.append(ShardPin(path, identity, rows, view))
    return pins
