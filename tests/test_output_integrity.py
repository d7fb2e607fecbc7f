"""An ingest output is complete and committed, or unreadable; nothing outside what the ingest owns is touched."""

import json
import os
import signal
import subprocess
import sys
import time

import google_crc32c
import pyarrow.parquet as pq
import pytest

from pipelines.errors import UsageError
from pipelines.ingest import run_ingest
from pipelines.synthetic import synthetic_criteo_lines
from sparse_io.manifest import LOCK_FILE, MANIFEST_FILE, ManifestError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = 300
BAD = 3
CONFIG = """\
input: {format: criteo}
features: {"C*": {hash_buckets: 1000}, C9: {vocabulary: {min_frequency: 1}}}
output: {format: parquet, num_shards: NUM_SHARDS, row_group_size: 100, shuffle: true, seed: 3}
stats: {batch_sizes: [64]}
error_budget: BUDGET
"""


def _config(tmp_path, num_shards=2, budget=0.5, name="ingest.yaml"):
    path = tmp_path / name
    path.write_text(CONFIG.replace("NUM_SHARDS", str(num_shards)).replace("BUDGET", str(budget)))
    return str(path)


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    path = tmp_path_factory.mktemp("logs") / "day.tsv"
    lines = synthetic_criteo_lines(ROWS, seed=4)
    for i in range(BAD):  # a label that is no integer: a dead letter each
        lines[10 * i + 5] = "x" + lines[10 * i + 5]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _ingest(log, out, config, *extra):
    return run_ingest(["--input", log, "--config", config, "--output", str(out), "--no_report",
                       "--progress_seconds", "0", *extra])


def _files(out):
    found = set()
    for root, _, names in os.walk(out):
        found.update(os.path.relpath(os.path.join(root, n), out).replace(os.sep, "/") for n in names)
    return found


def _crc(path):
    with open(path, "rb") as f:
        return f"{google_crc32c.value(f.read()):08x}"


@pytest.fixture(scope="module")
def committed(log, tmp_path_factory):
    root = tmp_path_factory.mktemp("committed")
    out = root / "out"
    _ingest(log, out, _config(root))
    return str(out)


def test_the_manifest_lists_every_file_with_digests_and_the_run(committed, log):
    with open(os.path.join(committed, MANIFEST_FILE)) as f:
        manifest = json.load(f)
    listed = [e["path"] for e in manifest["shards"] + manifest["files"]]
    assert set(listed) == _files(committed) - {MANIFEST_FILE}
    assert [e["path"] for e in manifest["shards"]] == ["part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]
    assert sorted(e["path"] for e in manifest["files"]) == [
        "errors/dead_letters.jsonl", "schema.json", "stats.json", "vocab/C9.txt"
    ]
    for entry in manifest["shards"] + manifest["files"]:
        path = os.path.join(committed, entry["path"])
        assert entry["bytes"] == os.stat(path).st_size, entry["path"]
        assert entry["crc32c"] == _crc(path), entry["path"]
    for entry in manifest["shards"]:
        assert entry["rows"] == pq.ParquetFile(os.path.join(committed, entry["path"])).metadata.num_rows
    assert manifest["inputs"] == [{"path": log, "bytes": os.stat(log).st_size}]
    assert manifest["totals"] == {"rows_in": ROWS, "rows_out": ROWS - BAD, "bad": BAD}
    assert manifest["config"]["output"]["num_shards"] == 2 and manifest["config"]["error_budget"] == 0.5
    with open(os.path.join(committed, "errors", "dead_letters.jsonl")) as f:
        assert len(f.readlines()) == BAD


def test_readers_refuse_an_output_with_a_shard_missing_naming_it(committed, tmp_path):
    import shutil

    from sparse_io import iter_shards
    from transforms import make_dataset

    out = str(tmp_path / "copy")
    shutil.copytree(committed, out)
    # A glob is checked against the manifest too: a shard copied in beside the others is not part of the output.
    stray = os.path.join(out, "part-00002-of-00002.parquet")
    shutil.copy(os.path.join(out, "part-00000-of-00002.parquet"), stray)
    with pytest.raises(ManifestError, match="part-00002-of-00002.parquet is not in the manifest"):
        make_dataset(os.path.join(out, "part-*.parquet"), 32)
    os.remove(stray)
    os.remove(os.path.join(out, "part-00001-of-00002.parquet"))
    with pytest.raises(ManifestError, match="part-00001-of-00002.parquet is missing"):
        make_dataset(out, 32)
    with pytest.raises(ManifestError, match="part-00001-of-00002.parquet is missing"):
        list(iter_shards(out))
    os.remove(os.path.join(out, MANIFEST_FILE))
    with pytest.raises(ManifestError, match="no _MANIFEST.json"):
        make_dataset(out, 32)
    assert sum(int(label.shape[0]) for _, label in make_dataset(out, 64, verify="none", shuffle=False)) > 0


def test_train_refuses_an_output_without_manifest_in_one_line(committed, tmp_path):
    import shutil

    out = str(tmp_path / "copy")
    shutil.copytree(committed, out)
    os.remove(os.path.join(out, MANIFEST_FILE))
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "pipelines.train", "--data", out, "--model_dir",
                           str(tmp_path / "model"), "--quiet"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("pipelines.train:")]
    assert len(errors) == 1 and "no _MANIFEST.json" in errors[0], done.stderr[-2000:]
    assert not os.path.exists(tmp_path / "model" / "checkpoints")


