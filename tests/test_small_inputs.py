"""Logs with fewer rows than `num_shards`, down to none at all, give a committed output every reader reads.

The rule (pipelines.ingest, transforms.beam.write_shards): when the rows cannot fill `num_shards`, only the
shards that got rows are kept, renumbered `part-i-of-K`; with no rows at all the output is one empty shard,
`part-00000-of-00001`. An empty log is an empty output, not an error.
"""

import gzip
import os
import subprocess
import sys

import pytest

from pipelines.ingest import run_ingest
from sparse_io.manifest import LOCK_FILE, MANIFEST_FILE, verify_directory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = "clicked,user_id,item_id,price"
ROWS = ["1,u1,i1|i2,2.5", "0,u2,i3,1.0", "1,u1,i4,0.5"]


def _config(tmp_path, shard_format="parquet", num_shards=4):
    path = tmp_path / f"{shard_format}-{num_shards}.yaml"
    path.write_text(f"""\
input:
  format: csv
  list_separator: "|"
  schema:
    - {{name: clicked, kind: label, dtype: int64}}
    - {{name: user_id, kind: sparse, dtype: string}}
    - {{name: item_id, kind: sparse, dtype: string}}
    - {{name: price, kind: dense, dtype: float32}}
features: {{user_id: {{hash_buckets: 100}}, item_id: {{hash_buckets: 100}}}}
output: {{format: {shard_format}, num_shards: {num_shards}, shuffle: true, seed: 1}}
stats: {{batch_sizes: [2]}}
""")
    return str(path)


def _zst(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data) if data else b""


# (file name, bytes, rows the output holds)
LOGS = {
    "empty": ("day.csv", b"", 0),
    "header_only": ("day.csv", (HEADER + "\n").encode(), 0),
    "header_only_cr": ("day.csv", (HEADER + "\r").encode(), 0),
    "zero_byte_gz": ("day.csv.gz", b"", 0),
    "zero_byte_zst": ("day.csv.zst", b"", 0),
    "header_only_gz": ("day.csv.gz", gzip.compress((HEADER + "\n").encode()), 0),
    "one_row": ("day.csv", (HEADER + "\n" + ROWS[0] + "\n").encode(), 1),
    "one_row_no_newline": ("day.csv", (HEADER + "\n" + ROWS[0]).encode(), 1),
    "cr_line_ends": ("day.csv", ("\r".join([HEADER, *ROWS]) + "\r").encode(), 3),
    "cr_line_ends_gz": ("day.csv.gz", gzip.compress(("\r".join([HEADER, *ROWS])).encode()), 3),
    "three_rows_zst": ("day.csv.zst", _zst(("\n".join([HEADER, *ROWS]) + "\n").encode()), 3),
}


def _ingest(log, out, config, *extra):
    return run_ingest(["--input", str(log), "--config", config, "--output", str(out), "--no_report",
                       "--progress_seconds", "0", *extra])


def _write_log(tmp_path, case):
    name, data, rows = LOGS[case]
    log = tmp_path / "logs" / name
    log.parent.mkdir(exist_ok=True)
    log.write_bytes(data)
    return log, rows


def _files(out):
    found = set()
    for root, _, names in os.walk(out):
        found.update(os.path.relpath(os.path.join(root, n), out).replace(os.sep, "/") for n in names)
    return found


def _dataset_rows(out, **kwargs):
    from transforms import make_dataset

    return sum(int(label.shape[0]) for _, label in make_dataset(str(out), 2, shuffle=False, **kwargs))


@pytest.mark.parametrize("case", sorted(LOGS))
def test_a_log_with_fewer_rows_than_shards_commits_an_output_every_reader_reads(tmp_path, case):
    from sparse_io import iter_shards

    log, rows = _write_log(tmp_path, case)
    out = tmp_path / "out"
    summary = _ingest(log, out, _config(tmp_path))
    assert summary["rows_out"] == rows
    manifest = verify_directory(str(out), "checksums")
    shards = [e["path"] for e in manifest["shards"]]
    # Only the shards that got rows, renumbered; an empty log is one empty shard.
    kept = max(1, len([e for e in manifest["shards"] if e["rows"]]))
    assert shards == [f"part-{i:05d}-of-{kept:05d}.parquet" for i in range(kept)]
    assert kept <= max(1, rows)
    assert manifest["totals"]["rows_out"] == rows == sum(e["rows"] for e in manifest["shards"])
    assert LOCK_FILE not in _files(out) and MANIFEST_FILE in _files(out)
    assert sum(batch.num_rows for batch in iter_shards(str(out), verify="checksums")) == rows
    assert _dataset_rows(out) == rows


