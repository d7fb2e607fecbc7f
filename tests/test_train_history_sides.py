"""The history trainer feeds a history ingest's side columns to the model, and serving takes them raw."""

import json
import random

import numpy as np
import pytest
import tensorflow as tf

from pipelines.ingest import run_ingest
from pipelines.tasks import resolve_task
from pipelines.train import train
from sparse_io.schema import FeatureSpec, Schema

SMALL = ["--batch_size", "128", "--embedding_dim", "8", "--hidden_units", "32", "--block_size", "16", "--quiet"]
DEVICES = ["phone", "tablet", "tv", "car", "watch"]
CONFIG = {
    "input": {"format": "jsonl", "schema": [
        {"name": "user", "kind": "dense", "dtype": "string"},
        {"name": "item", "kind": "dense", "dtype": "int64"},
        {"name": "ts", "kind": "dense", "dtype": "int64"},
        {"name": "rating", "kind": "dense", "dtype": "float32"},
        {"name": "shelf", "kind": "dense", "dtype": "string"},       # the item's shelf: an item column
        {"name": "device", "kind": "sparse", "dtype": "string"},     # the event's context
        {"name": "age", "kind": "dense", "dtype": "float32"},        # the user's, a number
    ]},
    "histories": {"key": "user", "item": "item", "time": "ts", "weight": "rating", "max_length": 20,
                  "examples_per_event": True, "item_columns": ["shelf"]},
    "features": {"item": {"hash_buckets": 500}, "shelf": {"hash_buckets": 20}, "device": {"hash_buckets": 50}},
    "output": {"num_shards": 1, "shuffle": True, "seed": 0},
    "stats": {"batch_sizes": [128]},
}


def _events(seed, n):
    """The rating is decided by the event's device alone: histories cannot tell it, the side column can."""
    rng = random.Random(seed)
    events = []
    for i in range(n):
        device = rng.randrange(len(DEVICES))
        item = rng.randrange(100)
        events.append({"user": f"u{rng.randrange(60)}", "item": item, "ts": i, "rating": float(1 + device),
                       "shelf": f"s{item % 7}", "device": [DEVICES[device]],
                       "age": None if i % 11 == 0 else float(rng.randrange(18, 70))})
    return events


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sides")
    (root / "config.json").write_text(json.dumps(CONFIG))
    for name, seed, n in (("train", 1, 4000), ("heldout", 2, 600)):
        events = _events(seed, n)
        (root / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        run_ingest(["--input", str(root / f"{name}.jsonl"), "--config", str(root / "config.json"),
                    "--output", str(root / name), "--no_report", "--progress_seconds", "0"])
    return root


def test_the_task_takes_every_side_column_and_leaves_key_and_time_out():
    schema = Schema([
        FeatureSpec("user", "dense", "string", history_role="key"),
        FeatureSpec("item", "sparse", "int64", hash_buckets=9, weighted=True, history_role="item"),
        FeatureSpec("shelf", "sparse", "int64", hash_buckets=4, history_role="item_column"),
        FeatureSpec("ts", "dense", "int64", time_unit="s", history_role="time"),
        FeatureSpec("target_item", "dense", "int64", hash_buckets=9, history_role="target"),
        FeatureSpec("target_rating", "dense", "float32", history_role="target"),
        FeatureSpec("target_shelf", "dense", "int64", hash_buckets=4, history_role="target"),
        FeatureSpec("device", "sparse", "int64", hash_buckets=5, history_role="event"),
        FeatureSpec("age", "dense", "float32", history_role="event"),
        FeatureSpec("seen_at", "dense", "int64", time_unit="ms", history_role="event"),
    ])
    rating = resolve_task(schema)
    assert (rating.name, rating.label) == ("rating", "target_rating")
    assert set(rating.features) == {"item", "target_item", "shelf", "target_shelf", "device", "age"}
    next_item = resolve_task(schema, "next_item")
    assert next_item.label == "target_item"
    assert set(next_item.features) == {"item", "shelf", "target_shelf", "device", "age"}


@pytest.mark.slow
def test_a_side_column_that_decides_the_rating_is_learned(data, tmp_path):
    result = train(["--data", str(data / "train"), "--eval_data", str(data / "heldout"),
                    "--model_dir", str(tmp_path / "m"), "--steps", "200", "--learning_rate", "0.01",
                    "--export", "none", *SMALL])
    # The training mean's RMSE is about sqrt(2) (five equally likely ratings); histories alone cannot beat it.
    assert result["eval_rmse"] < 0.5 * result["eval_baseline_rmse"], result


def _raw_inputs(events):
    """Per event with an earlier event of its user: the serving signature's raw inputs, built from the events."""
    by_user = {}
    for e in events:
        by_user.setdefault(e["user"], []).append(e)
    raw = {k: [] for k in ("item", "item__weights", "shelf", "target_item", "target_shelf", "device", "age")}
    for user_events in by_user.values():
        user_events.sort(key=lambda e: (e["ts"], e["item"]))
        for j in range(1, len(user_events)):
            before, e = user_events[max(0, j - 20):j], user_events[j]
            raw["item"].append("|".join(str(b["item"]) for b in before))
            raw["item__weights"].append("|".join(repr(b["rating"]) for b in before))
            raw["shelf"].append("|".join(b["shelf"] for b in before))
            raw["target_item"].append(str(e["item"]))
            raw["target_shelf"].append(e["shelf"])
            raw["device"].append("|".join(e["device"]))
            raw["age"].append(np.nan if e["age"] is None else e["age"])
    return raw


@pytest.mark.slow
def test_the_export_scores_raw_side_columns_as_the_model_scores_the_shards(data, tmp_path):
    from pipelines.history_model import HistoryModel
    from transforms.tfdata.dataset import make_dataset

    model_dir = tmp_path / "m"
    result = train(["--data", str(data / "train"), "--model_dir", str(model_dir), "--steps", "30", *SMALL])
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    raw = _raw_inputs(_events(2, 600))
    inputs = {k: tf.constant(v, tf.float32 if k == "age" else tf.string) for k, v in raw.items()}
    from_raw = served(**inputs)["rating"].numpy()

    model = HistoryModel("item", 500, "rating", embedding_dim=8, hidden_units=(32,), block_size=16, density=0.25,
                         side_sparse={"device": 50, "shelf": 20}, side_dense=["age"], target_sides={"target_shelf": 20})
    model.build()
    tf.train.Checkpoint(model=model).restore(tf.train.latest_checkpoint(str(model_dir / "checkpoints")))
    dataset = make_dataset(str(data / "heldout"), 128, shuffle=False, output="coo", combiner="mean",
                           features=["item", "target_item", "shelf", "target_shelf", "device", "age"],
                           label="target_rating")
    from_shards = np.concatenate([model(f).numpy() for f, _ in dataset])
    assert from_raw.shape == from_shards.shape and len(from_raw) > 500
    assert np.std(from_raw) > 1e-3
    np.testing.assert_allclose(np.sort(from_raw), np.sort(from_shards), rtol=1e-4, atol=1e-4)
