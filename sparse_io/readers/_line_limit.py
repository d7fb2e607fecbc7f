"""Cutting over-long lines out of a byte stream while it is read, in bounded memory.

`bounded_pieces` turns the chunks of a stream into pieces of whole lines no
longer than `max_line_bytes`, each with its newline offsets, and a
`LongLine` marker where a longer line was: such a line is never held whole,
only its first `max_line_bytes` (until it proves too long) and a short head
for its dead letter. Memory is bounded by one chunk plus `max_line_bytes`,
whatever the lines hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np

from sparse_io.dead_letters import RAW_LIMIT, truncate_raw

__all__ = ["LongLine", "bounded_pieces"]

_NEWLINE = 0x0A


@dataclasses.dataclass(frozen=True)
class LongLine:
    r"""A line longer than the limit, left out of the blocks.

    Attributes:
      line: 1-based line number (set by the block cutter; 0 until then).
      length: bytes in the line, without its "\n".
      limit: the `max_line_bytes` it exceeds.
      head: its first `RAW_LIMIT` bytes.
    """

    line: int
    length: int
    limit: int
    head: bytes

    @property
    def reason(self) -> str:
        return f"line of {self.length:,} bytes is longer than max_line_bytes ({self.limit:,})"

    @property
    def raw(self) -> str:
        """The head as dead-letter text, marked with the bytes left out."""
        left_out = self.length - len(self.head)
        return truncate_raw(self.head) + (f"...[+{left_out} bytes]" if left_out > 0 else "")


class _Skipping:
    """A line already known to be too long: its length so far and its head."""

    def __init__(self, head: bytes, length: int):
        self.head, self.length = head, length

    def add(self, view: memoryview) -> None:
        if len(self.head) < RAW_LIMIT:
            self.head += bytes(view[: RAW_LIMIT - len(self.head)])
        self.length += len(view)


def _head(pieces: list[memoryview], extra: memoryview | None = None) -> bytes:
    out = bytearray()
    for piece in [*pieces, extra] if extra is not None else pieces:
        out += piece[: RAW_LIMIT - len(out)]
        if len(out) >= RAW_LIMIT:
            break
    return bytes(out)


def bounded_pieces(
    chunks: Iterable[bytes], max_line_bytes: int | None
) -> Iterator[tuple[memoryview, np.ndarray] | LongLine]:
    r"""Yields `(piece, newline_offsets)` of lines within the limit, and a `LongLine` for each other line.

    The pieces between two markers join into whole lines, in order; only the
    last piece of the stream may end without "\n" (a last line without one).
    A piece's offsets are those of its "\n" bytes. `max_line_bytes` None: no
    limit (every line is held, however long).
    """
    limit = max_line_bytes if max_line_bytes is not None else float("inf")
    held: list[memoryview] = []  # the line in progress, while it is within the limit
    held_bytes = 0
    skipping: _Skipping | None = None
    none = np.empty(0, dtype=np.int64)
    for chunk in chunks:
        view = memoryview(chunk)
        found = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == _NEWLINE)
        if not found.size:
            if skipping is not None:
                skipping.add(view)
            elif held_bytes + len(view) > limit:
                skipping = _Skipping(_head(held, view), held_bytes + len(view))
                held, held_bytes = [], 0
            else:
                held.append(view)
                held_bytes += len(view)
            continue
        first = int(found[0])
        start = 0
        if skipping is not None or held_bytes + first > limit:
            # The line in progress ends at this chunk's first newline, too long.
            if skipping is None:
                skipping = _Skipping(_head(held), held_bytes)
            skipping.add(view[:first])
            yield LongLine(0, skipping.length, int(limit), skipping.head)
            skipping, held, held_bytes, start = None, [], 0, first + 1
        else:
            for piece in held:  # the line in progress is complete and within the limit
                yield piece, none
            held, held_bytes = [], 0
        # Lines wholly inside this chunk, from `start` on.
        ends = found[found >= start]
        if ends.size:
            lengths = np.diff(ends, prepend=start - 1) - 1
            if start == 0:
                lengths[0] = 0  # the completed line in progress, already checked
            segment = start
            for k in np.flatnonzero(lengths > limit).tolist():
                line_start = int(ends[k]) - int(lengths[k])
                if line_start > segment:
                    yield view[segment:line_start], ends[(ends >= segment) & (ends < line_start)] - segment
                head = bytes(view[line_start : line_start + min(int(lengths[k]), RAW_LIMIT)])
                yield LongLine(0, int(lengths[k]), int(limit), head)
                segment = int(ends[k]) + 1
            last = int(ends[-1])
            if last + 1 > segment:
                yield view[segment : last + 1], ends[ends >= segment] - segment
            start = last + 1
        tail = view[start:]
        if len(tail) > limit:
            skipping = _Skipping(bytes(tail[:RAW_LIMIT]), len(tail))
        elif len(tail):
            held, held_bytes = [tail], len(tail)
    if skipping is not None:
        yield LongLine(0, skipping.length, int(limit), skipping.head)
    for piece in held:
        yield piece, none
