"""Finding and opening input files, and cutting text streams into blocks of lines.

Local paths are opened directly; anything with a scheme (gs://, s3://, ...)
goes through Beam's `FileSystems`. Compression follows the extension
(.gz, .zst/.zstd, .bz2), and every compressed stream is read to its end
marker: a truncated or damaged one raises `CorruptFileError` naming the
file, never reads short. Text is cut into blocks of a fixed number of lines
with numpy, so memory stays bounded by one block whatever the file size.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import glob
import gzip
import os
import zlib
from collections.abc import Iterator, Sequence
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.errors import CorruptFileError, first_line
from sparse_io.readers._line_limit import LongLine, bounded_pieces

_CHUNK_BYTES = 1 << 20
# The longest line a reader parses by default; a longer one is a dead letter, read past in chunks.
DEFAULT_MAX_LINE_BYTES = 16 << 20
_MAX_BLOCK_BYTES = (1 << 31) - 2  # binary arrays use int32 offsets


def is_local(path: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.get_scheme(path) is None


def expand_paths(pattern: str | Sequence[str]) -> list[str]:
    """Sorted files matching a path, a directory, a glob, or a list of those.

    A directory stands for the files directly in it, leaving out hidden ones
    and markers such as `_SUCCESS`.

    Raises:
      FileNotFoundError: a pattern matches no file.
    """
    patterns = [pattern] if isinstance(pattern, (str, os.PathLike)) else list(pattern)
    paths: list[str] = []
    for p in map(os.fspath, patterns):
        if is_local(p):
            if os.path.isdir(p):
                found = [
                    os.path.join(p, n)
                    for n in sorted(os.listdir(p))
                    if not n.startswith((".", "_")) and os.path.isfile(os.path.join(p, n))
                ]
            else:
                found = sorted(f for f in glob.glob(p) if os.path.isfile(f))
        else:
            from apache_beam.io.filesystems import FileSystems

            found = sorted(m.path for r in FileSystems.match([p]) for m in r.metadata_list)
        if not found:
            raise FileNotFoundError(f"no input file matches {p!r}")
        paths.extend(f for f in found if f not in paths)
    return paths


def compression_of(path: str) -> str | None:
    """'gzip', 'zstd', 'bz2' or None, from the file extension."""
    lower = path.lower()
    if lower.endswith((".gz", ".gzip")):
        return "gzip"
    if lower.endswith((".zst", ".zstd")):
        return "zstd"
    if lower.endswith(".bz2"):
        return "bz2"
    return None


@contextlib.contextmanager
def open_binary(path: str) -> Iterator[IO[bytes]]:
    """Opens `path` for reading decompressed bytes.

    A compressed stream is read to its end marker: a truncated stream (the
    compressed data stops inside a gzip member, a bzip2 stream or a zstd
    frame) or damaged bytes raise `CorruptFileError` naming the file and the
    offsets, from the `read` that finds it, never a short read. (A cut that
    falls exactly between two gzip members or zstd frames leaves a stream
    that is whole by its format and cannot be told apart.)

    Raises:
      CorruptFileError: from `read`, for a truncated or damaged stream.
    """
    if is_local(path):
        raw = open(path, "rb")
    else:
        from apache_beam.io.filesystems import CompressionTypes, FileSystems

        raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    try:
        kind = compression_of(path)
        if kind is None:
            yield raw
            return
        counted = _CountedSource(raw)
        frames = None
        if kind == "gzip":
            stream = gzip.GzipFile(fileobj=counted, mode="rb")
        elif kind == "bz2":
            stream = bz2.BZ2File(counted, mode="rb")
        else:
            import zstandard

            frames = ZstdFrameCheck(counted)
            stream = zstandard.ZstdDecompressor().stream_reader(frames, read_across_frames=True)
        yield _CheckedStream(path, kind, stream, counted, frames)
    finally:
        raw.close()


class _CountedSource:
    """The raw (compressed) file, counting the bytes read from it."""

    def __init__(self, raw: IO[bytes]):
        self._raw, self.offset, self.exhausted = raw, 0, False

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self.offset += len(data)
        if not data and size != 0:
            self.exhausted = True
        return data

    def close(self) -> None:  # the opener closes the file
        pass


class ZstdLayoutError(Exception):
    """Bytes that break the zstd frame layout (raised through the decompressor's read)."""


class ZstdFrameCheck:
    """Follows the zstd frame layout (RFC 8878) over the compressed bytes as they are read.

    zstandard's stream reader ends quietly where the input ends, even inside a
    frame. Block headers give every block's length, so walking them finds
    whether the input stopped at a frame boundary without decompressing
    anything; the decompressor still checks the blocks' contents (and the
    content checksum, when the frame has one).
    """

    _MAGIC = 0xFD2FB528

    def __init__(self, source: _CountedSource):
        self._source = source
        self._held = bytearray()  # the part of a header read so far
        self._need, self._then = 4, self._magic
        self._skip = 0
        self.frame_start = 0
        self._position = 0

    @property
    def at_boundary(self) -> bool:
        """True when the bytes read so far end exactly after a whole frame (or there were none)."""
        return self._then == self._magic and not self._held and not self._skip

    def read(self, size: int = -1) -> bytes:
        data = self._source.read(size)
        self._advance(memoryview(data))
        return data

    def _advance(self, data: memoryview) -> None:
        i = 0
        while i < len(data):
            if self._skip:
                step = min(self._skip, len(data) - i)
                self._skip -= step
                i += step
                continue
            step = min(self._need - len(self._held), len(data) - i)
            self._held += data[i : i + step]
            i += step
            if len(self._held) == self._need:
                header, self._held = bytes(self._held), bytearray()
                self._then(header, self._position + i - len(header))
        self._position += len(data)

    def _expect(self, need: int, then) -> None:
        self._need, self._then = need, then
        if need == 0:
            then(b"", self._position)

    def _magic(self, header: bytes, at: int) -> None:
        magic = int.from_bytes(header, "little")
        self.frame_start = at
        if magic == self._MAGIC:
            self._expect(1, self._descriptor)
        elif magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: its length, then that many bytes
            self._expect(4, self._skippable)
        else:
            raise ZstdLayoutError(f"no zstd frame starts at byte {at} (magic number {magic:#010x})")

    def _skippable(self, header: bytes, at: int) -> None:
        self._skip = int.from_bytes(header, "little")
        self._expect(4, self._magic)

    def _descriptor(self, header: bytes, at: int) -> None:
        flags = header[0]
        single_segment = flags >> 5 & 1
        content_size = (single_segment, 2, 4, 8)[flags >> 6]
        dictionary = (0, 1, 2, 4)[flags & 3]
        self._checksum = 4 if flags >> 2 & 1 else 0
        self._expect((1 - single_segment) + dictionary + content_size, self._header_rest)

    def _header_rest(self, header: bytes, at: int) -> None:
        self._expect(3, self._block)

    def _block(self, header: bytes, at: int) -> None:
        value = int.from_bytes(header, "little")
        last, kind, size = value & 1, value >> 1 & 3, value >> 3
        if kind == 3:
            raise ZstdLayoutError(f"reserved zstd block type at byte {at}")
        self._skip = 1 if kind == 1 else size  # an RLE block stores its one byte
        if not last:
            self._expect(3, self._block)
        elif self._checksum:
            self._skip += self._checksum
            self._expect(4, self._magic)
        else:
            self._expect(4, self._magic)


def _corruption_errors() -> tuple[type[BaseException], ...]:
    import zstandard

    return (EOFError, OSError, zlib.error, zstandard.ZstdError, ZstdLayoutError)


class _CheckedStream:
    """A decompressing stream whose damage and early end become `CorruptFileError` naming the file."""

    def __init__(self, path: str, kind: str, stream, source: _CountedSource, frames: ZstdFrameCheck | None):
        self._path, self._kind, self._stream = path, kind, stream
        self._source, self._frames = source, frames
        self._delivered = 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._stream.read(size)
        except _corruption_errors() as e:
            if isinstance(e, OSError) and e.errno is not None:
                raise  # the file system's error, not the data's
            truncated = isinstance(e, EOFError)
            raise self._error("truncated" if truncated else "damaged", first_line(e)) from None
        if not data and size != 0 and self._frames is not None:
            self._check_zstd_end()
        self._delivered += len(data)
        return data

    def _check_zstd_end(self) -> None:
        if not self._source.exhausted:
            # The reader stopped before the input did: bytes follow that are not a frame it reads.
            raise self._error("damaged", f"the stream stops at byte {self._source.offset} of a longer file")
        if not self._frames.at_boundary:
            raise self._error(
                "truncated",
                f"the frame starting at byte {self._frames.frame_start} has no end "
                f"(the file ends at byte {self._source.offset})",
            )

    def _error(self, what: str, detail: str) -> CorruptFileError:
        return CorruptFileError(
            self._path,
            f"{what} {self._kind} stream: {detail} (after {self._source.offset:,} compressed bytes, "
            f"{self._delivered:,} bytes of text read)",
        )

    def close(self) -> None:
        self._stream.close()


def split_lines(data: bytes) -> pa.BinaryArray:
    """The lines of `data` (without their "\\n"); a final "\\n" ends the last line.

    Raises:
      ValueError: `data` is too large for one Arrow binary array.
    """
    if len(data) > _MAX_BLOCK_BYTES:
        raise ValueError(
            f"a block of lines holds {len(data)} bytes, more than Arrow binary arrays allow; lower batch_size"
        )
    offsets = np.array([0, len(data)], dtype=np.int32)
    whole = pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    lines = pc.split_pattern(whole, b"\n").values
    if data.endswith(b"\n"):
        lines = lines.slice(0, len(lines) - 1)
    return lines


_BOM = b"\xef\xbb\xbf"


def _drop_bom(chunk: bytes, stream: IO[bytes]) -> bytes:
    while len(chunk) < len(_BOM):  # a stream may hand out fewer bytes than asked
        more = stream.read(len(_BOM) - len(chunk))
        if not more:
            break
        chunk += more
    return chunk[len(_BOM) :] if chunk.startswith(_BOM) else chunk


def _chunks(stream: IO[bytes], chunk_bytes: int) -> Iterator[bytes]:
    """The stream's bytes in reads of `chunk_bytes`, without a UTF-8 byte order mark at the start."""
    first_read = True
    while True:
        chunk = stream.read(chunk_bytes)
        if not chunk:
            return
        if first_read:
            first_read = False
            if chunk.startswith(_BOM[: len(chunk)]):
                chunk = _drop_bom(chunk, stream)
                if not chunk:
                    continue
        yield chunk


def iter_byte_blocks(
    stream: IO[bytes],
    lines_per_block: int,
    chunk_bytes: int = _CHUNK_BYTES,
    max_line_bytes: int | None = None,
) -> Iterator[tuple[int, bytes] | LongLine]:
    """Yields `(first_line_number, data)`: the bytes of at most `lines_per_block` whole lines.

    Every block but the last ends with its last line's "\n"; the last may
    lack it when the file does. Line numbers are 1-based. Lines keep any
    "\r". A UTF-8 byte order mark at the start of the file is dropped.

    A line longer than `max_line_bytes` (without its "\n"; None: no limit)
    is not in any block: a `LongLine` with its number, length and head comes
    in its place, after a block of the lines before it. It is read past in
    chunks, never held whole, so memory stays within about
    `lines_per_block` lines of at most `max_line_bytes` plus one chunk.
    """
    # Unconsumed input as views of the pieces read, with each piece's newline offsets: a block is
    # then joined from them in one copy (a growing bytearray copied each byte three times).
    chunks: list[memoryview] = []
    positions: list[np.ndarray] = []
    pending = 0
    line_no = 1
    for item in bounded_pieces(_chunks(stream, chunk_bytes), max_line_bytes):
        if isinstance(item, LongLine):
            if chunks:  # the whole lines before it (fewer than a block's worth)
                yield line_no, b"".join(chunks)
                chunks, positions = [], []
                line_no += pending
                pending = 0
            yield dataclasses.replace(item, line=line_no)
            line_no += 1
            continue
        piece, found = item
        chunks.append(piece)
        positions.append(found)
        pending += found.size
        while pending >= lines_per_block:
            need, k = lines_per_block, 0
            while need > positions[k].size:  # pieces whose lines all belong to this block
                need -= positions[k].size
                k += 1
            cut = int(positions[k][need - 1]) + 1
            yield line_no, b"".join([*chunks[:k], chunks[k][:cut]])
            rest, rest_positions = chunks[k][cut:], positions[k][need:] - cut
            chunks = ([rest] if len(rest) else []) + chunks[k + 1 :]
            positions = ([rest_positions] if len(rest) else []) + positions[k + 1 :]
            pending -= lines_per_block
            line_no += lines_per_block
    if chunks:
        yield line_no, b"".join(chunks)
