"""Unshuffled history ingests come out in (key, time) order, each key's rows in one shard."""

import glob
import json
import os
import random

import pyarrow.parquet as pq
import pytest

from pipelines.ingest import run_ingest


def _config(examples_per_event: bool, key_dtype: str) -> dict:
    return {
        "input": {"format": "jsonl", "schema": [
            {"name": "user", "kind": "dense", "dtype": key_dtype},
            {"name": "item", "kind": "dense", "dtype": "int64"},
            {"name": "ts", "kind": "dense", "dtype": "timestamp", "unit": "s"},
        ]},
        "histories": {"key": "user", "item": "item", "time": "ts", "max_length": 5,
                      "examples_per_event": examples_per_event},
        "features": {"item": {"hash_buckets": 100}},
        "output": {"format": "parquet", "num_shards": 3, "shuffle": False, "seed": 0},
        "stats": {"batch_sizes": [8]},
    }


@pytest.mark.parametrize("examples_per_event,key_dtype", [(True, "int64"), (True, "string"), (False, "string")])
def test_unshuffled_histories_are_in_key_then_time_order(tmp_path, examples_per_event, key_dtype):
    rng = random.Random(4)
    events = [(rng.randint(-40, 40), rng.randint(1, 9), rng.randint(0, 10**9)) for _ in range(400)]
    rng.shuffle(events)
    make_key = (lambda u: u) if key_dtype == "int64" else (lambda u: f"user-{u:+04d}-with-a-long-common-prefix")
    log = tmp_path / "events.jsonl"
    log.write_text("".join(json.dumps({"user": make_key(u), "item": i, "ts": t}) + "\n" for u, i, t in events))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_config(examples_per_event, key_dtype)))
    out = str(tmp_path / "out")
    run_ingest(["--input", str(log), "--config", str(config), "--output", out, "--no_report",
                "--progress_seconds", "0"])
    shards = [pq.read_table(p).to_pylist() for p in sorted(glob.glob(os.path.join(out, "part-*.parquet")))]
    assert sum(len(s) for s in shards) > 0 and sum(bool(s) for s in shards) >= 2
    seen = set()
    for shard in shards:
        if examples_per_event:
            order = [(r["user"], r["ts"]) for r in shard]
        else:
            order = [(r["user"], r["ts"][0]) for r in shard]
        assert order == sorted(order)
        users = {r["user"] for r in shard}
        assert not users & seen
        seen |= users
    assert seen == {make_key(u) for u, _, _ in events}
    schema = {f["name"]: f for f in json.loads(open(os.path.join(out, "schema.json")).read())["features"]}
    assert schema["ts"]["time_unit"] == "s"
