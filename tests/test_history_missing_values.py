"""A history ingest's events missing a key, time, item, weight or item-column value are dead letters, counted
and named, never a failed run: every other event still makes its history."""

import json
import os

import pytest

from pipelines.ingest import main

HEADER = "user\titem\tts\trating\tcategory\n"
GOOD = ["u1\t5\t100\t4.0\tx\n", "u1\t7\t102\t5.0\ty\n", "u2\t8\t103\t2.0\tx\n"]
CONFIG = """\
input:
  format: tsv
  schema:
    - {name: user, kind: dense, dtype: string}
    - {name: item, kind: dense, dtype: int64}
    - {name: ts, kind: dense, dtype: int64}
    - {name: rating, kind: dense, dtype: float32}
    - {name: category, kind: dense, dtype: string}
histories: {key: user, item: item, time: ts, weight: rating, item_columns: [category], max_length: 5,
            examples_per_event: false}
features:
  item: {hash_buckets: 1000}
  category: {hash_buckets: 100}
output: {format: parquet, num_shards: 1, shuffle: false}
error_budget: 0.5
"""


@pytest.mark.parametrize("bad_line, column", [
    ("\t6\t101\t3.0\tx\n", "user"),
    ("u1\t\t101\t3.0\tx\n", "item"),
    ("u1\t6\t\t3.0\tx\n", "ts"),
    ("u1\t6\t101\t\tx\n", "rating"),
    ("u1\t6\t101\t3.0\t\n", "category"),
])
def test_an_event_missing_a_history_column_is_a_dead_letter_naming_it(tmp_path, bad_line, column):
    log = tmp_path / "events.tsv"
    log.write_text(HEADER + GOOD[0] + bad_line + "".join(GOOD[1:]))
    config = tmp_path / "histories.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    main(["--input", str(log), "--config", str(config), "--output", str(out), "--no_report"])  # exits on failure
    with open(out / "errors" / "dead_letters.jsonl", encoding="utf-8") as f:
        letters = [json.loads(line) for line in f]
    assert len(letters) == 1
    assert letters[0]["line"] == 3 and column in letters[0]["reason"] and "missing" in letters[0]["reason"]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["num_rows"] == 2  # u1 and u2: the good events still make both histories
    assert os.path.exists(out / "_MANIFEST.json")


def test_a_jsonl_event_with_a_null_key_is_a_dead_letter(tmp_path):
    events = [{"user": 1, "item": "a", "ts": 1}, {"user": None, "item": "b", "ts": 2},
              {"user": 1, "item": "c", "ts": 3}, {"item": "d", "ts": 4}, {"user": 2, "item": "e", "ts": 5}]
    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    config = tmp_path / "histories.yaml"
    config.write_text("""\
input:
  format: jsonl
  schema:
    - {name: user, kind: dense, dtype: int64}
    - {name: item, kind: dense, dtype: string}
    - {name: ts, kind: dense, dtype: int64}
histories: {key: user, item: item, time: ts, max_length: 5}
features:
  item: {hash_buckets: 1000}
output: {format: parquet, num_shards: 1, shuffle: false}
error_budget: 0.5
""")
    out = tmp_path / "out"
    main(["--input", str(log), "--config", str(config), "--output", str(out), "--no_report"])
    with open(out / "errors" / "dead_letters.jsonl", encoding="utf-8") as f:
        letters = [json.loads(line) for line in f]
    assert [letter["line"] for letter in letters] == [2, 4]  # null, and absent
    assert all("user" in letter["reason"] and "missing" in letter["reason"] for letter in letters)
    assert json.loads((out / "stats.json").read_text())["num_rows"] == 2