def test_a_run_over_budget_leaves_no_output_its_dead_letters_in_place_and_counts_in_the_error(log, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UsageError) as info:
        _ingest(log, out, _config(tmp_path, budget=0.001))
    message = str(info.value)
    assert f"{BAD} of {ROWS} records were bad ({BAD / ROWS:.4%})" in message and "budget of 0.1000%" in message
    assert "\n" not in message
    assert _files(out) == {"errors/dead_letters.jsonl"}  # no manifest, no shards, no Beam temp directory
    with open(out / "errors" / "dead_letters.jsonl") as f:
        letters = [json.loads(line) for line in f]
    assert sorted(d["line"] for d in letters) == [10 * i + 6 for i in range(BAD)]
    # The failed run's dead letters are its own: a rerun with --overwrite replaces them.
    summary = _ingest(log, out, _config(tmp_path, budget=0.5, name="ok.yaml"), "--overwrite")
    assert summary["rows_out"] == ROWS - BAD and os.path.exists(out / MANIFEST_FILE)


def test_a_run_that_raises_leaves_no_output_and_its_dead_letters_in_place(log, tmp_path, monkeypatch):
    import transforms.beam.shard_writer as shard_writer

    real_write = shard_writer.write_shard_file

    def write_then_fail(path, *args):
        real_write(path, *args)
        raise RuntimeError("disk full")

    monkeypatch.setattr(shard_writer, "write_shard_file", write_then_fail)
    out = tmp_path / "out"
    with pytest.raises(Exception, match="disk full"):
        _ingest(log, out, _config(tmp_path))
    assert _files(out) == {"errors/dead_letters.jsonl"}
    with open(out / "errors" / "dead_letters.jsonl") as f:
        assert sorted(json.loads(line)["line"] for line in f) == [10 * i + 6 for i in range(BAD)]


def test_overwrite_removes_what_the_previous_manifest_lists_and_nothing_else(log, tmp_path):
    out = tmp_path / "out"
    _ingest(log, out, _config(tmp_path, num_shards=3))
    _ingest(log, out, _config(tmp_path, num_shards=2, name="two.yaml"), "--overwrite")
    assert sorted(n for n in os.listdir(out) if n.startswith("part-")) == [
        "part-00000-of-00002.parquet", "part-00001-of-00002.parquet"
    ]
    # A user's own files are never removed: the run refuses and names one, and the old output stays whole.
    (out / "vocab" / "my_vocab.txt").write_text("mine\n")
    (out / "part-time-schedule.xlsx").write_bytes(b"PK")
    before = {name: (out / name).read_bytes() for name in _files(out)}
    with pytest.raises(UsageError, match="which no ingest wrote there"):
        _ingest(log, out, _config(tmp_path), "--overwrite")
    assert {name: (out / name).read_bytes() for name in _files(out)} == before


def test_an_input_inside_the_output_is_refused_and_left_alone(log, tmp_path):
    out = tmp_path / "out"
    _ingest(log, out, _config(tmp_path))
    inside = out / "day.tsv"
    inside.write_bytes(open(log, "rb").read())
    with pytest.raises(UsageError, match="lies inside --output"):
        _ingest(str(inside), out, _config(tmp_path), "--overwrite")
    assert inside.read_bytes() == open(log, "rb").read()


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_killed_runs_files_and_temporaries_are_removed_by_the_next_run(log, tmp_path):
    import socket

    out = tmp_path / "out"
    out.mkdir()
    # What a SIGKILL leaves: its stale lock (owning what it writes), a final shard, temporaries.
    (out / "part-00000-of-00005.parquet").write_bytes(b"PAR1 cut")
    (out / ".tmp-0123456789ab-part-00001-of-00005.parquet").write_bytes(b"PAR1")
    (out / ".tmp-spill-00002-deadbeef.arrow").write_bytes(b"x" * 100)
    (out / "errors" / "beam-temp-dead_letters.jsonl-1234").mkdir(parents=True)
    (out / "errors" / "beam-temp-dead_letters.jsonl-1234" / "abc.dead_letters.jsonl").write_text("{}\n")
    owns = ["part-00000-of-00005.parquet", "schema.json", "errors/dead_letters.jsonl"]
    (out / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "owns": owns}))
    _ingest(log, out, _config(tmp_path))  # no --overwrite needed: nothing there was committed or is anyone's
    assert _files(out) == {
        MANIFEST_FILE, "part-00000-of-00002.parquet", "part-00001-of-00002.parquet", "schema.json", "stats.json",
        "vocab/C9.txt", "errors/dead_letters.jsonl",
    }


