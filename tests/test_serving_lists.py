"""The exported signature reads list cells with the ingest's own `list_separator` and null tokens.

A log whose lists are joined by " " (MovieLens genres, tags) used to be split on "|" at serving: every
list cell became one unknown id, so the model was scored on ids it never saw. Expected scores: the trained
model restored from its checkpoint and fed the ingested shards (rows in log order: one unshuffled shard).
"""

import numpy as np
import pytest
import tensorflow as tf
import yaml

from pipelines.ingest import run_ingest
from pipelines.train import CHECKPOINT_DIR, train

_ROWS = [  # clicked, user, tags (" "-joined), price
    ("1", "u1", "shoes sale", "1.5"), ("0", "u2", "NA", ""), ("1", "u3", "hats", "2"),
    ("0", "u1", "sale hats shoes", "NA"), ("1", "u2", "shoes", "0.25"), ("0", "u3", "", "4"),
] * 8

CONFIG = {
    "input": {"format": "csv", "list_separator": " ", "null_values": ["", "NA"],
              "schema": [{"name": "clicked", "kind": "label", "dtype": "int64"},
                         {"name": "user", "kind": "sparse", "dtype": "string"},
                         {"name": "tags", "kind": "sparse", "dtype": "string"},
                         {"name": "price", "kind": "dense", "dtype": "float32"}]},
    "features": {"user": {"hash_buckets": 64}, "tags": {"hash_buckets": 64}},
    "output": {"format": "parquet", "num_shards": 1, "shuffle": False},
    "stats": {"batch_sizes": [16]},
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("lists")
    (root / "log.csv").write_text("clicked,user,tags,price\n" + "".join(",".join(r) + "\n" for r in _ROWS))
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    run_ingest(["--input", str(root / "log.csv"), "--config", str(root / "config.yaml"),
                "--output", str(root / "data"), "--no_report"])
    result = train(["--data", str(root / "data"), "--model_dir", str(root / "model"), "--steps", "3",
                    "--batch_size", "16", "--embedding_dim", "4", "--hidden_units", "16", "--block_size", "16",
                    "--quiet"])
    return root, result


def _scores_from_shards(root):
    from types import SimpleNamespace

    from pipelines.tasks import resolve_task
    from sparse_io.schema import Schema
    from transforms.tfdata.dataset import make_dataset

    schema = Schema.load(str(root / "data"))
    task = resolve_task(schema, "ctr")
    model = task.make_model(schema, SimpleNamespace(embedding_dim=4, density=0.25, block_size=16, seed=0), (16,))
    model.build()
    tf.train.Checkpoint(model=model).restore(
        tf.train.latest_checkpoint(str(root / "model" / CHECKPOINT_DIR))).expect_partial()
    dataset = make_dataset(str(root / "data"), len(_ROWS), shuffle=False, output="coo", combiner="mean",
                           format="parquet")
    return np.concatenate([tf.sigmoid(model(task.model_inputs(f, y))).numpy() for f, y in dataset])


def test_a_space_separated_list_log_is_scored_on_the_ids_it_was_trained_on(trained):
    root, result = trained
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    scores = served(user=tf.constant([r[1] for r in _ROWS]), tags=tf.constant([r[2] for r in _ROWS]),
                    price=tf.constant([float(r[3]) if r[3] not in ("", "NA") else np.nan for r in _ROWS],
                                      tf.float32))["probability"].numpy()
    expected = _scores_from_shards(root)
    assert expected.shape == scores.shape == (len(_ROWS),)
    assert np.std(expected[:6]) > 1e-4  # rows differ, so a wrong id would show
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)


def test_the_reading_rules_come_from_the_manifest_and_one_without_them_is_refused(trained, tmp_path):
    import json
    import shutil

    from pipelines.serving import IngestReading
    from sparse_io.manifest import ManifestError

    root, _ = trained
    reading = IngestReading.load(str(root / "data"))
    assert (reading.rules.list_separator, reading.rules.null_values) == (" ", ("", "NA"))
    assert reading.raw["user"].dtype == "string"  # schema.json says int64: the ids, not the log's cells
    copy = tmp_path / "data"
    shutil.copytree(root / "data", copy)
    manifest = json.loads((copy / "_MANIFEST.json").read_text())
    del manifest["config"]
    (copy / "_MANIFEST.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="records no ingest config"):
        IngestReading.load(str(copy))
