"""Evaluation counts every held-out row once whatever the batch size, and next-item metrics rank the whole
catalogue, so no metric changes with the batch size."""

import collections
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from pipelines import train as train_cli
from pipelines.evaluation import training_baseline
from pipelines.ingest import run_ingest
from pipelines.synthetic import write_synthetic_events
from pipelines.tasks import resolve_task
from pipelines.train import evaluate, train
from sparse_io.schema import Schema

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "pipelines" / "configs" / "user_history.yaml")
SMALL = ["--embedding_dim", "8", "--hidden_units", "16", "--block_size", "16", "--quiet"]


@pytest.fixture(scope="module")
def histories(tmp_path_factory):
    root = tmp_path_factory.mktemp("histories")
    for name, events, seed in (("train", 3000, 2000), ("heldout", 700, 2001)):
        log = write_synthetic_events(str(root / f"{name}.jsonl"), events, seed)
        run_ingest(["--input", log, "--format", "jsonl", "--config", CONFIG, "--output", str(root / name),
                    "--no_report"])
    return root


def _targets(path):
    """The target item of every example: each event of a user after the user's first (min_length 1)."""
    events = [json.loads(line) for line in open(path, encoding="utf-8")]
    seen, targets = set(), []
    for e in sorted(events, key=lambda e: (e["user_id"], e["timestamp"], e["item_id"], e["rating"])):
        if e["user_id"] in seen:
            targets.append(e["item_id"])
        seen.add(e["user_id"])
    return targets


@pytest.fixture(scope="module")
def trained(histories, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("model") / "m"
    train(["--data", str(histories / "train"), "--model_dir", str(model_dir), "--task", "next_item",
           "--steps", "30", "--batch_size", "128", "--export", "none", *SMALL])
    schema = Schema.load(str(histories / "train"))
    task = resolve_task(schema, "next_item")
    args, hidden = train_cli._args(["--data", "x", "--model_dir", "x", *SMALL])
    model = task.make_model(schema, args, hidden)
    model.build()
    latest = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    return model, task


def test_next_item_metrics_are_the_same_for_every_batch_size_and_count_every_row(histories, trained):
    model, task = trained
    held = _targets(histories / "heldout.jsonl")
    baseline = training_baseline(task, str(histories / "train"))
    results = [evaluate(model, task, str(histories / "heldout"), size, baseline) for size in (7, 128, 5000)]
    for r in results:
        assert r["eval_rows"] == len(held)  # 5000: one partial batch holds them all
        assert r["eval_catalogue_size"] == 100000
    for key in ("eval_loss", "eval_hit_rate_at_10", "eval_baseline_hit_rate_at_10"):
        assert results[0][key] == pytest.approx(results[1][key], rel=1e-5, abs=1e-7), key
        assert results[0][key] == pytest.approx(results[2][key], rel=1e-5, abs=1e-7), key


def test_next_item_hit_rate_ranks_the_whole_catalogue(histories, trained):
    from transforms.tfdata.dataset import make_dataset

    model, task = trained
    result = evaluate(model, task, str(histories / "heldout"), 64, {})
    # Reference: every held-out row scored against every item of the catalogue at once, in numpy.
    (features, label), = make_dataset(str(histories / "heldout"), 100000, shuffle=False, output="coo",
                                      combiner="mean", features=[task.item], label=task.label)
    user = model.user_vector(features, tf.shape(label)[0]).numpy().astype(np.float64)
    items = model.items.embeddings.numpy().astype(np.float64)
    bias = model.item_bias.embeddings.numpy()[:, 0].astype(np.float64)
    scores = user @ items.T + bias
    target = label.numpy().astype(np.int64)
    own = scores[np.arange(len(target)), target]
    above = (scores > own[:, None]).sum(axis=1)
    assert result["eval_hit_rate_at_10"] == pytest.approx(np.mean(above < 10))
    log_total = np.log(np.exp(scores - scores.max(axis=1, keepdims=True)).sum(axis=1)) + scores.max(axis=1)
    assert result["eval_loss"] == pytest.approx(np.mean(log_total - own), rel=1e-4)


def test_the_popularity_baseline_recommends_the_ten_most_frequent_training_targets(histories, tmp_path):
    result = train(["--data", str(histories / "train"), "--eval_data", str(histories / "heldout"),
                    "--model_dir", str(tmp_path / "m"), "--task", "next_item", "--steps", "3", "--batch_size", "64",
                    "--export", "none", *SMALL])
    counts = collections.Counter(_targets(histories / "train.jsonl")).most_common()
    assert counts[9][1] > counts[10][1]  # the top ten are a set without ties at its edge
    popular = {item for item, _ in counts[:10]}
    held = _targets(histories / "heldout.jsonl")
    assert result["eval_baseline_hit_rate_at_10"] == pytest.approx(sum(t in popular for t in held) / len(held))


def test_fewer_held_out_rows_than_a_batch_evaluate_and_export(histories, tmp_path):
    held = _targets(histories / "heldout.jsonl")
    assert len(held) < 1024
    train_cli.main(["--data", str(histories / "train"), "--eval_data", str(histories / "heldout"),
                    "--model_dir", str(tmp_path / "m"), "--task", "next_item", "--steps", "2",
                    "--batch_size", "1024", *SMALL])
    recorded = json.loads((tmp_path / "m" / "train_result.json").read_text())["runs"][-1]
    assert recorded["eval_rows"] == len(held) and (tmp_path / "m" / "export" / "saved_model.pb").exists()


def test_the_help_says_how_held_out_rows_are_counted_and_ranked():
    text = " ".join(train_cli._parser().format_help().split())
    assert "every row counts once, whatever --batch_size" in text
    assert "against the whole item catalogue" in text
