"""Degenerate click logs still train: no dense feature, a feature with no ids anywhere, batches with no ids."""

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

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = {
    "input": {"format": "csv", "schema": [
        {"name": "label", "kind": "label", "dtype": "int64"},
        {"name": "user", "kind": "sparse", "dtype": "string"},
        {"name": "ad", "kind": "sparse", "dtype": "string"},
        {"name": "never", "kind": "sparse", "dtype": "string"},
    ]},
    "features": {"user": {"hash_buckets": 100}, "ad": {"vocabulary": {"num_oov_buckets": 1}},
                 "never": {"hash_buckets": 50}},
    "output": {"format": "parquet", "num_shards": 1, "shuffle": False},
    "stats": {"batch_sizes": [16]},
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("degenerate")
    rng = np.random.default_rng(5)
    lines = ["label,user,ad,never"]
    for i in range(160):
        # The first 16 rows (the first held-out batch) have no ad; `never` is empty everywhere.
        ad = f"a{rng.integers(30)}" if i >= 16 and i % 3 else ""
        lines.append(f"{rng.integers(2)},u{rng.integers(20)},{ad},")
    (root / "clicks.csv").write_text("\n".join(lines) + "\n")
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    run_ingest(["--input", str(root / "clicks.csv"), "--config", str(root / "config.yaml"),
                "--output", str(root / "out"), "--no_report"])
    return root


def test_a_log_without_dense_features_and_an_empty_feature_trains_evaluates_and_serves(ingested, tmp_path):
    stats = json.loads((ingested / "out" / "stats.json").read_text())
    assert stats["features"]["never"]["capacity"]["16"]["max"] == 0  # the case that used to kill the process
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.train", "--data", str(ingested / "out"),
         "--eval_data", str(ingested / "out"), "--model_dir", str(tmp_path / "m"), "--batch_size", "16",
         "--steps", "4", "--embedding_dim", "4", "--hidden_units", "16", "--block_size", "16", "--quiet"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout[done.stdout.index("{"):])
    assert result["steps"] == 4 and np.isfinite(result["loss"])
    assert result["eval_rows"] == 160 and np.isfinite(result["eval_loss"])
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    scores = served(user=tf.constant(["u1", "", "u1"]), ad=tf.constant(["", "", "a3"]),
                    never=tf.constant(["", "", ""]))["probability"].numpy()
    assert scores.shape == (3,) and np.isfinite(scores).all() and ((scores > 0) & (scores < 1)).all()
    # Rows with no ids at all still differ from rows with ids, so the ids reach the model.
    assert scores[1] != scores[2]


def test_a_model_without_dense_features_names_the_row_count_it_needs():
    from pipelines.model import BATCH_ROWS, CtrModel

    model = CtrModel({"user": 10}, [], embedding_dim=4, hidden_units=(16,), block_size=16)
    model.build()
    coo = (tf.constant([0, 2], tf.int32), tf.constant([3, 4], tf.int64), tf.constant([1.0, 1.0]))
    assert model({"user": coo, BATCH_ROWS: tf.constant(3)}).shape == (3,)
    with pytest.raises(ValueError, match=BATCH_ROWS):
        model({"user": coo})
