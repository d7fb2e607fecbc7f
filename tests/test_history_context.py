"""Held-out histories with training context (`histories.context_from`), against a builder written here."""

import collections
import csv
import datetime
import json
import random

import pytest
from conftest import SHARED_DATA

from pipelines.config import ConfigError, parse_config
from pipelines.ingest import main, run_ingest
from sparse_io.shard_set import iter_shards

YOOCHOOSE = SHARED_DATA / "yoochoose-clicks-sample.dat"
MAX_LENGTH = 4


def _examples(own, context, max_length, min_length=1):
    """Per event of `own`: the key's events of `own` and `context` with a strictly smaller time, last
    `max_length` of them in (time, item, weight) order; (key, time, history items, history weights, target)."""
    by_key = collections.defaultdict(list)
    for e in own + context:
        by_key[e["user"]].append(e)
    rows = []
    for e in own:
        earlier = sorted((x for x in by_key[e["user"]] if x["ts"] < e["ts"]),
                         key=lambda x: (x["ts"], x["item"], x["rating"]))[-max_length:]
        if len(earlier) >= min_length:
            rows.append((e["user"], e["ts"], [x["item"] for x in earlier], [x["rating"] for x in earlier],
                         e["item"]))
    return sorted(rows)


def _config(context_from, **histories):
    return {
        "input": {"format": "jsonl", "schema": [
            {"name": "user", "kind": "dense", "dtype": "int64"},
            {"name": "item", "kind": "dense", "dtype": "int64"},
            {"name": "ts", "kind": "dense", "dtype": "int64"},
            {"name": "rating", "kind": "dense", "dtype": "float32"},
        ]},
        "histories": {"key": "user", "item": "item", "time": "ts", "weight": "rating", "max_length": MAX_LENGTH,
                      "examples_per_event": True, "context_from": context_from, **histories},
        "output": {"num_shards": 1},
        "stats": {"batch_sizes": [8]},
    }


def _write(path, events):
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return str(path)


def _ingest(tmp_path, config, log, name="out"):
    (tmp_path / f"{name}.json").write_text(json.dumps(config))
    out = tmp_path / name
    run_ingest(["--input", log, "--config", str(tmp_path / f"{name}.json"), "--output", str(out), "--no_report",
                "--progress_seconds", "0"])
    return out


def _rows(out, key="user", time="ts", item="item", weights="item__weights"):
    rows = [r for table in iter_shards(str(out)) for r in table.to_pylist()]
    return sorted((r[key], r[time], r[item], r.get(weights), r["target_" + item]) for r in rows)


@pytest.mark.parametrize("seed", [0, 1])
def test_held_out_examples_reach_back_into_context_never_forward(tmp_path, seed):
    rng = random.Random(seed)
    events = [{"user": rng.randrange(8), "item": rng.randrange(12), "ts": rng.randrange(40),
               "rating": float(rng.randrange(1, 6))} for _ in range(160)]
    # Context and held-out events interleave in time: a context event later than a held-out one must
    # stay out of its history, and context events are never examples.
    context = [e for e in events if rng.random() < 0.6]
    own = [e for e in events if e not in context] + [{"user": 99, "item": 1, "ts": 5, "rating": 1.0}]
    config = _config(_write(tmp_path / "context.jsonl", context), min_length=2)
    out = _ingest(tmp_path, config, _write(tmp_path / "own.jsonl", own))
    expected = _examples(own, context, MAX_LENGTH, min_length=2)
    assert _rows(out) == expected
    manifest = json.loads((out / "_MANIFEST.json").read_text())
    assert sorted(e["path"] for e in manifest["inputs"]) == sorted([config["histories"]["context_from"],
                                                                    str(tmp_path / "own.jsonl")])
    assert len(expected) > 40
    assert sum(1 for _ in own) > len(expected)  # some held-out events have too short a history


