"""The task follows the label: clicks train ctr, ratings and counts train regression, a misfit is refused.

Every held-out metric is printed and recorded beside its baseline; the baselines here are computed from the
log's text with plain Python, not by the trainer.
"""

import csv
import json
import math
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import yaml
from conftest import SHARED_DATA

from pipelines import train as train_cli
from pipelines.ingest import run_ingest
from pipelines.synthetic import write_synthetic_criteo
from pipelines.train import train

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[1]
DEMO_CONFIG = str(REPO / "pipelines" / "configs" / "demo.yaml")
# Every block kept: with 2 of 4 blocks dropped, a 32-unit layer can miss the movie embedding altogether.
SMALL = ["--batch_size", "64", "--embedding_dim", "8", "--hidden_units", "32", "--block_size", "16", "--density", "1",
         "--quiet"]

RATINGS_CONFIG = {
    "input": {"format": "csv", "schema": [
        {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer"},
        {"name": "user", "kind": "sparse", "dtype": "string"},
        {"name": "movie", "kind": "sparse", "dtype": "string"},
        {"name": "age", "kind": "dense", "dtype": "float32"},
    ]},
    "features": {"user": {"hash_buckets": 200}, "movie": {"hash_buckets": 200}},
    "output": {"format": "parquet", "num_shards": 1, "shuffle": False},
    "stats": {"batch_sizes": [64]},
}


def _write_ratings(path, rows, seed):
    """A ratings log whose rating is the movie's quality plus noise, rounded into 1..5."""
    rng = np.random.default_rng(seed)
    quality = np.random.default_rng(99).uniform(1, 5, size=30)  # shared by every day of this world
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["rating", "user", "movie", "age"])
        for _ in range(rows):
            movie = int(rng.integers(30))
            rating = int(np.clip(round(quality[movie] + rng.normal(0, 0.4)), 1, 5))
            w.writerow([rating, f"u{rng.integers(100)}", f"m{movie}", round(float(rng.uniform(18, 70)), 1)])
    return str(path)


