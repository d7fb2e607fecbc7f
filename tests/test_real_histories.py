"""Real logs as user histories with side columns, from the ingest through `pipelines.train`.

The files are described in ../shared/data/README.md; every test skips when they are absent. Expected
counts come from Python's csv module, independently of the readers.
"""

import collections
import csv
import datetime
import json
import math

import pytest
from conftest import SHARED_DATA

from pipelines.ingest import run_ingest
from pipelines.train import main as train_main
from sparse_io.schema import Schema

MOVIELENS = SHARED_DATA / "movielens1m_deepctr_sample.csv"
YOOCHOOSE = SHARED_DATA / "yoochoose-clicks-sample.dat"
pytestmark = pytest.mark.slow  # each trains a model

SMALL = ["--embedding_dim", "8", "--hidden_units", "32", "--block_size", "16", "--quiet"]


def _need(path):
    if not path.exists():
        pytest.skip(f"real sample {path.name} not present at {SHARED_DATA}")
    return path


def _ingest(tmp_path, name, config, log, *args):
    (tmp_path / f"{name}.json").write_text(json.dumps(config))
    run_ingest(["--input", str(log), "--config", str(tmp_path / f"{name}.json"), "--output", str(tmp_path / name),
                "--no_report", "--progress_seconds", "0", *args])
    return tmp_path / name


def _train(capsys, *argv):
    """`python -m pipelines.train` in this process: returns what it printed (SystemExit fails the test)."""
    capsys.readouterr()
    train_main([*argv, *SMALL])
    return json.loads(capsys.readouterr().out)


