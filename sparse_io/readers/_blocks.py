"""Parsing a block of lines in one vectorised call, isolating the lines that break it.

A format's parse function turns a whole block of lines into a record batch
plus the rows it found bad. Some faults (bad UTF-8, a malformed JSON object,
a CSV row with the wrong number of fields) make the vectorised parser fail
for the whole block instead; then the block is halved and each half parsed
again, until every failing piece is a single line, which becomes a dead
letter. Good lines keep the fast path, and a block with k bad lines costs
about log2(block size) extra parses per bad line.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.dead_letters import DeadLetter, DeadLetterSink, truncate_raw
from sparse_io.readers._convert import RowProblems

__all__ = ["ParseFn", "parse_lines"]

ParseFn = Callable[[pa.StringArray], tuple[pa.RecordBatch, RowProblems]]
_FAULTS = (pa.ArrowException, ValueError)


def _failure_reason(raw: bytes, exc: Exception, describe: Callable[[Exception], str]) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"invalid UTF-8 at byte {e.start}"
    return describe(exc)


def _isolate(lines: pa.BinaryArray, parse: ParseFn, describe, offset: int = 0) -> list:
    """[(offset, batch or None, RowProblems)] covering `lines` in order."""
    try:
        batch, problems = parse(lines.cast(pa.string()))
        return [(offset, batch, problems)]
    except _FAULTS as exc:
        if len(lines) == 1:
            reason = _failure_reason(lines[0].as_py(), exc, describe)
            problems = RowProblems(1)
            problems.add(np.ones(1, dtype=bool), lambda _: reason)
            return [(offset, None, problems)]
    mid = len(lines) // 2
    return _isolate(lines.slice(0, mid), parse, describe, offset) + _isolate(
        lines.slice(mid), parse, describe, offset + mid
    )


def parse_lines(
    lines: pa.BinaryArray,
    first_line: int,
    parse: ParseFn,
    *,
    source: str,
    sink: DeadLetterSink,
    describe_failure: Callable[[Exception], str] = str,
) -> pa.RecordBatch | None:
    r"""Parses one block of records; bad ones go to `sink`. Returns the good rows or None.

    Args:
      lines: the block's lines, without "\n" (a trailing "\r" is dropped here).
      first_line: 1-based line number of `lines[0]`.
      parse: the format's block parser.
      source: file name for dead letters.
      sink: receives dead letters and the record count.
      describe_failure: turns the parser's exception for a single line into a reason.
    """
    sink.count_records(len(lines))
    line_numbers = first_line + np.arange(len(lines))
    if pc.any(pc.ends_with(lines, pattern=b"\r")).as_py():
        lines = pc.replace_substring_regex(lines, r"\r$", "")
    letters = []
    blank = pc.match_substring_regex(lines, r"^\s*$").to_numpy(zero_copy_only=False)
    if blank.any():
        for i in np.flatnonzero(blank).tolist():
            letters.append(
                DeadLetter(source, int(line_numbers[i]), "empty line", truncate_raw(lines[i].as_py()))
            )
        keep = np.flatnonzero(~blank)
        lines, line_numbers = lines.take(pa.array(keep)), line_numbers[keep]
    good = []
    for offset, batch, problems in _isolate(lines, parse, describe_failure) if len(lines) else ():
        for row, reason in problems.reasons.items():
            raw = lines[offset + row].as_py()
            letters.append(DeadLetter(source, int(line_numbers[offset + row]), reason, truncate_raw(raw)))
        if batch is None:
            continue
        if problems.padded is not None:
            sink.count_padded(int((problems.padded & ~problems.bad).sum()))
        if problems.bad.any():
            batch = batch.filter(pa.array(~problems.bad))
        if batch.num_rows:
            good.append(batch)
    for letter in sorted(letters, key=lambda d: d.line):
        sink.add(letter)
    if not good:
        return None
    return good[0] if len(good) == 1 else pa.concat_batches(good)
