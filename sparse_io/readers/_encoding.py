r"""Text logs in another character encoding than UTF-8: checked by name, turned into UTF-8 block by block.

Blocks are cut at the byte "\n" before decoding, so only encodings that
write "\n" and "\r" as those single bytes (Latin-1, cp1252, GBK, Shift JIS,
...) can be read; UTF-16 and UTF-32 are refused by name.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator

from sparse_io.dead_letters import DeadLetter, truncate_raw
from sparse_io.readers._line_limit import LongLine

__all__ = ["DEFAULT_ENCODING", "check_encoding", "transcode_blocks"]

DEFAULT_ENCODING = "utf-8"


def check_encoding(name: str) -> str:
    r"""The codec's canonical name (e.g. "iso8859-1" for "latin-1").

    Raises:
      ValueError: not a Python text codec, or one whose line ends are not the bytes "\n" and "\r".

    Example:
      >>> check_encoding("Latin-1")
      'iso8859-1'
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"encoding must be a codec name such as 'latin-1', got {name!r}")
    try:
        canonical = codecs.lookup(name).name
        ends = "\n\r".encode(name)
    except LookupError as e:
        raise ValueError(f"encoding {name!r} is not a Python text codec: {e}") from None
    if ends != b"\n\r":
        raise ValueError(f"encoding {name!r} does not write a line end as the byte '\\n', so lines cannot be "
                         "found before decoding; convert the file to UTF-8")
    return canonical


def _decode_lines(first_line: int, data: bytes, encoding: str, path: str) -> Iterator[tuple[int, bytes] | DeadLetter]:
    """A block with undecodable lines: runs of good lines as UTF-8 blocks, a dead letter per bad line."""
    run: list[bytes] = []
    run_start = first_line
    lines = [part + b"\n" for part in data.split(b"\n")]  # not splitlines(): a lone "\r" ends no line here
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    for i, line in enumerate(lines):
        try:
            text = line.decode(encoding)
        except UnicodeDecodeError as e:
            if run:
                yield run_start, b"".join(run)
                run = []
            body = line.rstrip(b"\n")
            reason = f"cannot be decoded as {encoding}: byte {e.start} (0x{line[e.start]:02x}) is not valid there"
            yield DeadLetter(path, first_line + i, reason, truncate_raw(body))
            run_start = first_line + i + 1
            continue
        run.append(text.encode("utf-8"))
    if run:
        yield run_start, b"".join(run)


def transcode_blocks(
    blocks: Iterator[tuple[int, bytes] | LongLine], encoding: str, path: str
) -> Iterator[tuple[int, bytes] | LongLine | DeadLetter]:
    """`iter_byte_blocks`' blocks in UTF-8; a line `encoding` cannot decode comes as a `DeadLetter` in its place.

    A block splits around its bad lines into blocks that keep their line
    numbers; long lines (`LongLine`) pass through.
    """
    for item in blocks:
        if isinstance(item, LongLine):
            yield item
            continue
        first_line, data = item
        try:
            yield first_line, data.decode(encoding).encode("utf-8")
        except UnicodeDecodeError:
            yield from _decode_lines(first_line, data, encoding, path)
