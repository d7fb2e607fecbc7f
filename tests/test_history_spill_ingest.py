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


def _hot_log(tmp_path, n=30_000, seed=11):
    rng = np.random.default_rng(seed)
    user = np.where(rng.random(n) < 0.3, 0, rng.integers(1, 800, n))
    log = tmp_path / "events.csv"
    log.write_text("user,item,ts,rating\n" + "".join(
        f"{u},{i},{t},{r}\n" for u, i, t, r in zip(user, rng.integers(0, 50, n), rng.integers(0, 2000, n),
                                                   rng.integers(1, 6, n))))
    return log


def _ingest_files(tmp_path, log, name, **histories):
    config = _config(**histories)
    config["input"]["skip_header"] = True
    (tmp_path / f"{name}.json").write_text(json.dumps(config))
    out = tmp_path / name
    run_ingest(["--input", str(log), "--config", str(tmp_path / f"{name}.json"), "--output", str(out),
                "--no_report", "--progress_seconds", "0"])
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != "_MANIFEST.json"}


@pytest.mark.parametrize("histories", [{}, {"num_partitions": 5}, {"examples_per_event": False}])
def test_the_ingest_spills_events_by_partition_and_writes_the_bytes_of_the_in_memory_grouping(
        tmp_path, monkeypatch, histories):
    import transforms.beam
    from transforms.beam import history_spill
    from transforms.beam.histories import GroupHistories

    log = _hot_log(tmp_path)
    seen = []

    class InMemory(GroupHistories):  # the events themselves through the GroupByKey, as before spilling
        def __init__(self, *args, spill_dir=None, hold_for_count=False, **kwargs):
            seen.append((spill_dir, hold_for_count))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(transforms.beam, "GroupHistories", InMemory)
    expected = _ingest_files(tmp_path, log, "memory", **histories)
    monkeypatch.undo()
    # The ingest spills into its output directory; the local runner holds events on disk while they are counted.
    assert seen == [(str(tmp_path / "memory"), True)]

    spilled = []
    write = history_spill.SpillByPartition._write
    monkeypatch.setattr(history_spill.SpillByPartition, "_write",
                        lambda self, partition, table: spilled.append(write(self, partition, table)) or spilled[-1])

    class SmallSpills(GroupHistories):  # a worker's buffer of about 3,000 events: many spills per partition
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs, spill_bytes=100_000)

    monkeypatch.setattr(transforms.beam, "GroupHistories", SmallSpills)
    got = _ingest_files(tmp_path, log, "spill", **histories)
    assert len(spilled) > histories.get("num_partitions", 32)  # several spills of every partition
    assert all(p.startswith(str(tmp_path / "spill")) for p in spilled)
    assert not [p for p in spilled if (tmp_path / "spill" / p.rsplit("/", 1)[-1]).exists()]
    assert "part-00001-of-00002.parquet" in expected
    assert got == expected


def test_a_failed_history_ingest_leaves_no_spill_file(tmp_path, monkeypatch):
    from transforms.beam import histories, history_spill

    log = _hot_log(tmp_path, n=5000)
    spilled = []
    write = history_spill.SpillByPartition._write
    monkeypatch.setattr(history_spill.SpillByPartition, "_write",
                        lambda self, partition, table: spilled.append(write(self, partition, table)) or spilled[-1])

    def failing(batches, options, **kwargs):
        next(iter(batches))  # the spill files exist and are being read
        raise RuntimeError("building histories failed")

    monkeypatch.setattr(histories, "partition_histories", failing)
    with pytest.raises(Exception, match="building histories failed"):
        _ingest_files(tmp_path, log, "out")
    assert spilled
    left = sorted(p.name for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert not [n for n in left if n.startswith(".tmp-")], left