def test_a_run_killed_after_its_commit_keeps_its_output_whole(committed, log, tmp_path):
    import shutil
    import socket

    from sparse_io.manifest import verify_directory

    out = tmp_path / "out"
    shutil.copytree(committed, out)
    # Killed between the manifest's rename and the lock's release: the output is complete.
    owns = sorted(_files(out))
    (out / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "owns": owns}))
    with pytest.raises(UsageError, match="is not empty: it holds a committed ingest output"):
        _ingest(log, out, _config(tmp_path))
    assert _files(out) == set(owns)
    verify_directory(str(out), "checksums")


def test_a_lock_held_by_a_live_ingest_stops_a_second_one_at_once(log, tmp_path):
    import socket

    out = tmp_path / "out"
    out.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"host": socket.gethostname(), "pid": sleeper.pid, "started": "t", "owns": []}
        (out / LOCK_FILE).write_text(json.dumps(lock))
        with pytest.raises(UsageError, match=f"another ingest is writing to this output \\(pid {sleeper.pid}"):
            _ingest(log, out, _config(tmp_path), "--overwrite")
        assert sorted(os.listdir(out)) == [LOCK_FILE]
    finally:
        sleeper.kill()
        sleeper.wait()


# The first ingest waits inside its run (after its first spill file) until the test lets it go.
HELD_INGEST = r"""
import os, sys, time
from transforms.beam.shard_spill import SpillByKeyRange

real_spill = SpillByKeyRange._write


def spill(self, *args, **kwargs):
    path = real_spill(self, *args, **kwargs)
    open(os.environ["HELD_MARKER"], "w").close()
    while not os.path.exists(os.environ["HELD_RELEASE"]):
        time.sleep(0.01)
    return path


SpillByKeyRange._write = spill
from pipelines.ingest import main

sys.argv = ["pipelines.ingest"] + sys.argv[1:]
main()
"""


def test_two_ingests_into_one_output_one_fails_at_once_with_one_line_and_the_other_commits(log, tmp_path):
    out = tmp_path / "out"
    config = _config(tmp_path)
    script = tmp_path / "held_ingest.py"
    script.write_text(HELD_INGEST)
    marker, release = tmp_path / "held", tmp_path / "release"
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3", HELD_MARKER=str(marker),
               HELD_RELEASE=str(release))
    flags = ["--input", log, "--config", config, "--output", str(out), "--overwrite", "--no_report",
             "--progress_seconds", "0"]
    first = subprocess.Popen([sys.executable, str(script), *flags], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():  # the first run is writing
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        second = subprocess.run([sys.executable, "-m", "pipelines.ingest", *flags], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=300)
        release.write_text("")
        _, first_err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert second.returncode == 2
    errors = [line for line in second.stderr.splitlines() if line.startswith("pipelines.ingest:")]
    assert len(errors) == 1 and "another ingest is writing to this output" in errors[0], second.stderr[-2000:]
    assert first.returncode == 0, first_err.decode()[-2000:]
    from sparse_io.manifest import verify_directory

    assert verify_directory(str(out), "checksums")["totals"]["rows_out"] == ROWS - BAD


def test_a_truncated_compressed_log_stops_the_cli_with_exit_2_and_one_line_naming_it(log, tmp_path):
    import zstandard

    whole = zstandard.ZstdCompressor().compress(open(log, "rb").read())
    cut = tmp_path / "day.tsv.zst"
    cut.write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.ingest", "--input", str(cut), "--config", _config(tmp_path),
         "--output", str(out), "--no_report", "--progress_seconds", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=REPO),
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert lines[-1].startswith(f"pipelines.ingest: error: {cut}: ") and "truncated" in lines[-1], lines
    assert not os.path.exists(out / MANIFEST_FILE)