@pytest.mark.parametrize("shard_format", ["parquet", "tfrecord", "arrow"])
def test_an_empty_log_is_an_empty_output_in_every_shard_format(tmp_path, shard_format):
    from sparse_io import iter_shards

    log, _ = _write_log(tmp_path, "header_only")
    out = tmp_path / "out"
    _ingest(log, out, _config(tmp_path, shard_format))
    suffix = {"parquet": ".parquet", "tfrecord": ".tfrecord", "arrow": ".arrow"}[shard_format]
    manifest = verify_directory(str(out), "checksums")
    assert [(e["path"], e["rows"]) for e in manifest["shards"]] == [(f"part-00000-of-00001{suffix}", 0)]
    assert sum(batch.num_rows for batch in iter_shards(str(out))) == 0
    assert _dataset_rows(out) == 0
    assert _dataset_rows(out, output="coo", capacities="stats") == 0


def test_a_rerun_over_a_small_output_replaces_it_and_fewer_rows_renumber_again(tmp_path):
    out = tmp_path / "out"
    log, _ = _write_log(tmp_path, "three_rows_zst")
    _ingest(log, out, _config(tmp_path, num_shards=8))
    first = {e["path"] for e in verify_directory(str(out), "checksums")["shards"]}
    assert len(first) == 3  # three rows, each in its own shard or sharing: at most three shards
    log, _ = _write_log(tmp_path, "one_row")
    _ingest(log, out, _config(tmp_path, num_shards=8), "--overwrite")
    manifest = verify_directory(str(out), "checksums")
    assert [(e["path"], e["rows"]) for e in manifest["shards"]] == [("part-00000-of-00001.parquet", 1)]


def test_a_failed_small_run_removes_its_renumbered_shards_and_a_rerun_commits(tmp_path, monkeypatch):
    import pipelines.ingest as ingest

    log, _ = _write_log(tmp_path, "one_row")
    out = tmp_path / "out"
    real_commit = ingest.commit_directory

    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ingest, "commit_directory", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        _ingest(log, out, _config(tmp_path))
    assert not [name for name in _files(out) if name.startswith("part-")], _files(out)
    monkeypatch.setattr(ingest, "commit_directory", real_commit)
    _ingest(log, out, _config(tmp_path))  # no --overwrite needed: the failed run left no shard
    assert verify_directory(str(out), "checksums")["totals"]["rows_out"] == 1


def test_verify_accepts_an_empty_output_and_train_refuses_it_with_exit_2(tmp_path):
    log, _ = _write_log(tmp_path, "empty")
    out = tmp_path / "out"
    _ingest(log, out, _config(tmp_path))
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    verified = subprocess.run([sys.executable, "-m", "pipelines.verify", str(out)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stderr[-2000:]
    assert "1 shards, 0 rows" in verified.stdout
    trained = subprocess.run([sys.executable, "-m", "pipelines.train", "--data", str(out), "--model_dir",
                              str(tmp_path / "model"), "--quiet"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=300)
    assert trained.returncode == 2, trained.stderr[-2000:]
    errors = [line for line in trained.stderr.splitlines() if line.startswith("pipelines.train:")]
    assert len(errors) == 1 and "no rows" in errors[0], trained.stderr[-2000:]


def test_a_criteo_log_whose_lines_end_in_a_lone_carriage_return_reads_every_line(tmp_path):
    from pipelines.synthetic import synthetic_criteo_lines

    log = tmp_path / "day.tsv"
    log.write_bytes("\r".join(synthetic_criteo_lines(3, seed=8)).encode() + b"\r")
    config = tmp_path / "criteo.yaml"
    config.write_text('input: {format: criteo}\nfeatures: {"C*": {hash_buckets: 100}}\n'
                      "output: {format: parquet, num_shards: 5}\nstats: {batch_sizes: [2]}\n")
    summary = _ingest(log, tmp_path / "out", str(config))
    assert (summary["rows_out"], summary["bad_records"]) == (3, 0)


def test_a_header_with_a_lone_carriage_return_inside_is_refused_in_one_line_naming_it(tmp_path, capsys):
    from pipelines.ingest import main

    log = tmp_path / "logs" / "day.csv"
    log.parent.mkdir()
    # "\r" ends the header only, "\n" the other lines: the first record would pass for part of the header.
    log.write_bytes((HEADER + "\r" + ROWS[0] + "\n" + ROWS[1] + "\n").encode())
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(["--input", str(log), "--config", _config(tmp_path), "--output", str(out), "--no_report"])
    assert info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pipelines.ingest:")]
    assert len(errors) == 1 and f"{log}: its lines end in a carriage return alone" in errors[0], errors
    assert not [name for name in _files(out) if name.startswith("part-") or name == MANIFEST_FILE]


def test_a_renumbered_shard_left_behind_is_replaced_with_overwrite_and_named_without(tmp_path):
    from pipelines.errors import UsageError

    log, _ = _write_log(tmp_path, "one_row")
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00000-of-00001.parquet").write_bytes(b"PAR1 left by a failed run")
    with pytest.raises(UsageError, match="pass --overwrite"):
        _ingest(log, out, _config(tmp_path))
    _ingest(log, out, _config(tmp_path), "--overwrite")
    assert verify_directory(str(out), "checksums")["totals"]["rows_out"] == 1
