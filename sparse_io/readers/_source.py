"""Finding and opening input files, and cutting text streams into blocks of lines.

Local paths are opened directly; anything with a scheme (gs://, s3://, ...)
goes through Beam's `FileSystems`. Compression follows the extension
(.gz, .zst/.zstd, .bz2), and every compressed stream is read to its end
marker: a truncated or damaged one raises `CorruptFileError` naming the
file, never reads short. Text is cut into blocks of a fixed number of lines
with numpy, so memory stays bounded by one block whatever the file size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
from collections.abc import Iterator, Sequence
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.locations import is_remote
from sparse_io.readers._decompress import checked_stream
from sparse_io.readers._line_limit import LongLine, bounded_pieces

_CHUNK_BYTES = 1 << 20
# The longest line a reader parses by default; a longer one is a dead letter, read past in chunks.
DEFAULT_MAX_LINE_BYTES = 16 << 20
_MAX_BLOCK_BYTES = (1 << 31) - 2  # binary arrays use int32 offsets


def is_local(path: str) -> bool:
    return not is_remote(path)


def expand_paths(pattern: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """Sorted files matching a path, a directory, a glob, or a list of those.

    A directory stands for the files directly in it, leaving out hidden ones
    and markers such as `_SUCCESS`.

    Raises:
      FileNotFoundError: a pattern matches no file.
    """
    patterns = [pattern] if isinstance(pattern, (str, os.PathLike)) else list(pattern)
    paths: list[str] = []
    for p in (os.fspath(q) for q in patterns):
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
    raw: IO[bytes]
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
        yield checked_stream(path, kind, raw)
    finally:
        raw.close()


def split_lines(data: bytes) -> pa.BinaryArray:
    r"""The lines of `data` (without their "\n"); a final "\n" ends the last line.

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
    r"""The stream's bytes in reads of `chunk_bytes`, without a UTF-8 byte order mark at the start.

    A file whose lines end in a lone carriage return (its first read holds
    a "\r" and no "\n": classic Mac line ends) has every "\r" read as "\n",
    so its lines split as any other file's.
    """
    first_read = True
    lone_cr: bool | None = None  # decided by the first bytes of text
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
        if lone_cr is None:
            lone_cr = b"\r" in chunk and b"\n" not in chunk
        yield chunk.replace(b"\r", b"\n") if lone_cr else chunk


def iter_byte_blocks(
    stream: IO[bytes],
    lines_per_block: int,
    chunk_bytes: int = _CHUNK_BYTES,
    max_line_bytes: int | None = None,
) -> Iterator[tuple[int, bytes] | LongLine]:
    r"""Yields `(first_line_number, data)`: the bytes of at most `lines_per_block` whole lines.

    Every block but the last ends with its last line's "\n"; the last may
    lack it when the file does. Line numbers are 1-based. Lines keep any
    "\r" before their "\n"; in a file whose lines end in a lone "\r", that
    "\r" ends the line. A UTF-8 byte order mark at the start of the file is
    dropped.

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
