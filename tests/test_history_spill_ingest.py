"""The history ingest writes the same bytes whether partitions are grouped in memory or spill to disk."""

import json

import numpy as np
import pytest

from pipelines.config import ConfigError, parse_config
from pipelines.ingest import run_ingest
from transforms.beam import history_stream

_SCHEMA = [
    {"name": "user", "kind": "dense", "dtype": "int64"},
    {"name": "item", "kind": "dense", "dtype": "int64"},
    {"name": "ts", "kind": "dense", "dtype": "int64"},
    {"name": "rating", "kind": "dense", "dtype": "float32"},
]


def _config(**histories):
    return {
        "input": {"format": "csv", "schema": _SCHEMA},
        "histories": {"key": "user", "item": "item", "time": "ts", "weight": "rating", "max_length": 8,
                      "examples_per_event": True, **histories},
        "output": {"num_shards": 2, "shuffle": True, "seed": 5},
        "stats": {"batch_sizes": [64]},
    }


@pytest.mark.parametrize("key", ["num_partitions", "memory_budget_mb"])
def test_partition_settings_must_be_positive_integers(key):
    with pytest.raises(ConfigError, match=f"histories.{key}"):
        parse_config(_config(**{key: 0}))
    with pytest.raises(ConfigError, match=f"histories.{key}"):
        parse_config(_config(**{key: "many"}))
    assert getattr(parse_config(_config(**{key: 3})).histories, key) == 3


def test_spilling_a_hot_key_partition_writes_the_same_bytes(tmp_path, monkeypatch):
    runs = []
    write_run = history_stream._Spill.write_run
    monkeypatch.setattr(history_stream._Spill, "write_run", lambda self, held: runs.append(1) or write_run(self, held))
    rng = np.random.default_rng(7)
    n = 90_000  # about 2.8 MiB of events in one partition: three sorted runs under a 1 MiB budget
    user = np.where(rng.random(n) < 0.3, 0, rng.integers(1, 500, n))
    log = tmp_path / "events.csv"
    log.write_text("user,item,ts,rating\n" + "".join(
        f"{u},{i},{t},{r}\n" for u, i, t, r in zip(user, rng.integers(0, 50, n), rng.integers(0, 2000, n),
                                                   rng.integers(1, 6, n))))
    outputs = {}
    for name, budget in (("memory", 1024), ("spill", 1)):
        config = _config(num_partitions=1, memory_budget_mb=budget)
        config["input"]["skip_header"] = True
        (tmp_path / f"{name}.json").write_text(json.dumps(config))
        out = tmp_path / name
        run_ingest(["--input", str(log), "--config", str(tmp_path / f"{name}.json"), "--output", str(out),
                    "--no_report", "--progress_seconds", "0", "--runner", "FnApiRunner"])
        # Every file but the manifest, which records the config (the budget) and the time.
        outputs[name] = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
                         if p.is_file() and p.name != "_MANIFEST.json"}
        outputs[name + " runs"] = len(runs)
    assert outputs.pop("memory runs") == 0 and outputs.pop("spill runs") >= 3
    assert "part-00001-of-00002.parquet" in outputs["memory"]
    assert outputs["spill"] == outputs["memory"]
