"""`output.format: arrow` end to end: the ingest writes committed Arrow shards that read and train like Parquet."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import yaml

from pipelines.ingest import run_ingest
from pipelines.verify import verify_output
from sparse_io import iter_shards
from sparse_io.arrow_shards import ArrowShard
from transforms import make_dataset

REPO = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = [
    {"name": "label", "kind": "label", "dtype": "int64"},
    {"name": "price", "kind": "dense", "dtype": "float32"},
    {"name": "user", "kind": "sparse", "dtype": "string"},
    {"name": "tags", "kind": "sparse", "dtype": "string"},
]

pytestmark = pytest.mark.slow


def _config(shard_format: str) -> dict:
    return {
        "input": {"format": "csv", "schema": SCHEMA, "list_separator": "|"},
        "features": {"user": {"hash_buckets": 1000}, "tags": {"vocabulary": {"num_oov_buckets": 1}}},
        "output": {"format": shard_format, "num_shards": 3, "row_group_size": 50, "seed": 4},
        "stats": {"batch_sizes": [32]},
    }


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("arrow_ingest")
    rng = np.random.default_rng(9)
    lines = ["label,price,user,tags"]
    for _ in range(400):
        tags = "|".join(f"t{t}" for t in rng.integers(0, 40, rng.integers(0, 4)))
        lines.append(f"{rng.integers(2)},{rng.random() * 10:.3f},u{rng.integers(60)},{tags}")
    (root / "clicks.csv").write_text("\n".join(lines) + "\n")
    out = {}
    for fmt in ("parquet", "arrow"):
        (root / f"{fmt}.yaml").write_text(yaml.safe_dump(_config(fmt)))
        args = ["--input", str(root / "clicks.csv"), "--config", str(root / f"{fmt}.yaml"), "--output",
                str(root / fmt)]
        run_ingest(args if fmt == "arrow" else [*args, "--no_report"])
        out[fmt] = str(root / fmt)
    return out


def test_the_ingest_writes_committed_arrow_shards_in_record_batches_of_the_row_group_size(outputs):
    names = sorted(n for n in os.listdir(outputs["arrow"]) if n.startswith("part-"))
    assert names == [f"part-0000{i}-of-00003.arrow" for i in range(3)]
    manifest, problems = verify_output(outputs["arrow"], "checksums")
    assert problems == [] and sum(e["rows"] for e in manifest["shards"]) == 400
    for name in names:
        with ArrowShard(os.path.join(outputs["arrow"], name)) as shard:
            assert shard.unit_rows and max(shard.unit_rows) <= 50
    assert os.path.exists(os.path.join(outputs["arrow"], "report.html"))


def test_the_ingests_arrow_buffers_lie_at_multiples_of_64_bytes(outputs):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    seen = 0
    for name in sorted(n for n in os.listdir(outputs["arrow"]) if n.startswith("part-")):
        with pa.memory_map(os.path.join(outputs["arrow"], name)) as source:
            reader = ipc.open_file(source)
            for i in range(reader.num_record_batches):
                for column in reader.get_batch(i).columns:
                    arrays = [column, *([column.values] if pa.types.is_list(column.type) else [])]
                    for buffer in (b for a in arrays for b in a.buffers() if b is not None and b.size):
                        assert buffer.address % 64 == 0, (name, i)  # a map starts on a page
                        seen += 1
    assert seen > 20


def test_arrow_and_parquet_outputs_hold_the_same_rows_and_read_the_same_batches(outputs):
    rows = {fmt: [r for t in iter_shards(d) for r in t.to_pylist()] for fmt, d in outputs.items()}
    assert rows["arrow"] == rows["parquet"]
    for fmt in ("schema.json", "stats.json"):
        a = json.loads(open(os.path.join(outputs["arrow"], fmt)).read())
        p = json.loads(open(os.path.join(outputs["parquet"], fmt)).read())
        assert a == p
    args = dict(batch_size=32, seed=2, capacities="stats", drop_remainder=True)
    for x, y in zip(make_dataset(outputs["parquet"], **args), make_dataset(outputs["arrow"], **args), strict=True):
        for a, b in zip(tf.nest.flatten(x), tf.nest.flatten(y), strict=True):
            np.testing.assert_array_equal(a, b)


def test_training_reads_arrow_output(outputs, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.train", "--data", outputs["arrow"], "--model_dir", str(tmp_path / "m"),
         "--batch_size", "32", "--steps", "3", "--embedding_dim", "4", "--hidden_units", "16",
         "--block_size", "16", "--export", "none", "--quiet"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout[done.stdout.index("{"):])
    assert result["steps"] == 3 and np.isfinite(result["loss"])
