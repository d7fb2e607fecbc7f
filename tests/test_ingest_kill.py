"""SIGKILL the ingest command while it writes shards: no partial shard ever has a final name, and a
re-run with --overwrite writes exactly what an uninterrupted run writes."""

import os
import random
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from pipelines.synthetic import write_synthetic_criteo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = 30_000
NUM_SHARDS = 6
KILLS = 3
# Many small row groups over several shards stretch the writing of each shard.
CONFIG = f"""\
input: {{format: criteo}}
features: {{"C*": {{hash_buckets: 5000}}}}
output: {{format: parquet, num_shards: {NUM_SHARDS}, row_group_size: 500, shuffle: true, seed: 11}}
stats: {{batch_sizes: [256]}}
"""


def _start(log, config, out):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    args = [sys.executable, "-m", "pipelines.ingest", "--input", log, "--config", config, "--output", out,
            "--overwrite", "--no_report", "--progress_seconds", "0"]
    # Its own process group, so the kill reaches any helper process it starts, and only those.
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def _shard_temporaries(out):
    """Temporary files of shards being written (the output-directory probe is not one)."""
    try:
        names = os.listdir(out)
    except FileNotFoundError:
        return []
    return [n for n in names if n.startswith(".tmp-") and "part-" in n]


def _wait_for_writing(proc, out, nth=1, timeout=120.0):
    """Polls until a temporary of the `nth` shard to be written is present; returns whether one is.

    False when the run ended first.
    """
    seen = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = _shard_temporaries(out)
        seen.update(now)
        if now and len(seen) >= nth:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    raise AssertionError("no shard temporary appeared")


def _final_shards(out):
    return sorted(n for n in os.listdir(out) if n.startswith("part-"))


def _assert_complete(path):
    """A final-named shard is a whole Parquet file: footer magic in place, every row group readable."""
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(-4, os.SEEK_END)
        tail = f.read(4)
    assert head == b"PAR1" and tail == b"PAR1", path
    meta = pq.ParquetFile(path).metadata
    table = pq.read_table(path)
    assert table.num_rows == meta.num_rows


def _shard_tables(out):
    return {name: pq.read_table(os.path.join(out, name)) for name in _final_shards(out)}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    log = write_synthetic_criteo(str(root / "day.tsv"), ROWS, seed=21)
    config = root / "ingest.yaml"
    config.write_text(CONFIG)
    return root, log, str(config)


def test_killed_ingest_leaves_no_partial_shard_and_a_rerun_matches_an_uninterrupted_run(inputs):
    root, log, config = inputs
    reference = str(root / "reference")
    proc = _start(log, config, reference)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    expected = _shard_tables(reference)
    assert len(expected) == NUM_SHARDS and sum(t.num_rows for t in expected.values()) == ROWS

    out = str(root / "out")
    rng = random.Random(1234)
    killed_while_writing = 0
    partial_seen = 0
    for _ in range(KILLS):
        proc = _start(log, config, out)
        # A seeded moment while shards are written: while the temporary of a seeded shard (the
        # first, second or third to be written) exists, a few milliseconds in.
        writing = _wait_for_writing(proc, out, nth=rng.randint(1, NUM_SHARDS // 2))
        time.sleep(rng.uniform(0.0, 0.01))
        alive = proc.poll() is None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        killed_while_writing += alive and writing
        partial_seen += bool(_shard_temporaries(out))
        for name in _final_shards(out):
            _assert_complete(os.path.join(out, name))
        # Whatever else is there under a part- name is a hidden temporary.
        assert all(not n.startswith("part-") or n.endswith(".parquet") for n in os.listdir(out))
    assert killed_while_writing == KILLS, "the kills should land while shards are being written"
    assert partial_seen >= 1, "at least one kill should cut a shard in the middle of its write"

    proc = _start(log, config, out)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert not [n for n in os.listdir(out) if n.startswith(".tmp-")]
    got = _shard_tables(out)
    assert sorted(got) == sorted(expected)
    for name, table in expected.items():
        assert got[name].equals(table), name
