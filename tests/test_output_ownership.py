"""What an ingest or a convert may remove from an output, and one writer at a time for both.

The lock file says who writes an output, never what to delete: a killed run's leftovers are recognised by
the names an ingest writes, and only a manifest names the files of a committed output, all inside it.
"""

import json
import os
import socket
import subprocess
import sys

import pytest
from tfdata_data import random_rows, write_parquet_shards

from pipelines.convert import convert_output
from pipelines.errors import UsageError
from pipelines.ingest import run_ingest
from pipelines.output_lock import acquire_output_lock
from pipelines.synthetic import synthetic_criteo_lines
from sparse_io.manifest import LOCK_FILE, MANIFEST_FILE, commit_directory, verify_directory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = """\
input: {format: criteo}
features: {"C*": {hash_buckets: 100}}
output: {format: parquet, num_shards: 2, shuffle: true, seed: 3}
stats: {batch_sizes: [32]}
"""


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    root = tmp_path_factory.mktemp("ownership")
    (root / "day.tsv").write_text("\n".join(synthetic_criteo_lines(120, seed=6)) + "\n")
    (root / "config.yaml").write_text(CONFIG)
    return root


def _ingest(log, out, *extra):
    return run_ingest(["--input", str(log / "day.tsv"), "--config", str(log / "config.yaml"), "--output", str(out),
                       "--no_report", "--progress_seconds", "0", *extra])


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _files(out):
    found = set()
    for root, _, names in os.walk(out):
        found.update(os.path.relpath(os.path.join(root, n), out).replace(os.sep, "/") for n in names)
    return found


def test_a_crafted_stale_lock_listing_a_users_files_removes_none_of_them(log, tmp_path):
    out = tmp_path / "out"
    (out / "vocab").mkdir(parents=True)
    (out / "notes.txt").write_text("mine\n")
    (out / "vocab" / "my_vocab.txt").write_text("mine\n")
    (tmp_path / "outside.txt").write_text("mine\n")
    owns = ["notes.txt", "vocab/my_vocab.txt", "../outside.txt", str(tmp_path / "outside.txt")]
    (out / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "owns": owns}))
    with pytest.raises(UsageError, match="which no ingest wrote there"):
        _ingest(log, out, "--overwrite")
    assert (out / "notes.txt").read_text() == "mine\n"
    assert (out / "vocab" / "my_vocab.txt").read_text() == "mine\n"
    assert (tmp_path / "outside.txt").read_text() == "mine\n"


def test_a_killed_runs_shards_of_another_count_and_format_go_by_their_names_alone(log, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00003-of-00007.tfrecord").write_bytes(b"cut")
    (out / "schema.json").write_text("{")
    # The lock of the killed run lists nothing: its leftovers are known by the names an ingest writes.
    (out / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": _dead_pid(), "owns": []}))
    _ingest(log, out)
    assert "part-00003-of-00007.tfrecord" not in _files(out)
    verify_directory(str(out), "checksums")


def test_a_manifest_that_names_a_file_outside_the_output_is_refused_and_nothing_is_removed(log, tmp_path):
    out = tmp_path / "out"
    _ingest(log, out)
    (tmp_path / "outside.txt").write_text("mine\n")
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    manifest["files"].append({"path": "../outside.txt", "bytes": 5, "crc32c": "00000000"})
    (out / MANIFEST_FILE).write_text(json.dumps(manifest))
    before = _files(out)
    with pytest.raises(UsageError, match=r"\.\./outside\.txt"):
        _ingest(log, out, "--overwrite")
    assert (tmp_path / "outside.txt").read_text() == "mine\n"
    assert _files(out) == before


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("convert") / "parquet")
    write_parquet_shards(directory, random_rows(60, seed=2), 2, row_group_size=20)
    commit_directory(directory)
    return directory


def test_a_convert_into_an_output_another_run_holds_is_refused_at_once(committed, tmp_path):
    destination = str(tmp_path / "arrow")
    with acquire_output_lock(destination, []):
        with pytest.raises(UsageError, match="is writing to this output"):
            convert_output(committed, destination, "arrow")
        assert os.listdir(destination) == [LOCK_FILE]
    convert_output(committed, destination, "arrow")
    assert LOCK_FILE not in os.listdir(destination)
    verify_directory(destination, "checksums")


def test_an_ingest_into_an_output_a_convert_is_writing_names_the_convert(committed, log, tmp_path, monkeypatch):
    import sparse_io.shard_set as shard_set

    destination = tmp_path / "arrow"
    seen = []
    real_write = shard_set.write_shard

    def write_then_try_an_ingest(*args, **kwargs):
        with pytest.raises(UsageError, match="another convert is writing to this output") as info:
            _ingest(log, destination)
        seen.append(str(info.value))
        return real_write(*args, **kwargs)

    monkeypatch.setattr(shard_set, "write_shard", write_then_try_an_ingest)
    convert_output(committed, str(destination), "arrow")
    assert len(seen) == 2  # once per shard
    verify_directory(str(destination), "checksums")


def test_two_convert_commands_into_one_destination_one_is_refused_with_exit_2(committed, tmp_path):
    destination = str(tmp_path / "arrow")
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    with acquire_output_lock(destination, []):
        done = subprocess.run([sys.executable, "-m", "pipelines.convert", committed, destination, "--format", "arrow"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("pipelines.convert:")]
    assert len(errors) == 1 and "is writing to this output" in errors[0], done.stderr[-2000:]
