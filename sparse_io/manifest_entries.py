"""One file's manifest entry: its size, CRC-32C and (for a shard) row count, read or taken from its writer.

`describe` reads the file once, in chunks, counting a TFRecord shard's
records as it goes (other shard formats count their rows from the footer);
`from_record` trusts what the writer recorded while writing
(`sparse_io.write_records`) once the file still has the recorded size.
Checksums are CRC-32C (google-crc32c's hardware-accelerated C code) as 8
lowercase hex digits.

Example:
  >>> import os, tempfile; d = tempfile.mkdtemp()
  >>> _ = open(os.path.join(d, "stats.json"), "wb").write(b"123456789")
  >>> describe(d, "stats.json")
  {'path': 'stats.json', 'bytes': 9, 'crc32c': 'e3069283'}
"""

from __future__ import annotations

from sparse_io.locations import join, open_binary
from sparse_io.manifest_format import ManifestError, is_count, shard_format

__all__ = ["file_checksum", "describe", "from_record"]

CHUNK = 4 << 20


def scan(path: str, counter=None) -> tuple[str, int, int | None]:
    """(crc32c hex, bytes, records the `counter` counted or None) of a file, read once in chunks."""
    import google_crc32c

    crc, size = 0, 0
    with open_binary(path) as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            crc = google_crc32c.extend(crc, chunk)
            size += len(chunk)
            if counter is not None:
                counter.feed(chunk)
    records = None
    if counter is not None:
        if not counter.complete:
            raise ManifestError(f"{path}: ends inside a TFRecord frame (truncated)")
        records = counter.records
    return f"{crc:08x}", size, records


def file_checksum(path: str) -> str:
    """The CRC-32C of a file's bytes as 8 hex digits (local or any remote path).

    Example:
      >>> import os, tempfile; p = os.path.join(tempfile.mkdtemp(), "a.bin")
      >>> _ = open(p, "wb").write(b"123456789")
      >>> file_checksum(p)  # the CRC-32C check value
      'e3069283'
    """
    return scan(path)[0]


def describe(directory: str, relative: str) -> dict:
    """The manifest entry of `relative` under `directory`, from reading the file once.

    Raises:
      ManifestError: a shard that cannot be read (no footer, a TFRecord cut inside a record).
    """
    from sparse_io.errors import CorruptFileError

    path = join(directory, relative)
    fmt = shard_format(relative)
    counter = fmt.frame_counter() if fmt is not None else None
    crc, size, records = scan(path, counter)
    entry = {"path": relative, "bytes": size, "crc32c": crc}
    if fmt is not None:
        if records is None:
            try:
                records = fmt.count_rows(path)
            except CorruptFileError as e:
                raise ManifestError(f"{path}: not a readable {fmt.title} shard ({e.reason})") from None
        entry["rows"] = records
    return entry


def from_record(directory: str, relative: str, size: int, record: dict) -> dict:
    """A manifest entry from a writer's record: no byte read; the file must still have the recorded size."""
    path = join(directory, relative)
    crc, recorded, rows = record.get("crc32c"), record.get("bytes"), record.get("rows")
    if not (isinstance(crc, str) and len(crc) == 8 and is_count(recorded)):
        raise ManifestError(f"{path}: its write record is malformed ({record!r})")
    if size != recorded:
        raise ManifestError(f"{path}: has {size} bytes, its writer recorded {recorded} (changed since it was written)")
    entry = {"path": relative, "bytes": recorded, "crc32c": crc}
    if shard_format(relative) is not None:
        if not is_count(rows):
            raise ManifestError(f"{path}: its write record has no row count")
        entry["rows"] = rows
    return entry
