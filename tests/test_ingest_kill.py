"""SIGKILL the ingest command while it writes shards: no partial shard ever has a final name, and a
re-run with --overwrite writes exactly what an uninterrupted run writes."""

import json
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


# --- SIGKILL at each phase of the run: read, spill, shard writing, between renames, the manifest ---------------

PHASE_ROWS = 4_000
PHASE_CONFIG = """\
input: {format: criteo, batch_size: 500}
features: {"C*": {hash_buckets: 5000}, C9: {vocabulary: {min_frequency: 1}}}
output: {format: parquet, num_shards: 3, row_group_size: 500, shuffle: true, seed: 5}
stats: {batch_sizes: [256]}
"""
# Run in the child: pauses the ingest inside one phase, after touching a marker file, so the SIGKILL lands
# there. Only this test's process is slowed; the ingest's own code is unchanged.
PAUSE_AT_PHASE = r'''
import os, sys, time

marker, phase = os.environ["KILL_MARKER"], os.environ["KILL_PHASE"]


def pause():
    open(marker, "w").close()
    time.sleep(120)


if phase == "read":
    import transforms.beam.read_logs as read_logs

    real_read_file = read_logs.read_file

    def read_file(*args, **kwargs):
        for i, batch in enumerate(real_read_file(*args, **kwargs)):
            yield batch
            if i == 1:
                pause()

    read_logs.read_file = read_file
elif phase == "spill":
    from transforms.beam.shard_spill import SpillByKeyRange

    real_spill = SpillByKeyRange._write

    def spill(self, *args, **kwargs):
        path = real_spill(self, *args, **kwargs)
        pause()
        return path

    SpillByKeyRange._write = spill
elif phase in ("shard", "renames"):
    import transforms.beam.shard_writer as shard_writer

    real_write = shard_writer.write_shard_file

    def cut_short(batches):
        for i, batch in enumerate(batches):
            yield batch
            if i == 1:
                pause()

    def write(path, format, batches, *args):
        if phase == "shard":
            return real_write(path, format, cut_short(batches), *args)
        rows = real_write(path, format, batches, *args)
        pause()  # this shard has its final name; the others do not yet
        return rows

    shard_writer.write_shard_file = write
elif phase == "manifest":
    import sparse_io.atomic as atomic

    real_write_text = atomic.atomic_write_text

    def write_text(path, text, **kwargs):
        if not path.endswith("_MANIFEST.json"):
            return real_write_text(path, text, **kwargs)
        with atomic.atomic_output(path, **kwargs) as f:
            f.write(text[: len(text) // 2].encode())
            f.flush()
            pause()
            f.write(text[len(text) // 2:].encode())

    atomic.atomic_write_text = write_text

from pipelines.ingest import main

sys.argv = ["pipelines.ingest"] + sys.argv[1:]
main()
'''


def _start_paused(script, log, config, out, phase, marker):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3", KILL_MARKER=marker, KILL_PHASE=phase)
    args = [sys.executable, script, "--input", log, "--config", config, "--output", out, "--overwrite",
            "--no_report", "--progress_seconds", "0"]
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def _manifest_without_time(out):
    with open(os.path.join(out, "_MANIFEST.json")) as f:
        manifest = json.load(f)
    manifest.pop("created")
    return manifest


def _files(out):
    found = set()
    for root, _, names in os.walk(out):
        found.update(os.path.relpath(os.path.join(root, n), out) for n in names)
    return found


@pytest.fixture(scope="module")
def phase_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("phases")
    log = write_synthetic_criteo(str(root / "day.tsv"), PHASE_ROWS, seed=8)
    config = root / "ingest.yaml"
    config.write_text(PHASE_CONFIG)
    script = root / "paused_ingest.py"
    script.write_text(PAUSE_AT_PHASE)
    reference = str(root / "reference")
    proc = _start(log, str(config), reference)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    return root, log, str(config), str(script), reference


@pytest.mark.parametrize("phase", ["read", "spill", "shard", "renames", "manifest"])
def test_a_kill_in_any_phase_leaves_no_readable_output_and_a_rerun_equals_a_clean_run(phase_inputs, phase):
    from sparse_io import iter_shards
    from sparse_io.manifest import ManifestError
    from transforms import make_dataset

    root, log, config, script, reference = phase_inputs
    out, marker = str(root / f"out-{phase}"), str(root / f"paused-{phase}")
    proc = _start_paused(script, log, config, out, phase, marker)
    deadline = time.monotonic() + 240
    while not os.path.exists(marker):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, f"the ingest never reached the {phase} phase"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)

    assert not os.path.exists(os.path.join(out, "_MANIFEST.json"))
    if phase == "renames":
        assert any(n.startswith("part-") for n in os.listdir(out)), "a shard should have its final name"
    if phase == "manifest":
        assert [n for n in os.listdir(out) if n.endswith("_MANIFEST.json")], "the manifest's temporary should be there"
    if _final_shards(out):
        with pytest.raises(ManifestError, match="no _MANIFEST.json"):
            list(iter_shards(out))
        with pytest.raises(ManifestError, match="no _MANIFEST.json"):
            make_dataset(out, 64)
    else:  # killed before any shard had its name: nothing to read at all
        with pytest.raises(FileNotFoundError, match="no .parquet, .tfrecord or .arrow shard"):
            list(iter_shards(out))

    proc = _start(log, config, out)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert _files(out) == _files(reference)  # no temporaries, no lock, nothing stale
    assert _manifest_without_time(out) == _manifest_without_time(reference)
    for name in _final_shards(reference):
        assert _shard_tables(out)[name].equals(_shard_tables(reference)[name]), name
    for name in ("schema.json", "stats.json", "vocab/C9.txt", "errors/dead_letters.jsonl"):
        with open(os.path.join(out, name), "rb") as a, open(os.path.join(reference, name), "rb") as b:
            assert a.read() == b.read(), name
