"""Dead letters counted by reason: what stats.json's `dead_letters` entry holds and report.html shows.

An ingest writes every rejected record to `errors/dead_letters.jsonl` with a
reason naming the field and the check. Reasons that differ only in a number or
a quoted value ("label 2 is not 0 or 1", "label 3 is not 0 or 1"; "price: 'abc'
is not a finite float32") are one kind of problem: they are grouped under a
pattern with its numbers written N (not those inside a name: C10,
float32) and its quoted values '...', and each group keeps
the reasons as written (the most frequent, with their counts) and a few
example records.

The entry (the file is read once, line by line; the dead letters are bounded
by the ingest's error budget):

  {"records": int,   # rows read, good and bad (the share's denominator)
   "bad": int,       # dead letters in the file
   "reasons": [      # largest group first, at most MAX_REASONS; the rest in `other`
     {"pattern": str, "count": int, "share": float,          # share = count / records
      "texts": [[reason, count], ...], "more_texts": int,    # the reasons as written, most frequent first
      "examples": [{"source", "line", "reason", "raw"}, ...]}],
   "other": {"reasons": int, "count": int}}   # groups past MAX_REASONS, when any

Example:
  >>> pattern("label 3 is not 0 or 1"), pattern("price: 'abc' is not a finite float32")
  ('label N is not N or N', "price: '...' is not a finite float32")
"""

from __future__ import annotations

import collections
import json
import re

__all__ = ["count_dead_letters", "count_letters", "pattern", "MAX_REASONS", "EXAMPLES_PER_REASON"]

MAX_REASONS = 50
EXAMPLES_PER_REASON = 3
TEXTS_PER_REASON = 3
_RAW_KEPT = 200
# A quoted value (as repr() writes it) or a run of digits.
_VARYING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\b0x[0-9a-fA-F]+\b|\b\d+(?:\.\d+)?\b")


def pattern(reason: str) -> str:
    """The group a reason belongs to: its numbers written N (0x9f too), its quoted values '...'."""
    return _VARYING.sub(lambda m: "'...'" if m.group(0)[0] in "'\"" else "N", reason)


def count_letters(letters, records: int) -> dict:
    """The `dead_letters` entry (module doc) of an iterable of dead-letter dicts, out of `records` rows read.

    Raises:
      ValueError: `records` is negative.
    """
    if records < 0:
        raise ValueError(f"count_dead_letters: records must be >= 0, got {records}")
    groups: dict[str, dict] = {}
    bad = 0
    for letter in letters:
        bad += 1
        reason = str(letter.get("reason", ""))
        group = groups.setdefault(pattern(reason), {"count": 0, "texts": collections.Counter(), "examples": []})
        group["count"] += 1
        group["texts"][reason] += 1
        if len(group["examples"]) < EXAMPLES_PER_REASON:
            group["examples"].append({"source": str(letter.get("source", "")), "line": letter.get("line"),
                                      "reason": reason, "raw": str(letter.get("raw", ""))[:_RAW_KEPT]})
    denominator = max(records, bad)  # a file holding more letters than rows read cannot give a share above 1
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1]["count"], kv[0]))
    reasons = []
    for key, group in ranked[:MAX_REASONS]:
        texts = group["texts"].most_common(TEXTS_PER_REASON)
        reasons.append({"pattern": key, "count": group["count"],
                        "share": group["count"] / denominator if denominator else 0.0,
                        "texts": [[t, n] for t, n in texts], "more_texts": len(group["texts"]) - len(texts),
                        "examples": group["examples"]})
    entry = {"records": records, "bad": bad, "reasons": reasons}
    if len(ranked) > MAX_REASONS:
        rest = ranked[MAX_REASONS:]
        entry["other"] = {"reasons": len(rest), "count": sum(g["count"] for _, g in rest)}
    return entry


def _read_lines(path: str):
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path) as f:
        for raw in f:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                letter = json.loads(line)
            except json.JSONDecodeError:
                letter = {"reason": "(a line of the dead-letter file that is not JSON)", "raw": line}
            yield letter if isinstance(letter, dict) else {"reason": "(not a JSON object)", "raw": line}


def count_dead_letters(path: str, records: int) -> dict:
    """The `dead_letters` entry of the dead-letter file at `path` (any Beam filesystem); none read when absent.

    Args:
      path: an `errors/dead_letters.jsonl` file.
      records: rows read by the ingest, good and bad.
    """
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(path):
        return count_letters([], records)
    return count_letters(_read_lines(path), records)
