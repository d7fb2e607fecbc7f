"""What a writer knows of each file it wrote: its CRC-32C and byte size, computed from the bytes as they went out.

Every sparse_io writer writes through `sparse_io.atomic.atomic_output`,
which passes the bytes through a `ChecksummingStream` and, once the file is
renamed into place, keeps its record here (`take_record` hands it on, once).
The ingest's shard writer sends the records of its shards on with them, so
the commit assembles `_MANIFEST.json` without reading a shard back
(`sparse_io.manifest.build_manifest(records=...)`).

Records live in the process that wrote the file: a writer on another machine
hands its records on as data (the ingest's shard tuples), not through here.

Example:
  >>> import io
  >>> s = ChecksummingStream(io.BytesIO())
  >>> _ = s.write(b"123456789")
  >>> s.record()  # the CRC-32C check value, and the size
  ('e3069283', 9)
"""

from __future__ import annotations

import threading
from typing import IO

from sparse_io.locations import join

__all__ = ["WRITE_RECORDS_FILE", "ChecksummingStream", "keep_record", "load_write_records", "parse_write_records",
           "mark", "take_record", "text_record",
           "write_records_text"]

# Where the shard writer leaves its records for the commit: a temporary (".tmp-"), so a killed or failed run's
# copy is rolled back with the other temporaries and the commit removes it before the manifest is written.
WRITE_RECORDS_FILE = ".tmp-sparseflow-written.json"

_records: dict[str, tuple[str, int, int]] = {}  # path -> (crc32c, bytes, write number)
_written = 0
_lock = threading.Lock()


class ChecksummingStream:
    """A write-only binary stream that passes bytes on to `raw` and keeps their CRC-32C and count.

    Writers only append: `seek` raises io.UnsupportedOperation (a rewrite of
    earlier bytes would make the checksum a lie), `tell` is the bytes written.
    """

    def __init__(self, raw: IO[bytes]):
        import google_crc32c

        self._raw = raw
        self._extend = google_crc32c.extend
        self._crc = 0
        self._size = 0

    def write(self, data) -> int:
        """Passes `data` on and adds it to the checksum; returns its length."""
        # google-crc32c takes bytes only: other buffers (pyarrow's, memoryviews) are copied once for it.
        chunk = data if isinstance(data, bytes) else memoryview(data).cast("B").tobytes()
        self._crc = self._extend(self._crc, chunk)
        self._size += len(chunk)
        self._raw.write(chunk)
        return len(chunk)

    def record(self) -> tuple[str, int]:
        """(CRC-32C as 8 lowercase hex digits, bytes) of what was written so far."""
        return f"{self._crc:08x}", self._size

    def tell(self) -> int:
        """The bytes written so far."""
        return self._size

    def seekable(self) -> bool:
        """False: the stream only appends."""
        return False

    def seek(self, *args):
        """Raises io.UnsupportedOperation: a rewrite would make the checksum wrong."""
        import io

        raise io.UnsupportedOperation("a checksummed output stream only appends")

    def writable(self) -> bool:
        """True."""
        return True

    def readable(self) -> bool:
        """False."""
        return False

    def flush(self) -> None:
        """Flushes the underlying stream."""
        self._raw.flush()

    def close(self) -> None:
        """Closes the underlying stream."""
        self._raw.close()

    @property
    def closed(self) -> bool:
        """Whether the underlying stream is closed."""
        return self._raw.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def keep_record(path: str, record: tuple[str, int]) -> None:
    """Keeps the (crc32c, bytes) of the file just renamed to `path` (a later write of `path` replaces it)."""
    global _written
    with _lock:
        _written += 1
        _records[path] = (*record, _written)


def mark() -> int:
    """A point in this process's writes: `take_record(path, since=mark())` ignores what was written before it."""
    with _lock:
        return _written


def take_record(path: str, since: int = 0) -> tuple[str, int] | None:
    """The (crc32c, bytes) this process wrote to `path` last (after `since`), removed from here; else None."""
    with _lock:
        found = _records.pop(path, None)
    if found is None or found[2] <= since:
        return None
    return found[0], found[1]


def text_record(text: str) -> tuple[str, int]:
    """(crc32c, bytes) of `text` as UTF-8: the record of a file written with exactly that text."""
    import google_crc32c

    data = text.encode("utf-8")
    return f"{google_crc32c.value(data):08x}", len(data)


def write_records_text(shards: dict[str, dict], files: dict[str, dict]) -> str:
    """The record file's text (`WRITE_RECORDS_FILE`) for shards (`{name: {rows, bytes, crc32c}}`) and other files."""
    import json

    return json.dumps({"shards": shards, "files": files}, sort_keys=True) + "\n"


def load_write_records(directory: str) -> dict[str, dict] | None:
    """`{relative path: entry}` as the writers recorded them (shards with `rows`), or None when none were left.

    Raises:
      ValueError: the record file is not what `write_records_text` gives.
    """
    from apache_beam.io.filesystems import FileSystems

    path = join(directory, WRITE_RECORDS_FILE)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return parse_write_records(f.read(), path)


def parse_write_records(data: bytes, path: str) -> dict[str, dict]:
    """The `{relative path: entry}` of a record file's bytes (`path` names it in errors).

    Raises:
      ValueError: not what `write_records_text` gives.
    """
    import json

    try:
        record = json.loads(data.decode("utf-8"))
    except ValueError:
        record = None
    if not isinstance(record, dict) or not all(isinstance(record.get(k), dict) for k in ("shards", "files")):
        raise ValueError(f"{path}: not a record of written files")
    return {**record["files"], **record["shards"]}

