"""Decompressing a log to its end marker: a truncated or damaged stream is an error naming the file.

gzip and bzip2 readers raise bare errors (EOFError, OSError) that do not say
which file; zstandard's stream reader ends quietly where the input ends,
even inside a frame, so a cut .zst log read as a shorter, complete one.
`checked_stream` wraps each decompressor so that every such end or damage
raises `CorruptFileError` with the path and the offsets, and follows the
zstd frame layout as the bytes pass to find a cut without decompressing
twice.
"""

from __future__ import annotations

import bz2
import gzip
import io
import zlib
from typing import IO, Protocol

from sparse_io.errors import CorruptFileError, first_line

__all__ = ["ZstdFrameCheck", "ZstdLayoutError", "checked_stream"]


class _Stream(Protocol):
    """What `_CheckedStream` needs of a decompressor: `read(size)` and `close()`."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


def checked_stream(path: str, kind: str, raw: IO[bytes]):
    """A stream of the decompressed bytes of `raw` ("gzip", "bz2" or "zstd") that never reads short.

    Its `read` raises `CorruptFileError` (naming `path`) for a truncated or
    damaged stream. The caller closes `raw`.
    """
    counted = _CountedSource(raw)
    frames = None
    stream: _Stream
    if kind == "gzip":
        stream = gzip.GzipFile(fileobj=counted, mode="rb")
    elif kind == "bz2":
        stream = bz2.BZ2File(counted, mode="rb")
    elif kind == "zstd":
        import zstandard

        frames = ZstdFrameCheck(counted)
        # The stub asks for IO[bytes]; the reader only ever calls `read`, which ZstdFrameCheck has.
        stream = zstandard.ZstdDecompressor().stream_reader(frames, read_across_frames=True)  # type: ignore[arg-type]
    else:
        raise ValueError(f"unknown compression {kind!r}")
    return _CheckedStream(path, kind, stream, counted, frames)


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

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = 0) -> int:
        # The decompressors only rewind seekable files; a stream read once forward is not one.
        raise io.UnsupportedOperation("a compressed log is read once, forward")

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

    def __init__(self, path: str, kind: str, stream: _Stream, source: _CountedSource, frames: ZstdFrameCheck | None):
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
            self._check_zstd_end(self._frames)
        self._delivered += len(data)
        return data

    def _check_zstd_end(self, frames: ZstdFrameCheck) -> None:
        if not self._source.exhausted:
            # The reader stopped before the input did: bytes follow that are not a frame it reads.
            raise self._error("damaged", f"the stream stops at byte {self._source.offset} of a longer file")
        if not frames.at_boundary:
            raise self._error(
                "truncated",
                f"the frame starting at byte {frames.frame_start} has no end "
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
