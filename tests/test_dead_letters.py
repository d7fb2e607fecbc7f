"""DeadLetter / DeadLetterSink / ErrorBudgetExceeded: counting, budgets, the JSONL file."""

import json
import os

import pytest

from sparse_io import DeadLetter, DeadLetterSink, ErrorBudgetExceeded
from sparse_io.dead_letters import truncate_raw


def _letter(line, reason="bad"):
    return DeadLetter("logs/a.tsv", line, reason, f"raw {line}")


def test_sink_counts_records_bad_and_padded():
    sink = DeadLetterSink()
    assert sink.fraction == 0.0 and len(sink) == 0
    sink.count_records(8)
    sink.add(_letter(2))
    sink.add(_letter(5))
    sink.count_padded(3)
    assert (sink.records, sink.bad, sink.padded, len(sink)) == (8, 2, 3, 2)
    assert sink.fraction == 0.25
    assert [d.line for d in sink] == [2, 5]
    assert sink.summary() == {
        "records": 8,
        "bad": 2,
        "padded": 3,
        "fraction": 0.25,
        "first": ["logs/a.tsv:2: bad", "logs/a.tsv:5: bad"],
    }


def test_max_kept_bounds_memory_but_still_counts():
    sink = DeadLetterSink(max_kept=2)
    for i in range(5):
        sink.add(_letter(i))
    assert sink.bad == 5 and [d.line for d in sink] == [0, 1]


def test_merge_adds_counts_and_letters():
    a, b = DeadLetterSink(), DeadLetterSink(max_kept=1)
    a.count_records(3)
    a.add(_letter(1))
    b.count_records(4)
    b.count_padded(2)
    b.add(_letter(7))
    b.add(_letter(8))
    a.merge(b)
    assert (a.records, a.bad, a.padded, [d.line for d in a]) == (7, 3, 2, [1, 7])


def test_budget_is_checked_against_the_fraction():
    sink = DeadLetterSink()
    sink.count_records(100)
    sink.check_budget(0.0)  # nothing bad yet
    for i in range(3):
        sink.add(_letter(i, f"reason {i}"))
    sink.check_budget(0.03)
    with pytest.raises(ErrorBudgetExceeded) as info:
        sink.check_budget(0.02)
    err = info.value
    assert (err.bad, err.records, err.error_budget) == (3, 100, 0.02)
    assert [d.line for d in err.examples] == [0, 1, 2]
    assert str(err) == (
        "3 of 100 records were bad (3.0000%), over the error budget of 2.0000%; "
        "first: logs/a.tsv:0: reason 0; logs/a.tsv:1: reason 1; logs/a.tsv:2: reason 2"
    )
    assert isinstance(err, ValueError)
    with pytest.raises(ValueError, match="error_budget must be a fraction"):
        sink.check_budget(1.5)


def test_write_jsonl_writes_one_object_per_letter(tmp_path):
    sink = DeadLetterSink()
    sink.add(DeadLetter("a.tsv", 3, "label: missing label", "\tx\ty"))
    sink.add(DeadLetter("a.tsv", 9, "invalid UTF-8 at byte 0", truncate_raw(b"\xff\xfeok")))
    path = os.path.join(str(tmp_path), "errors", "dead_letters.jsonl")
    assert sink.write_jsonl(path) == path
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert rows == [
        {"source": "a.tsv", "line": 3, "reason": "label: missing label", "raw": "\tx\ty"},
        {"source": "a.tsv", "line": 9, "reason": "invalid UTF-8 at byte 0", "raw": "\\xff\\xfeok"},
    ]
    assert os.listdir(os.path.dirname(path)) == ["dead_letters.jsonl"]


def test_truncate_raw_keeps_one_kib_and_marks_the_cut():
    assert truncate_raw("short") == "short"
    long = truncate_raw(b"a" * 3000)
    assert long == "a" * 1024 + "...[+1976 bytes]"
    assert truncate_raw("é" * 600) == "é" * 512 + "...[+176 bytes]"  # the limit counts bytes
    assert truncate_raw("a" + "é" * 600).startswith(
        "a" + "é" * 511 + "\\xc3..."
    )  # a split character shows as an escape
