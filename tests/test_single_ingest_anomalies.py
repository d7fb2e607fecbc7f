"""Anomalies of one ingest alone on generated ingests: always missing, constant, label rate 0 or 1, dead letters."""

import json

import numpy as np
import pytest

from pipelines.anomalies import DEAD_LETTERS, DEFAULT_THRESHOLDS, find_anomalies
from pipelines.dead_letter_counts import MAX_REASONS, count_letters, pattern
from pipelines.ingest import run_ingest
from pipelines.validate import main
from tests.conftest import REPO_ROOT

OWN_LOGS = str(REPO_ROOT / "pipelines" / "configs" / "own_logs.yaml")
HEADER = "clicked\tuser_id\titem_id\ttags\tprice\tevent_time"


def _line(clicked, user, item, tags, price, time):
    return f"{clicked}\t{user}\t{item}\t{tags}\t{price}\t{time}"


def _ingest(tmp_path, name, lines, *extra):
    log = tmp_path / f"{name}.tsv"
    log.write_text("\n".join([HEADER, *lines]) + "\n")
    config = tmp_path / "own.yaml"
    # Up to 5% of the lines may be dead letters here, so the ingest keeps going and the validation can tell.
    config.write_text(open(OWN_LOGS).read().replace("error_budget: 0.01", "error_budget: 0.05"))
    summary = run_ingest(["--input", str(log), "--config", str(config), "--output", str(tmp_path / name), *extra])
    return tmp_path / name, summary


def _run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(map(str, argv)))
        raise SystemExit(0)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_a_degenerate_log_flags_each_single_ingest_kind(tmp_path, capsys):
    rng = np.random.default_rng(5)
    # Every row: no tags, the same user, the same price, no click; items and times vary.
    lines = [_line(0, "u7", f"i{rng.integers(0, 30)}", "NA", "4.50", 1_709_251_200_000 + i) for i in range(300)]
    out, _ = _ingest(tmp_path, "flat", lines, "--no_report")
    code, printed, _ = _run(capsys, out)
    assert code == 3
    found = [tuple(line.split("\t")[:2]) for line in printed.splitlines()]
    assert found == [("clicked", "label_constant"), ("price", "constant"), ("tags", "always_missing"),
                     ("user_id", "constant")]
    recorded = json.loads((out / "stats.json").read_text())["validation"]["anomalies"]
    assert [(a["feature"], a["kind"]) for a in recorded] == found
    assert "every label is 0" in printed and "every value is 4.5" in printed


def test_dead_letters_of_one_kind_above_their_threshold_are_flagged_with_their_text(tmp_path, capsys):
    rng = np.random.default_rng(6)
    lines = []
    for i in range(1_000):
        clicked = int(rng.random() < 0.3)
        if i % 100 == 17:
            clicked = 2 + i % 3  # 10 labels that are not 0 or 1: 1% of the rows read
        price = "abc" if i == 500 else f"{rng.gamma(2, 10):.2f}"  # one bad price: 0.1% of the rows read
        lines.append(_line(clicked, f"u{rng.integers(0, 50)}", f"i{rng.integers(0, 40)}", "t1|t2", price,
                           1_709_251_200_000 + i))
    out, summary = _ingest(tmp_path, "bad", lines)
    assert summary["bad_records"] == 11 and summary["rows_in"] == 1_000
    stats = json.loads((out / "stats.json").read_text())
    letters = stats["dead_letters"]
    assert (letters["records"], letters["bad"]) == (1_000, 11)
    (labels,) = [r for r in letters["reasons"] if r["pattern"].startswith("clicked: label N is not N or N")]
    assert labels["count"] == 10 and labels["share"] == pytest.approx(0.01)
    # The reasons as written, with their counts: 2, 3 and 4 in turn over i % 100 == 17.
    expected_labels = {2 + i % 3 for i in range(1_000) if i % 100 == 17}
    assert {int(text.split()[2]) for text, _ in labels["texts"]} == expected_labels
    assert sum(n for _, n in labels["texts"]) == 10 and labels["more_texts"] == 0
    assert [e["line"] for e in labels["examples"]] == [19, 119, 219]  # the header is line 1
    (price,) = [r for r in letters["reasons"] if r["pattern"].startswith("price")]
    assert price["count"] == 1 and "'abc'" in price["texts"][0][0]
    # Flagged: the labels (1% > 0.1%); not the price (exactly 0.1%, not above it).
    assert DEFAULT_THRESHOLDS["dead_letters"] == 0.001
    code, printed, _ = _run(capsys, out)
    assert code == 3
    (flag,) = [line.split("\t") for line in printed.splitlines()]
    assert flag[:4] == [DEAD_LETTERS, "dead_letters", "0.01", "0.001"]
    assert flag[4].startswith("10 of 1,000 rows read (1.00%): clicked: label ") and "is not 0 or 1" in flag[4]
    assert [(a["feature"], a["kind"]) for a in stats["validation"]["anomalies"]] == [(DEAD_LETTERS, "dead_letters")]
    # A threshold from the config quiets it.
    config = tmp_path / "v.yaml"
    config.write_text("validation:\n  thresholds: {dead_letters: 0.02}\n")
    code, printed, _ = _run(capsys, out, "--config", config)
    assert code == 0, printed