def _millis(text):
    return round(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def test_movielens_ratings_with_user_and_movie_columns_train_and_export(tmp_path, capsys):
    path = _need(MOVIELENS)
    config = {
        "input": {"format": "csv", "schema": [
            {"name": "user_id", "kind": "dense", "dtype": "int64"},
            {"name": "movie_id", "kind": "dense", "dtype": "int64"},
            {"name": "rating", "kind": "dense", "dtype": "int64"},
            {"name": "timestamp", "kind": "dense", "dtype": "timestamp", "unit": "s"},
            {"name": "title", "kind": "sparse", "dtype": "string"},
            {"name": "genres", "kind": "sparse", "dtype": "string"},
            {"name": "gender", "kind": "sparse", "dtype": "string"},
            {"name": "age", "kind": "dense", "dtype": "int64"},
            {"name": "occupation", "kind": "sparse", "dtype": "int64"},
            {"name": "zip", "kind": "sparse", "dtype": "string"},
        ]},
        "histories": {"key": "user_id", "item": "movie_id", "time": "timestamp", "weight": "rating",
                      "examples_per_event": True},
        "features": {"movie_id": {"vocabulary": {}}, "title": {"hash_buckets": 1000},
                     "genres": {"vocabulary": {}}, "gender": {"hash_buckets": 10},
                     "occupation": {"hash_buckets": 50}, "zip": {"hash_buckets": 1000}},
        "output": {"num_shards": 1},
        "stats": {"batch_sizes": [4]},
    }
    out = _ingest(tmp_path, "ml", config, path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    times = collections.defaultdict(list)
    for r in rows:
        times[r["user_id"]].append(int(r["timestamp"]))
    examples = sum(1 for ts in times.values() for t in ts if any(s < t for s in ts))
    assert examples == 7  # 7 of the 193 users rated twice
    schema = Schema.load(str(out))
    # Every movie of the log is in the vocabulary, history entry or not.
    assert schema["movie_id"].vocabulary_size == 1 + len({r["movie_id"] for r in rows})
    assert schema["target_movie_id"].id_space == schema["movie_id"].id_space
    assert {f.name for f in schema if f.history_role == "event"} == {
        "title", "genres", "gender", "age", "occupation", "zip"}

    result = _train(capsys, "--data", str(out), "--eval_data", str(out), "--model_dir", str(tmp_path / "m"),
                    "--task", "rating", "--batch_size", "4", "--steps", "6")
    assert result["steps"] == 6 and math.isfinite(result["loss"]) and result["eval_rows"] == examples
    assert math.isfinite(result["eval_rmse"]) and result["export"]


def test_yoochoose_next_item_with_context_and_a_vocabulary_trains_and_evaluates(tmp_path, capsys):
    path = _need(YOOCHOOSE)
    with open(path, newline="", encoding="utf-8") as f:
        clicks = list(csv.reader(f))
    last = {}
    for i, (session, stamp, item, _) in enumerate(clicks):
        if session not in last or (_millis(stamp), int(item)) > last[session][0]:
            last[session] = ((_millis(stamp), int(item)), i)
    held = {i for _, i in last.values()}
    (tmp_path / "train.dat").write_text("".join(",".join(c) + "\n" for i, c in enumerate(clicks) if i not in held))
    (tmp_path / "heldout.dat").write_text("".join(",".join(c) + "\n" for i, c in enumerate(clicks) if i in held))
    config = {
        "input": {"format": "csv", "skip_header": False, "schema": [
            {"name": "session_id", "kind": "dense", "dtype": "int64"},
            {"name": "timestamp", "kind": "dense", "dtype": "timestamp", "unit": "ms"},
            {"name": "item_id", "kind": "dense", "dtype": "int64"},
            {"name": "category", "kind": "dense", "dtype": "string"},
        ]},
        "histories": {"key": "session_id", "item": "item_id", "time": "timestamp", "max_length": 50,
                      "examples_per_event": True, "item_columns": ["category"]},
        "features": {"item_id": {"vocabulary": {}}, "category": {"hash_buckets": 10}},
        "output": {"num_shards": 1},
        "stats": {"batch_sizes": [16]},
    }
    train = _ingest(tmp_path, "train", config, tmp_path / "train.dat")
    config["histories"]["context_from"] = str(tmp_path / "train.dat")
    heldout = _ingest(tmp_path, "heldout", config, tmp_path / "heldout.dat", "--vocab_from", str(train))
    train_items = {int(c[2]) for i, c in enumerate(clicks) if i not in held}
    tokens = (train / "vocab" / "item_id.txt").read_text().split()
    assert sorted(map(int, tokens)) == sorted(train_items)  # every training click's item, targets too
    schema = Schema.load(str(heldout))
    earlier = collections.defaultdict(list)
    for i, (session, stamp, _, _) in enumerate(clicks):
        if i not in held:
            earlier[session].append(_millis(stamp))
    targets = [i for i in held if any(t < _millis(clicks[i][1]) for t in earlier[clicks[i][0]])]
    assert len(targets) == 121  # 4 of the 125 sessions have a single click: no history, no example
    # History entries are training clicks, all in the vocabulary: the OOV ids are the unseen targets.
    assert schema["item_id"].oov_ids == sum(1 for i in targets if int(clicks[i][2]) not in train_items) > 0

    result = _train(capsys, "--data", str(train), "--eval_data", str(heldout), "--model_dir", str(tmp_path / "m"),
                    "--task", "next_item", "--batch_size", "16", "--steps", "10")
    assert result["steps"] == 10 and math.isfinite(result["loss"])
    assert result["eval_rows"] > 0 and math.isfinite(result["eval_loss"]) and result["export"]

    # Serving looks raw ids up in the same vocabulary: the held-out clicks' raw histories score as their shards.
    import numpy as np
    import tensorflow as tf

    from pipelines.history_model import HistoryModel
    from transforms.tfdata.dataset import make_dataset

    raw = {"item_id": [], "category": [], "target_item_id": [], "target_category": []}
    for i in targets:
        session, stamp, item, category = clicks[i]
        before = sorted((_millis(c[1]), int(c[2]), c[3]) for j, c in enumerate(clicks)
                        if j not in held and c[0] == session and _millis(c[1]) < _millis(stamp))[-50:]
        raw["item_id"].append("|".join(str(b[1]) for b in before))
        raw["category"].append("|".join(b[2] for b in before))
        raw["target_item_id"].append(item)
        raw["target_category"].append(category)
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    from_raw = served(**{k: tf.constant(v) for k, v in raw.items()})["score"].numpy()
    model = HistoryModel("item_id", schema["item_id"].vocabulary_size, "next_item", embedding_dim=8,
                         hidden_units=(32,), block_size=16, density=0.25, side_sparse={"category": 10},
                         target_sides={"target_category": 10})
    model.build()
    tf.train.Checkpoint(model=model).restore(tf.train.latest_checkpoint(str(tmp_path / "m" / "checkpoints")))
    dataset = make_dataset(str(heldout), 1, shuffle=False, output="coo", combiner="mean",
                           features=["item_id", "category", "target_category"], label="target_item_id")
    from_shards = np.array([float(model({**f, "target_item_id": label})[0, 0]) for f, label in dataset])
    assert len(from_raw) == len(from_shards) == 121 and np.std(from_raw) > 1e-4
    np.testing.assert_allclose(np.sort(from_raw), np.sort(from_shards), rtol=1e-4, atol=1e-4)