def _labels(path, column):
    with open(path, newline="", encoding="utf-8") as f:
        return [float(r[column]) for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def ratings(tmp_path_factory):
    root = tmp_path_factory.mktemp("ratings")
    (root / "config.yaml").write_text(yaml.safe_dump(RATINGS_CONFIG))
    for name, rows, seed in (("train", 1500, 1), ("heldout", 500, 2)):
        log = _write_ratings(root / f"{name}.csv", rows, seed)
        run_ingest(["--input", log, "--config", str(root / "config.yaml"), "--output", str(root / name),
                    "--no_report"])
    return root


def _exit_line(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        train_cli.main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return exit_info.value.code, err.strip().splitlines()[-1]


def test_an_integer_label_trains_regression_beside_the_mean_of_the_training_ratings(ratings, tmp_path, caplog):
    caplog.set_level("INFO", logger="sparseflow")
    result = train(["--data", str(ratings / "train"), "--eval_data", str(ratings / "heldout"),
                    "--model_dir", str(tmp_path / "m"), "--steps", "150", "--learning_rate", "0.01",
                    "--export", "none", *SMALL])
    train_mean = np.mean(_labels(ratings / "train.csv", "rating"))
    held = np.array(_labels(ratings / "heldout.csv", "rating"))
    assert result["task"] == "regression" and result["eval_rows"] == 500
    assert result["label_mean"] == pytest.approx(train_mean)
    assert result["eval_baseline_rmse"] == pytest.approx(math.sqrt(np.mean((held - train_mean) ** 2)), rel=1e-5)
    assert result["eval_baseline_mae"] == pytest.approx(np.mean(np.abs(held - train_mean)), rel=1e-5)
    # The rating is the movie's quality plus noise of 0.4: the model learns it, the mean cannot.
    assert result["eval_rmse"] < 0.8 * result["eval_baseline_rmse"], result
    assert result["eval_mae"] < result["eval_baseline_mae"], result
    recorded = json.loads((tmp_path / "m" / "train_result.json").read_text())["runs"][-1]
    assert recorded["eval_baseline_rmse"] == pytest.approx(result["eval_baseline_rmse"])
    assert "RMSE" in caplog.text and "the mean" in caplog.text


def test_ctr_on_a_rating_is_refused_naming_the_label_values(ratings, tmp_path, capsys):
    code, line = _exit_line(capsys, ["--data", str(ratings / "train"), "--model_dir", str(tmp_path / "m"),
                                     "--task", "ctr", *SMALL])
    assert code == 2
    assert line.startswith("pipelines.train: error: --task ctr") and "'rating'" in line and "1, 2, 3, 4, 5" in line
    assert "--task regression" in line
    assert not (tmp_path / "m").exists()


def test_history_tasks_on_a_flat_log_are_refused_with_exit_2(ratings, tmp_path, capsys):
    code, line = _exit_line(capsys, ["--data", str(ratings / "train"), "--model_dir", str(tmp_path / "m"),
                                     "--task", "next_item", *SMALL])
    assert code == 2 and "--task next_item" in line and "history" in line


@pytest.fixture(scope="module")
def clicks(tmp_path_factory):
    root = tmp_path_factory.mktemp("clicks")
    for name, rows, seed in (("train", 600, 1000), ("heldout", 300, 1001)):
        log = write_synthetic_criteo(str(root / f"{name}.tsv"), rows, seed)
        run_ingest(["--input", log, "--config", DEMO_CONFIG, "--output", str(root / name), "--no_report"])
    return root


def _criteo_labels(path):
    return [int(line.split("\t")[0]) for line in open(path, encoding="utf-8").read().splitlines()]


def test_regression_on_a_click_label_is_refused(clicks, tmp_path, capsys):
    code, line = _exit_line(capsys, ["--data", str(clicks / "train"), "--model_dir", str(tmp_path / "m"),
                                     "--task", "regression", *SMALL])
    assert code == 2 and "--task regression" in line and "0, 1" in line and "--task ctr" in line


def test_ctr_prints_and_records_the_base_rate_baseline(clicks, tmp_path, caplog):
    caplog.set_level("INFO", logger="sparseflow")
    result = train(["--data", str(clicks / "train"), "--eval_data", str(clicks / "heldout"),
                    "--model_dir", str(tmp_path / "m"), "--steps", "5", "--export", "none", *SMALL])
    train_labels, held = _criteo_labels(clicks / "train.tsv"), _criteo_labels(clicks / "heldout.tsv")
    rate = sum(train_labels) / len(train_labels)
    loss = -sum(math.log(rate) if y else math.log(1 - rate) for y in held) / len(held)
    assert result["task"] == "ctr" and result["base_rate"] == pytest.approx(rate)
    assert result["eval_baseline_loss"] == pytest.approx(loss, rel=1e-6) and result["eval_baseline_auc"] == 0.5
    assert f"{loss:.4f}" in caplog.text and "base rate" in caplog.text


def test_a_regression_model_exports_a_serving_signature_that_predicts_as_trained(ratings, tmp_path):
    from pipelines.model import CtrModel
    from sparse_io.schema import Schema
    from transforms.tfdata.dataset import make_dataset

    result = train(["--data", str(ratings / "train"), "--model_dir", str(tmp_path / "m"), "--steps", "30",
                    *SMALL])
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    with open(ratings / "heldout.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    from_raw = served(user=tf.constant([r["user"] for r in rows]), movie=tf.constant([r["movie"] for r in rows]),
                      age=tf.constant([float(r["age"]) for r in rows]))["prediction"].numpy()
    schema = Schema.load(str(ratings / "train"))
    model = CtrModel({s.name: s.hash_buckets for s in schema.sparse}, ["age"], embedding_dim=8, hidden_units=(32,),
                     block_size=16, density=1.0, output_shift=result["label_mean"], output_scale=result["label_scale"])
    model.build()
    tf.train.Checkpoint(model=model).restore(tf.train.latest_checkpoint(str(tmp_path / "m" / "checkpoints")))
    dataset = make_dataset(str(ratings / "heldout"), 64, shuffle=False, output="coo", combiner="mean")
    from_shards = np.concatenate([model(f).numpy() for f, _ in dataset])
    assert from_raw.shape == from_shards.shape == (500,)
    assert np.std(from_raw) > 1e-2 and 1 <= np.mean(from_raw) <= 5
    # Row order is not a promise of the ingest: the multisets of predictions must match.
    np.testing.assert_allclose(np.sort(from_raw), np.sort(from_shards), rtol=1e-4, atol=1e-4)


MOVIELENS = SHARED_DATA / "movielens1m_deepctr_sample.csv"
MOVIELENS_CONFIG = {
    "input": {"format": "csv", "schema": [
        {"name": "user_id", "kind": "sparse", "dtype": "int64"},
        {"name": "movie_id", "kind": "sparse", "dtype": "int64"},
        {"name": "rating", "kind": "label", "dtype": "int64", "label_type": "integer"},
        {"name": "genres", "kind": "sparse", "dtype": "string"},
        {"name": "gender", "kind": "sparse", "dtype": "string"},
        {"name": "age", "kind": "sparse", "dtype": "int64"},
        {"name": "occupation", "kind": "sparse", "dtype": "int64"},
    ], "list_separator": "|"},
    "features": {name: {"hash_buckets": 1000} for name in ("user_id", "movie_id", "genres", "gender", "age",
                                                          "occupation")},
    "output": {"format": "parquet", "num_shards": 1, "shuffle": False},
    "stats": {"batch_sizes": [16]},
}


def test_on_the_real_movielens_sample_split_by_rows_regression_beats_the_mean(tmp_path):
    if not MOVIELENS.exists():
        pytest.skip(f"real sample {MOVIELENS.name} not present at {SHARED_DATA}")
    with open(MOVIELENS, newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    # Split by rows: every fifth row held out.
    parts = {"train": [r for i, r in enumerate(rows) if i % 5], "heldout": [r for i, r in enumerate(rows) if not i % 5]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(MOVIELENS_CONFIG))
    for name, part in parts.items():
        with open(tmp_path / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([header, *part])
        run_ingest(["--input", str(tmp_path / f"{name}.csv"), "--config", str(tmp_path / "config.yaml"),
                    "--output", str(tmp_path / name), "--no_report"])
    result = train(["--data", str(tmp_path / "train"), "--eval_data", str(tmp_path / "heldout"),
                    "--model_dir", str(tmp_path / "m"), "--steps", "60", "--batch_size", "16",
                    "--embedding_dim", "8", "--hidden_units", "16", "--block_size", "16", "--density", "1",
                    "--export", "none", "--quiet"])
    rating = header.index("rating")
    train_mean = np.mean([int(r[rating]) for r in parts["train"]])
    held = np.array([int(r[rating]) for r in parts["heldout"]])
    assert result["task"] == "regression" and result["eval_rows"] == len(held) == 40
    assert result["eval_baseline_rmse"] == pytest.approx(math.sqrt(np.mean((held - train_mean) ** 2)), rel=1e-5)
    assert result["eval_rmse"] < result["eval_baseline_rmse"], result


def test_the_help_names_every_task():
    text = train_cli._parser().format_help()
    for task in ("ctr", "regression", "rating", "next_item"):
        assert task in text
    assert os.path.basename(train_cli.__file__) == "train.py"
