"""Relative local paths are made absolute at launch, so workers in another directory read the same files."""

import contextlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

import pipelines.ingest as ingest
from pipelines.launch_paths import absolute_local
from sparse_io.shard_set import iter_shards

REPO = pathlib.Path(__file__).resolve().parents[1]

_CONFIG = {
    "input": {"format": "jsonl", "schema": [
        {"name": "user", "kind": "dense", "dtype": "int64"},
        {"name": "item", "kind": "dense", "dtype": "int64"},
        {"name": "ts", "kind": "dense", "dtype": "int64"},
    ]},
    "histories": {"key": "user", "item": "item", "time": "ts", "max_length": 3, "examples_per_event": True,
                  "context_from": "logs/context.jsonl"},
    "output": {"num_shards": 1},
    "stats": {"batch_sizes": [8]},
}


def test_urls_stay_and_local_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_local("gs://bucket/logs/*.tsv") == "gs://bucket/logs/*.tsv"
    assert absolute_local("logs/*.tsv") == str(tmp_path / "logs" / "*.tsv")
    assert absolute_local("./out/") == str(tmp_path / "out")
    assert absolute_local("/abs/day.tsv") == "/abs/day.tsv"


def test_the_graph_is_built_with_absolute_input_output_vocab_and_context_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pathlib.Path("cfg.json").write_text(json.dumps(_CONFIG))
    built = {}

    def capture(pipeline, config, input_pattern, output_dir, **kwargs):
        built.update(config=config, input=input_pattern, output=output_dir)

    monkeypatch.setattr(ingest, "build_ingest", capture)
    ingest.run_ingest(["--input", "logs/day*.jsonl", "--output", "out", "--config", "cfg.json",
                       "--vocab_from", "../train", "--validate_only", "--runner", "FnApiRunner"])
    assert built["input"] == str(tmp_path / "logs" / "day*.jsonl")
    assert built["output"] == str(tmp_path / "out")
    assert built["config"].vocab_from == str(tmp_path.parent / "train")
    assert built["config"].histories.context_from == str(tmp_path / "logs" / "context.jsonl")


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _events(rows):
    return "".join(json.dumps({"user": u, "item": i, "ts": t}) + "\n" for u, i, t in rows)


@pytest.mark.slow
def test_relative_paths_hold_on_an_external_worker_pool_in_another_directory(tmp_path):
    launch, elsewhere = tmp_path / "launch", tmp_path / "elsewhere"
    (launch / "logs").mkdir(parents=True)
    elsewhere.mkdir()
    (launch / "logs" / "context.jsonl").write_text(_events([(1, 10, 1), (1, 11, 2), (2, 20, 1)]))
    (launch / "logs" / "day.jsonl").write_text(_events([(1, 12, 5), (2, 21, 6), (3, 30, 7)]))
    (launch / "cfg.json").write_text(json.dumps(_CONFIG))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # The pool starts SDK workers with the `python` first on PATH: this interpreter's.
    env["PATH"] = str(pathlib.Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    port = _free_port()
    pool = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                             "--service_port", str(port)], cwd=elsewhere, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # the pool is ready once it listens
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert pool.poll() is None and time.monotonic() < deadline, "the worker pool did not start"
            time.sleep(0.2)
        done = subprocess.run(
            [sys.executable, "-m", "pipelines.ingest", "--input", "logs/day.jsonl", "--config", "cfg.json",
             "--output", "out", "--no_report", "--progress_seconds", "0", "--runner", "PortableRunner",
             "--job_endpoint", "embed", "--environment_type", "EXTERNAL", "--environment_config",
             f"localhost:{port}"], cwd=launch, env=env, capture_output=True, text=True, timeout=600, check=False)
    finally:
        pool.terminate()
        pool.wait(timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = sorted((r["user"], r["ts"], r["item"], r["target_item"])
                  for table in iter_shards(str(launch / "out")) for r in table.to_pylist())
    # Worked out by hand: each held-out event's history is its user's strictly earlier context events.
    assert rows == [(1, 5, [10, 11], 12), (2, 6, [20], 21)]
    assert not (elsewhere / "out").exists()
