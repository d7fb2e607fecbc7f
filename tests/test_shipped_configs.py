"""Every config in pipelines/configs works end to end: ingest -> train -> evaluate -> export -> serve raw rows.

Each config gets a small log of its shape, generated here; the held-out part
is ingested into the training data's id space (`--vocab_from`), and the
exported SavedModel scores raw rows of it exactly as the trained model scores
the ingested held-out shards.
"""

import gzip
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from pipelines.ingest import run_ingest
from pipelines.synthetic import write_synthetic_criteo, write_synthetic_events
from pipelines.train import CHECKPOINT_DIR, train

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.name for p in (REPO / "pipelines" / "configs").glob("*.yaml"))
# criteo.yaml hashes 25 features into 1,000,000 buckets each: one-wide tables keep its model (and export) small.
TINY = ["--batch_size", "32", "--embedding_dim", "1", "--hidden_units", "16", "--block_size", "16",
        "--steps", "3", "--quiet"]

pytestmark = pytest.mark.slow


def _criteo_log(path, rows, seed):
    return write_synthetic_criteo(str(path.with_suffix(".tsv.gz")), rows, seed)


def _events_log(path, rows, seed):
    return write_synthetic_events(str(path.with_suffix(".jsonl")), rows, seed, users=40, items=200)


_CLICK_HEADER = ["clicked", "user_id", "item_id", "tags", "price", "event_time"]
_NULLS = ("", "NA", "NULL", "\\N")  # own_logs.yaml's null_values


def _click_log(path, rows, seed):
    """A tab-separated click log with a header, in the layout own_logs.yaml reads (null tokens included)."""
    rng = np.random.default_rng(seed)
    lines = ["\t".join(_CLICK_HEADER)]
    for i in range(rows):
        tags = "|".join(f"t{t}" for t in rng.integers(0, 30, rng.integers(0, 4))) or str(rng.choice(_NULLS))
        price = str(rng.choice(["NA", "", f"{rng.uniform(0, 50):.2f}", "3"]))
        when = str(1709284502120 + 1000 * i) if i % 2 else f"2024-03-01T09:{i // 60 % 60:02d}:{i % 60:02d}.120Z"
        item = str(rng.choice(["NULL", f"i{rng.integers(0, 60)}"]))
        lines.append("\t".join([str(rng.integers(0, 2)), f"u{rng.integers(0, 40)}", item, tags, price, when]))
    path = path.with_suffix(".tsv")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


LOGS = {"criteo.yaml": _criteo_log, "demo.yaml": _criteo_log, "own_logs.yaml": _click_log,
        "user_history.yaml": _events_log, "criteo_transforms.yaml": _criteo_log}


def test_every_shipped_config_has_a_log_generator_here():
    assert CONFIGS and set(CONFIGS) == set(LOGS)


def _criteo_raw_rows(path):
    """The Criteo log parsed straight from its layout: raw id strings and float counts (NaN when empty)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    raw = {f"I{i}": [] for i in range(1, 14)} | {f"C{i}": [] for i in range(1, 27)}
    for line in lines:
        fields = line.split("\t") + [""] * 40
        for i in range(1, 14):
            raw[f"I{i}"].append(float(fields[i]) if fields[i] else float("nan"))
        for i in range(1, 27):
            raw[f"C{i}"].append(fields[13 + i])
    return {k: tf.constant(v, tf.float32 if k[0] == "I" else tf.string) for k, v in raw.items()}


def _click_raw_rows(path):
    """The click log parsed straight from its text as a serving client sends it: null tokens as "" or NaN."""
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    header, rows = lines[0].split("\t"), [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]
    assert header == _CLICK_HEADER
    raw = {name: tf.constant(["" if r[name] in _NULLS else r[name] for r in rows]) for name in ("user_id", "item_id",
                                                                                               "tags")}
    raw["price"] = tf.constant([float("nan") if r["price"] in _NULLS else float(r["price"]) for r in rows],
                               tf.float32)
    return raw  # event_time is not a model input (an absolute time), so not a serving input either


def _restored_scores(result, data, model_dir, heldout):
    """The trained weights, restored into the model the trainer builds, on the held-out shards."""
    from types import SimpleNamespace

    from pipelines.tasks import resolve_task
    from sparse_io.schema import Schema
    from transforms.tfdata.dataset import make_dataset

    schema = Schema.load(str(data))
    task = resolve_task(schema, "ctr")
    args = SimpleNamespace(embedding_dim=1, density=0.25, block_size=16, seed=0)
    model = task.make_model(schema, args, (16,))
    model.build()
    tf.train.Checkpoint(model=model).restore(
        tf.train.latest_checkpoint(str(model_dir / CHECKPOINT_DIR))).expect_partial()
    dataset = make_dataset(str(heldout), 64, shuffle=False, output="coo", combiner="mean", format="parquet")
    return np.concatenate([tf.sigmoid(model(task.model_inputs(f, y))).numpy() for f, y in dataset])


@pytest.mark.parametrize("config", CONFIGS)
def test_shipped_config_ingests_trains_evaluates_exports_and_serves_raw_rows(config, tmp_path):
    path = str(REPO / "pipelines" / "configs" / config)
    train_log = LOGS[config](tmp_path / "train", 400, 1000)
    heldout_log = LOGS[config](tmp_path / "heldout", 200, 1001)
    run_ingest(["--input", train_log, "--config", path, "--output", str(tmp_path / "train"), "--no_report"])
    run_ingest(["--input", heldout_log, "--config", path, "--output", str(tmp_path / "heldout"), "--no_report",
                "--vocab_from", str(tmp_path / "train")])
    model_dir = tmp_path / "model"
    result = train(["--data", str(tmp_path / "train"), "--eval_data", str(tmp_path / "heldout"),
                    "--model_dir", str(model_dir), *TINY])
    assert result["steps"] == 3 and np.isfinite(result["loss"]) and np.isfinite(result["eval_loss"])
    assert result["eval_rows"] > 0
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    if LOGS[config] in (_criteo_log, _click_log):
        raw_rows = _criteo_raw_rows if LOGS[config] is _criteo_log else _click_raw_rows
        scores = served(**raw_rows(heldout_log))["probability"].numpy()
        expected = _restored_scores(result, tmp_path / "train", model_dir, tmp_path / "heldout")
        assert scores.shape == expected.shape == (200,)
        # Shards are shuffled: the multiset of scores must match.
        np.testing.assert_allclose(np.sort(scores), np.sort(expected), rtol=1e-4, atol=1e-6)
    else:
        events = [json.loads(line) for line in open(heldout_log, encoding="utf-8")][:5]
        history = "|".join(str(e["item_id"]) for e in events[:-1])
        weights = "|".join(str(e["rating"]) for e in events[:-1])
        raw = {"item_id": tf.constant([history, ""]), "target_item_id": tf.constant([str(events[-1]["item_id"])] * 2),
               "item_id__weights": tf.constant([weights, ""])}
        (scores,) = served(**raw).values()
        assert scores.shape == (2,) and np.isfinite(scores.numpy()).all()
