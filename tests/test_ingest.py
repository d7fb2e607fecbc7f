"""The ingest command end to end on the local runner, its errors, and its Dataflow readiness."""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.errors import UsageError
from pipelines.ingest import run_ingest
from pipelines.synthetic import synthetic_criteo_lines

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_CONFIG = os.path.join(REPO, "pipelines", "configs", "demo.yaml")


@pytest.fixture(scope="module")
def small_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("logs") / "day.tsv"
    lines = synthetic_criteo_lines(600, seed=5)
    lines[7] = lines[7] + "\textra\tfields\there"  # too many fields: a dead letter
    path.write_text("\n".join(lines) + "\n")
    return str(path), lines


@pytest.fixture(scope="module")
def ingested(small_log, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ingest") / "out")
    summary = run_ingest(["--input", small_log[0], "--config", DEMO_CONFIG, "--output", out])
    return out, summary


def _shard_rows(out):
    return sum(pq.ParquetFile(os.path.join(out, f)).metadata.num_rows for f in os.listdir(out) if f.startswith("part-"))


def test_ingest_writes_the_documented_layout(ingested):
    out, summary = ingested
    names = set(os.listdir(out))
    assert {"schema.json", "stats.json", "report.html", "errors"} <= names
    assert sorted(n for n in names if n.startswith("part-")) == [
        "part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]
    assert summary["rows_in"] == 600 and summary["bad_records"] == 1 and summary["rows_out"] == 599
    assert _shard_rows(out) == 599
    letters = [json.loads(line) for line in open(os.path.join(out, "errors", "dead_letters.jsonl"))]
    assert len(letters) == 1 and letters[0]["line"] == 8
    html = open(os.path.join(out, "report.html")).read()
    # Inline charts: the label balance, top ids of each of the 26 sparse features, a histogram per dense one.
    assert html.count("<svg class='chart'") == 1 + 26 + 13
    assert all(f"<section id='{s}'>" in html for s in ("run", "label", "sparse", "dense", "dead-letters"))
    with open(os.path.join(out, "_MANIFEST.json")) as f:  # the report is part of the committed output
        assert "report.html" in [e["path"] for e in json.load(f)["files"]]


def test_ingest_hashes_like_keras(ingested, small_log):
    import keras
    import numpy as np

    out, _ = ingested
    table = pq.read_table(os.path.join(out, "part-00000-of-00002.parquet"))
    # Shards are shuffled, so compare as multisets against Keras hashing of the raw C1 column.
    raw = [line.split("\t") for i, line in enumerate(small_log[1]) if i != 7]
    c1 = [fields[14] for fields in raw if len(fields) > 14 and fields[14]]
    keras_ids = np.asarray(keras.layers.Hashing(num_bins=20000)(np.array(c1, dtype=object)))
    written = np.concatenate([
        pq.read_table(os.path.join(out, f)).column("C1").combine_chunks().flatten().to_numpy()
        for f in sorted(os.listdir(out)) if f.startswith("part-")
    ])
    assert table.schema.field("C1").type.value_type == "int64"
    assert sorted(written.tolist()) == sorted(keras_ids.ravel().tolist())


def test_existing_output_is_kept_without_overwrite(ingested, small_log):
    out, _ = ingested
    before = sorted(os.listdir(out))
    with pytest.raises(UsageError, match="not empty"):
        run_ingest(["--input", small_log[0], "--config", DEMO_CONFIG, "--output", out])
    assert sorted(os.listdir(out)) == before


def _cli(*args, cwd=REPO):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "pipelines.ingest", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input", "/nonexistent/*.tsv", "--output", "{tmp}/o"], "matches no files"),
        (["--input", "{log}", "--output", "{tmp}/o", "--config", "{tmp}/bad.yaml"], "'output.num_shards'"),
        (["--input", "{log}", "--output", "{tmp}/o", "--frobnicate=1"], "unrecognized argument: --frobnicate"),
        (["--input", "{log}", "--output", "{tmp}/file"], "not a directory"),
        (["--input", "{log}", "--output", "{tmp}/o", "--config", "{tmp}/budget.yaml"], "error budget"),
        (["--output", "{tmp}/o"], "--input is required"),
    ],
)
def test_bad_arguments_exit_non_zero_with_one_clear_line(args, message, small_log, tmp_path):
    (tmp_path / "bad.yaml").write_text("output:\n  num_shards: -3\n")
    (tmp_path / "budget.yaml").write_text("features: {'C*': {hash_buckets: 10}}\nerror_budget: 0.0\n")
    (tmp_path / "file").write_text("x")
    args = [a.format(tmp=tmp_path, log=small_log[0]) for a in args]
    done = _cli(*args)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert message in last, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_inside_ipython_without_interactive_beam_is_a_clear_usage_error(small_log, tmp_path, monkeypatch):
    import apache_beam.utils.interactive_utils as interactive_utils

    monkeypatch.setattr(interactive_utils, "is_in_ipython", lambda: True)
    # As where pandas (Beam's "interactive" extra) is not installed: the import fails.
    monkeypatch.setitem(sys.modules, "apache_beam.runners.interactive.interactive_environment", None)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=r"IPython/Jupyter.*apache-beam\[interactive\].*python -m pipelines.ingest"):
        run_ingest(["--input", small_log[0], "--config", DEMO_CONFIG, "--output", str(out)])
    assert not out.exists()  # refused before anything was written


def test_no_prism_download_is_attempted(small_log, tmp_path):
    done = _cli("--input", small_log[0], "--config", DEMO_CONFIG, "--output", str(tmp_path / "o"), "--no_report")
    assert done.returncode == 0, done.stderr[-2000:]
    said = (done.stdout + done.stderr).replace(str(tmp_path), "<tmp>").lower()  # the test's own name has "prism"
    assert "prism" not in said and "download" not in said
    assert "rows out     599" in done.stdout


def test_multi_processing_run_matches_in_process(ingested, small_log, tmp_path):
    out, _ = ingested
    done = _cli("--input", small_log[0], "--config", DEMO_CONFIG, "--output", str(tmp_path / "mp"), "--no_report",
                "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _shard_rows(str(tmp_path / "mp")) == _shard_rows(out)
    # Same seed, same shuffle: the shards hold the same rows in the same order.
    for name in ("part-00000-of-00002.parquet", "part-00001-of-00002.parquet"):
        assert pq.read_table(tmp_path / "mp" / name).equals(pq.read_table(os.path.join(out, name)))


def test_dataflow_graph_serialises_without_network():
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.config import load_config
    from pipelines.ingest import build_ingest

    options = PipelineOptions([
        "--runner=DataflowRunner", "--project=example-project", "--region=us-central1",
        "--temp_location=gs://example-bucket/tmp", "--staging_location=gs://example-bucket/staging",
        "--setup_file=./pyproject.toml", "--num_workers=4", "--max_num_workers=16",
        # Skips Beam's check of the buckets' soft-delete policy, which needs GCS.
        "--dry_run=True",
    ])
    pipeline = beam.Pipeline(options=options)
    config = load_config(os.path.join(REPO, "pipelines", "configs", "criteo.yaml"))
    build_ingest(pipeline, config, "gs://example-bucket/logs/day_*.tsv.gz", "gs://example-bucket/out")
    proto = pipeline.to_runner_api()
    names = {t.unique_name for t in proto.components.transforms.values()}
    for step in ("ReadLogs", "HashIds", "ComputeVocabulary0", "ApplyVocabulary0", "WriteShards"):
        assert step in names
    # Dataflow materializes the batches waiting for the vocabularies itself; only local runners hold them on disk.
    assert "HoldBatches" not in names and "ReleaseBatches" not in names
    # Every DoFn was pickled into the proto; round-tripping proves they unpickle too.
    restored = beam.Pipeline.from_runner_api(proto, pipeline.runner, options)
    assert {t.unique_name for t in restored.to_runner_api().components.transforms.values()} == names


def test_output_write_threads_and_compression_reach_write_shards(monkeypatch):
    import apache_beam as beam

    from pipelines.config import parse_config
    from pipelines.ingest import build_ingest
    from transforms.beam import WriteShards

    seen = []
    original = WriteShards.__init__

    def spy(self, *args, **kwargs):
        seen.append((kwargs.get("write_threads", "not passed"), kwargs.get("compression", "not passed")))
        original(self, *args, **kwargs)

    monkeypatch.setattr(WriteShards, "__init__", spy)
    with open(DEMO_CONFIG) as f:
        demo = yaml.safe_load(f)
    for threads, codec in ((None, None), (3, "lz4")):
        data = {**demo, "output": {**demo.get("output", {}), "write_threads": threads, "compression": codec}}
        build_ingest(beam.Pipeline(), parse_config(data), "logs/day_*.tsv", "out")
    assert seen == [(None, None), (3, "lz4")]