def test_without_context_the_same_config_sees_only_its_own_events(tmp_path):
    context = [{"user": 1, "item": 7, "ts": 1, "rating": 3.0}, {"user": 1, "item": 8, "ts": 9, "rating": 2.0}]
    own = [{"user": 1, "item": 5, "ts": 4, "rating": 5.0}, {"user": 1, "item": 6, "ts": 9, "rating": 4.0}]
    with_context = _rows(_ingest(tmp_path, _config(_write(tmp_path / "c.jsonl", context)),
                                 _write(tmp_path / "own.jsonl", own), "a"))
    # By hand: item 5 sees 7; item 6 (t=9) sees 7 and 5, never 8 (the same time) nor itself.
    assert with_context == [(1, 4, [7], [3.0], 5), (1, 9, [7, 5], [3.0, 5.0], 6)]
    config = _config(None)
    del config["histories"]["context_from"]
    assert _rows(_ingest(tmp_path, config, str(tmp_path / "own.jsonl"), "b")) == [(1, 9, [5], [5.0], 6)]


def test_context_from_is_checked():
    with pytest.raises(ConfigError, match="histories.context_from.*needs examples_per_event"):
        parse_config(_config("x.jsonl", examples_per_event=False))


def test_context_from_matching_nothing_or_the_input_exits_2(tmp_path, capsys):
    (tmp_path / "c.json").write_text(json.dumps(_config(str(tmp_path / "nothing-*.jsonl"))))
    log = _write(tmp_path / "own.jsonl", [{"user": 1, "item": 5, "ts": 4, "rating": 5.0}])
    with pytest.raises(SystemExit) as e:
        main(["--input", log, "--config", str(tmp_path / "c.json"), "--output", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "histories.context_from" in err and "matches no files" in err
    (tmp_path / "c.json").write_text(json.dumps(_config(str(tmp_path / "own.*"))))
    with pytest.raises(SystemExit) as e:
        main(["--input", log, "--config", str(tmp_path / "c.json"), "--output", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "histories.context_from" in err and "also an --input file" in err


def _millis(text):
    return round(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def test_a_time_split_of_a_real_session_log_keeps_every_held_out_example(tmp_path):
    if not YOOCHOOSE.exists():
        pytest.skip(f"real sample {YOOCHOOSE.name} not present at {SHARED_DATA}")
    with open(YOOCHOOSE, newline="", encoding="utf-8") as f:
        lines = list(csv.reader(f))
    events = [{"user": int(s), "ts": _millis(t), "item": int(i), "rating": 1.0, "line": ",".join([s, t, i, c])}
              for s, t, i, c in lines]
    # Leave the last click out: each session's latest click is held out, the earlier ones are training data.
    last = {}
    for e in events:
        if e["user"] not in last or (e["ts"], e["item"]) > (last[e["user"]]["ts"], last[e["user"]]["item"]):
            last[e["user"]] = e
    heldout = list(last.values())
    train = [e for e in events if last[e["user"]] is not e]
    (tmp_path / "train.dat").write_text("".join(e["line"] + "\n" for e in train))
    (tmp_path / "heldout.dat").write_text("".join(e["line"] + "\n" for e in heldout))
    config = {
        "input": {"format": "csv", "skip_header": False, "schema": [
            {"name": "session_id", "kind": "dense", "dtype": "int64"},
            {"name": "timestamp", "kind": "dense", "dtype": "timestamp", "unit": "ms"},
            {"name": "item_id", "kind": "dense", "dtype": "int64"},
            {"name": "category", "kind": "dense", "dtype": "string"},
        ]},
        "histories": {"key": "session_id", "item": "item_id", "time": "timestamp", "max_length": 50,
                      "examples_per_event": True, "item_columns": ["category"],
                      "context_from": str(tmp_path / "train.dat")},
        "features": {"category": {"hash_buckets": 10}},
        "output": {"num_shards": 1},
    }
    out = _ingest(tmp_path, config, str(tmp_path / "heldout.dat"))
    expected = [(u, t, h, i) for u, t, h, _, i in _examples(heldout, train, 50)]
    got = [(u, t, h, i) for u, t, h, _, i in _rows(out, "session_id", "timestamp", "item_id")]
    assert got == expected
    # Alone, a held-out click has no earlier click of its session: no example at all.
    assert _examples(heldout, [], 50) == [] and len(expected) == 121  # 121 of the 125 sessions have 2+ clicks
