"""File handles are closed: a thousand shards and logs written and fully read under `ulimit -n 64`.

The work runs in a subprocess whose open-file limit is lowered before it
starts, so a reader or writer that left one handle open per file would run
out of descriptors long before the thousandth file. The subprocess first
checks that the limit bites (holding 100 files open must fail).

TFRecord shards are 150, not 1000: tf.data spends about 30 ms setting up the
read of each file here, and 150 is still more than twice what one leaked
handle per shard could survive. `make_dataset` reads 300 Parquet shards
twice over (its reader keeps a few shards open between row groups).
"""

import os
import resource
import subprocess
import sys
import textwrap

import pytest

LIMIT = 64
FILES = {"parquet": 1000, "tfrecord": 150}

_SCRIPT = textwrap.dedent(
    """
    import errno, gzip, os, sys
    import pyarrow as pa
    import pyarrow.parquet as pq
    import sparse_io
    from sparse_io import DeadLetterSink, FeatureSpec, Schema, ShardReport, iter_shards, read_logs, shard_name
    from sparse_io.manifest import commit_directory

    root, files, format = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # Labels count up with the file (integer labels, not clicks) so each row names its file.
    schema = Schema([FeatureSpec("label", "label", "int64", label_type="integer"),
                     FeatureSpec("items", "sparse", "int64", weighted=True)])

    # The limit bites: a leak of one handle per file would fail like this.
    held = []
    try:
        for i in range(100):
            held.append(open(__file__ if os.path.exists(__file__) else sys.executable, "rb"))
    except OSError as e:
        assert e.errno == errno.EMFILE, e
    else:
        raise AssertionError("100 open files were allowed: the descriptor limit is not in force")
    finally:
        for f in held:
            f.close()

    def batch(i):
        return pa.record_batch(
            {"label": [i, i + 1], "items": [[i], []], "items__weights": [[0.5], []]}, schema=schema.arrow_schema()
        )

    for suffix, write in ((".parquet", sparse_io.write_parquet_shard), (".tfrecord", sparse_io.write_tfrecord_shard)):
        if suffix != "." + format:
            continue
        directory = os.path.join(root, suffix[1:])
        for i in range(files):
            write(os.path.join(directory, shard_name(i, files, suffix)), [batch(i)], schema)
        schema.save(directory)
        commit_directory(directory)
        report = ShardReport()
        labels = [v for t in iter_shards(directory, report=report) for v in t.column("label").to_pylist()]
        assert report.read == files and labels == [v for i in range(files) for v in (i, i + 1)], suffix
        for i in range(0, files, 97):
            path = os.path.join(directory, shard_name(i, files, suffix))
            reader = sparse_io.read_parquet_shard if suffix == ".parquet" else sparse_io.read_tfrecord_shard
            assert reader(path, schema).num_rows == 2

    if format == "tfrecord":
        print("ok", flush=True)
        sys.exit(0)

    # Parquet and text logs through read_logs, good and bad records alike.
    sink = DeadLetterSink()
    shards = os.path.join(root, "parquet", "part-*.parquet")
    rows = sum(b.num_rows for b in read_logs(shards, "parquet", schema, errors=sink))
    assert rows == 2 * files and sink.records == 2 * files, (rows, sink.records)
    logs = os.path.join(root, "logs")
    os.makedirs(logs)
    for i in range(files):
        opener = gzip.open if i % 2 else open
        with opener(os.path.join(logs, f"day-{i:04d}.jsonl" + (".gz" if i % 2 else "")), "wb") as f:
            f.write(b'{"label": 1, "items": [3], "items__weights": [1.0]}\\nnull\\n')
    sink = DeadLetterSink()
    rows = sum(b.num_rows for b in read_logs(logs, "jsonl", schema, errors=sink, error_budget=1.0))
    assert rows == files and sink.bad == files and sink.records == 2 * files, (rows, sink.bad)
    sink.write_jsonl(os.path.join(root, "errors.jsonl"))
    print("ok", flush=True)
    """
)


def _limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


@pytest.mark.parametrize("format", ["parquet", "tfrecord"])
def test_a_thousand_shards_and_logs_are_written_and_read_under_a_64_file_limit(tmp_path, format):
    if format == "tfrecord":
        pytest.importorskip("tensorflow")
    _run_under_the_limit(tmp_path, _SCRIPT, tmp_path / "data", FILES[format], format)


def _run_under_the_limit(tmp_path, script_text: str, *args) -> None:
    """Runs `script_text` in a fresh Python under the descriptor limit; it must print "ok"."""
    script = tmp_path / "script.py"
    script.write_text(script_text)
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        preexec_fn=_limit_open_files,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


_DATASET_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import pyarrow as pa
    from sparse_io import FeatureSpec, Schema, shard_name, write_parquet_shard
    from sparse_io.manifest import commit_directory
    from transforms import make_dataset

    root, files = sys.argv[1], int(sys.argv[2])
    schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("items", "sparse", "int64")])
    for i in range(files):
        batch = pa.record_batch({"label": [2 * i, 2 * i + 1], "items": [[i], [i, i]]}, schema=schema.arrow_schema())
        write_parquet_shard(os.path.join(root, shard_name(i, files, ".parquet")), [batch], schema)
    schema.save(root)
    commit_directory(root)
    labels = []
    for epoch in range(2):  # the second epoch reopens shards the first one closed
        for _, label in make_dataset(root, 16, shuffle=True, seed=epoch, output="ragged"):
            labels += label.numpy().tolist()
    assert sorted(labels) == sorted(2 * list(range(2 * files))), labels[:20]
    print("ok")
    """
)


def test_make_dataset_reads_hundreds_of_parquet_shards_under_a_64_file_limit(tmp_path):
    pytest.importorskip("tensorflow")
    root = tmp_path / "shards"
    root.mkdir()
    _run_under_the_limit(tmp_path, _DATASET_SCRIPT, root, 300)
