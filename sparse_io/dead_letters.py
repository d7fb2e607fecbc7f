"""Dead letters: bad input records, kept aside and counted instead of crashing a read.

Every reader reports each record it cannot turn into a row as a `DeadLetter`
(where it came from, why it was rejected, and its raw text, truncated) to a
`DeadLetterSink`, which also counts every record seen. At the end of a run
the sink's bad fraction is held against an error budget: over budget raises
`ErrorBudgetExceeded` with a summary that says what went wrong first.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

__all__ = ["DeadLetter", "DeadLetterSink", "ErrorBudgetExceeded", "truncate_raw", "RAW_LIMIT"]

RAW_LIMIT = 1024  # bytes of raw text kept per dead letter


def truncate_raw(raw: bytes | str, limit: int = RAW_LIMIT) -> str:
    r"""The first `limit` bytes of a record as text, marked when cut.

    Undecodable bytes are shown as `\xNN` escapes so bad UTF-8 stays visible.

    Example:
      >>> truncate_raw(b"ab\xff")
      'ab\\xff'
      >>> truncate_raw("x" * 5, limit=3)
      'xxx...[+2 bytes]'
    """
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else bytes(raw)
    text = data[:limit].decode("utf-8", "backslashreplace")
    if len(data) > limit:
        text += f"...[+{len(data) - limit} bytes]"
    return text


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """One rejected record.

    Attributes:
      source: the file it came from.
      line: 1-based line number (text formats) or row number (Parquet).
      reason: what was wrong, naming the field and the check.
      raw: the record's text, truncated to about 1 KiB (see `truncate_raw`).
    """

    source: str
    line: int
    reason: str
    raw: str

    def to_dict(self) -> dict:
        """The letter as a JSON-able dict: source, line, reason, raw."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}"


class ErrorBudgetExceeded(ValueError):
    """More records were bad than the error budget allows.

    Attributes:
      bad, records: counts over the run; fraction = bad / records.
      error_budget: the allowed fraction.
      examples: the first dead letters (up to 5).
    """

    def __init__(self, bad: int, records: int, error_budget: float, examples: list[DeadLetter]):
        self.bad, self.records, self.error_budget = bad, records, error_budget
        self.examples = list(examples)
        fraction = bad / records if records else 1.0
        first = "; ".join(str(d) for d in self.examples) or "none kept"
        super().__init__(
            f"{bad} of {records} records were bad ({fraction:.4%}), over the error budget of "
            f"{error_budget:.4%}; first: {first}"
        )


class DeadLetterSink:
    """Collects dead letters and counts records for one or more reads.

    Attributes:
      records: records seen (good and bad; header lines are not records).
      bad: records rejected.
      padded: Criteo lines short of trailing fields that were read with those
        fields missing (not rejected, only counted).
      letters: the kept dead letters, in arrival order (all of them unless
        `max_kept` is set; `bad` counts every one either way).

    Example:
      >>> sink = DeadLetterSink()
      >>> sink.add(DeadLetter("a.tsv", 3, "label: missing", ""))
      >>> sink.count_records(10)
      >>> sink.bad, sink.fraction
      (1, 0.1)
    """

    def __init__(self, *, max_kept: int | None = None):
        if max_kept is not None and max_kept < 0:
            raise ValueError(f"max_kept must be >= 0, got {max_kept}")
        self.max_kept = max_kept
        self.records = 0
        self.bad = 0
        self.padded = 0
        self.letters: list[DeadLetter] = []

    def add(self, letter: DeadLetter) -> None:
        """Counts one bad record, keeping its letter unless `max_kept` letters are kept already."""
        self.bad += 1
        if self.max_kept is None or len(self.letters) < self.max_kept:
            self.letters.append(letter)

    def count_records(self, n: int) -> None:
        """Counts `n` more records read (good and bad): the denominator of `fraction`."""
        self.records += int(n)

    def count_padded(self, n: int) -> None:
        """Counts `n` more records that were kept with missing fields filled in."""
        self.padded += int(n)

    def merge(self, other: DeadLetterSink) -> None:
        """Adds another sink's counts and letters to this one (e.g. per-file sinks)."""
        self.records += other.records
        self.padded += other.padded
        for letter in other.letters:
            self.add(letter)
        self.bad += other.bad - len(other.letters)

    @property
    def fraction(self) -> float:
        """The fraction of records that were bad: bad / records (0.0 when nothing was read)."""
        return self.bad / self.records if self.records else 0.0

    def __len__(self) -> int:
        return len(self.letters)

    def __iter__(self) -> Iterator[DeadLetter]:
        return iter(self.letters)

    def summary(self) -> dict:
        """JSON-able counts and the first few reasons."""
        return {
            "records": self.records,
            "bad": self.bad,
            "padded": self.padded,
            "fraction": self.fraction,
            "first": [str(d) for d in self.letters[:5]],
        }

    def check_budget(self, error_budget: float) -> None:
        """Raises `ErrorBudgetExceeded` when `fraction` > `error_budget`.

        Raises:
          ValueError: `error_budget` outside [0, 1].
          ErrorBudgetExceeded: too many bad records.
        """
        if not 0.0 <= error_budget <= 1.0:
            raise ValueError(f"error_budget must be a fraction in [0, 1], got {error_budget!r}")
        if self.bad and self.fraction > error_budget:
            raise ErrorBudgetExceeded(self.bad, self.records, error_budget, self.letters[:5])

    def write_jsonl(self, path: str, *, output_root: str | None = None) -> str:
        """Writes the kept dead letters to `path` as JSON Lines, atomically; returns `path`.

        Each line is `{"source": ..., "line": ..., "reason": ..., "raw": ...}`.
        `output_root`: the output directory the file must stay in, symbolic
        links followed (see `sparse_io.atomic`).
        """
        from sparse_io.atomic import atomic_output

        with atomic_output(path, output_root=output_root) as f:
            for letter in self.letters:
                f.write(json.dumps(letter.to_dict(), ensure_ascii=False).encode("utf-8") + b"\n")
        return path