def test_an_older_output_without_counted_dead_letters_gets_them_from_its_errors_file(tmp_path, capsys):
    out = tmp_path / "old"
    (out / "errors").mkdir(parents=True)
    (out / "stats.json").write_text(json.dumps({"num_rows": 90, "features": {}}))
    letters = [{"source": "a.tsv", "line": i + 2, "reason": f"expected 6 fields, got {7 + i % 2}", "raw": "x"}
               for i in range(10)]
    (out / "errors" / "dead_letters.jsonl").write_text("".join(json.dumps(x) + "\n" for x in letters))
    code, printed, _ = _run(capsys, out)
    assert code == 3
    (flag,) = [line.split("\t") for line in printed.splitlines()]
    assert float(flag[2]) == pytest.approx(10 / 100)  # 90 rows written and 10 dead letters were read
    assert flag[4].startswith("10 of 100 rows read (10.00%): expected 6 fields, got 7 (and 1 other text")
    # A committed output's manifest counts the rows read (an ingest of histories writes fewer rows than it read).
    (out / "_MANIFEST.json").write_text(json.dumps({"totals": {"rows_in": 1_000, "rows_out": 90, "bad": 10}}))
    code, printed, _ = _run(capsys, out)
    assert code == 3 and printed.split("\t")[4].startswith("10 of 1,000 rows read (1.00%)")


def test_reasons_group_by_pattern_keeping_their_texts_and_examples():
    assert pattern("label 3 is not 0 or 1") == "label N is not N or N"
    assert pattern("C10: 'x1' is not an int64 integer") == "C10: '...' is not an int64 integer"
    assert pattern("byte 5 (0x9f) is not valid there") == "byte N (N) is not valid there"
    letters = [{"source": "s", "line": i, "reason": f"x: {i % 4} is bad", "raw": "r" * 500} for i in range(8)]
    letters.append({"source": "s", "line": 99, "reason": "expected 3 fields, got 2", "raw": ""})
    entry = count_letters(letters, 100)
    assert entry["bad"] == 9 and [r["count"] for r in entry["reasons"]] == [8, 1]
    first = entry["reasons"][0]
    assert first["pattern"] == "x: N is bad" and first["share"] == 0.08
    assert first["texts"] == [["x: 0 is bad", 2], ["x: 1 is bad", 2], ["x: 2 is bad", 2]]
    assert first["more_texts"] == 1 and [e["line"] for e in first["examples"]] == [0, 1, 2]
    assert len(first["examples"][0]["raw"]) == 200
    many = count_letters([{"reason": f"column c{i}: bad"} for i in range(MAX_REASONS + 5)], 1_000)
    assert len(many["reasons"]) == MAX_REASONS and many["other"] == {"reasons": 5, "count": 5}
    with pytest.raises(ValueError, match="records must be >= 0"):
        count_letters([], -1)


def test_dead_letter_anomalies_use_the_recorded_counts_and_the_threshold():
    stats = {"features": {}, "dead_letters": count_letters(
        [{"reason": "a: 1 is bad"}] * 3 + [{"reason": "b: missing label"}] * 20, 1_000)}
    found = {a.detail.split(": ", 1)[1]: a.value for a in find_anomalies(stats)}
    assert found == {"b: missing label": 0.02, "a: 1 is bad": 0.003}
    from pipelines.anomalies import thresholds_from

    quieter = thresholds_from({"thresholds": {"dead_letters": 0.005}})
    assert [a.value for a in find_anomalies(stats, thresholds=quieter)] == [0.02]
