"""Serving applies crosses and shared vocabularies as the ingest did: served inputs equal the shards' batch.

A CSV log is ingested with two crosses (a string x a dense integer, a string x a list) and a shared
vocabulary (a per-event category and a list of categories); a model over its schema.json is exported
with the ingest's reading, and for the same rows the export's `model_inputs` of the raw cells equal
the COO triples `make_dataset` gives from the shards, and both signatures score them as the model
scores the shards' batch. A `--vocab_from` ingest of the same rows gives the same ids.
"""

from __future__ import annotations

import csv
import random

import numpy as np
import pytest
import yaml

tf = pytest.importorskip("tensorflow")

from pipelines.ingest import run_ingest  # noqa: E402
from pipelines.model import BATCH_ROWS, CtrModel  # noqa: E402
from pipelines.serving import serving_inputs  # noqa: E402
from pipelines.tasks import resolve_task  # noqa: E402
from sparse_io.schema import Schema  # noqa: E402
from transforms.tfdata.dataset import make_dataset  # noqa: E402

pytestmark = pytest.mark.slow  # two ingests, an export and its load: about a minute

CONFIG = {
    "input": {"format": "csv", "schema": [
        {"name": "clicked", "kind": "label", "dtype": "int64"},
        {"name": "user", "dtype": "string"},
        {"name": "occupation", "kind": "dense", "dtype": "int64"},
        {"name": "tags", "dtype": "string"},
        {"name": "cate_id", "dtype": "string"},
        {"name": "his_cate", "dtype": "string"},
        {"name": "price", "kind": "dense", "dtype": "float32"},
    ]},
    "features": {
        "user": {"hash_buckets": 50},
        "tags": {"hash_buckets": 40},
        "cate_id": {"vocabulary": {"shared": "cate"}},
        "his_cate": {"vocabulary": {"shared": "cate"}},
        "user_x_occ": {"cross": ["user", "occupation"], "hash_buckets": 64},
        "user_x_tags": {"cross": ["user", "tags"], "hash_buckets": 32, "max_per_row": 2},
    },
    "output": {"format": "parquet", "num_shards": 1, "shuffle": False},
}
HEADER = ["clicked", "user", "occupation", "tags", "cate_id", "his_cate", "price"]


def _log(path, rows: int, seed: int) -> dict:
    rng = random.Random(seed)
    cells = {name: [] for name in HEADER}
    for i in range(rows):
        row = [str(rng.randint(0, 1)), f"u{rng.randint(0, 30)}", "" if i % 9 == 4 else str(rng.randint(0, 20)),
               "|".join(f"t{rng.randint(0, 12)}" for _ in range(rng.randint(0, 4))), f"c{rng.randint(0, 8)}",
               "|".join(f"c{rng.randint(0, 11)}" for _ in range(rng.randint(0, 5))), f"{rng.random() * 9:.3f}"]
        for name, cell in zip(HEADER, row):
            cells[name].append(cell)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(zip(*(cells[n] for n in HEADER)))
    return cells


def _ingest(tmp_path, log, config, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    run_ingest(["--input", str(log), "--config", str(path), "--output", str(tmp_path / name), "--no_report",
                "--progress_seconds", "0"])
    return tmp_path / name


def _batch(data, rows):
    (features, label), = make_dataset(str(data), rows, shuffle=False, output="coo", combiner="mean",
                                      format="parquet")
    assert int(tf.shape(label)[0]) == rows
    return features


def test_serving_crosses_and_shares_as_the_ingest_did(tmp_path):
    rows = 120
    cells = _log(tmp_path / "log.csv", rows, seed=11)
    data = _ingest(tmp_path, tmp_path / "log.csv", CONFIG, "data")
    schema = Schema.load(str(data))
    sizes = {s.name: s.vocabulary_size or s.hash_buckets for s in schema.sparse}
    tables = {s.name: s.shared_vocabulary for s in schema.sparse if s.shared_vocabulary}
    assert tables == {"cate_id": "cate", "his_cate": "cate"}
    model = CtrModel(sizes, ["occupation", "price"], embedding_dim=4, hidden_units=(16,), block_size=16, seed=3,
                     tables=tables)
    model.build()
    export = resolve_task(schema, "auto").export(model, schema, str(tmp_path / "export"), ingest_dir=str(data))
    loaded = tf.saved_model.load(export)
    features = _batch(data, rows)

    text = serving_inputs(loaded.signatures["serving_text"], cells)
    # The crosses are no inputs: their sources are (all of them model columns here).
    assert set(text) == {"user", "occupation", "tags", "cate_id", "his_cate", "price"}
    served = loaded.model_inputs(text)
    for name in model.vocab_sizes:
        for part in ("row_ids", "col_ids", "gains"):
            np.testing.assert_array_equal(served[name][part].numpy(), getattr(features[name], part).numpy(),
                                          err_msg=f"{name}.{part}")
    assert int(tf.size(features["user_x_tags"].col_ids)) > 0

    raw = model({**features, BATCH_ROWS: tf.constant(rows)}, training=False)
    from_text = loaded.signatures["serving_text"](**text)["probability"].numpy()
    np.testing.assert_allclose(from_text, tf.sigmoid(raw).numpy(), rtol=1e-6, atol=1e-7)
    minimum = np.iinfo(np.int64).min
    typed = dict(cells, occupation=np.array([minimum if c == "" else int(c) for c in cells["occupation"]]),
                 price=np.array([float(c) for c in cells["price"]], np.float32))
    default = loaded.signatures["serving_default"]
    np.testing.assert_array_equal(default(**serving_inputs(default, typed))["probability"].numpy(), from_text)

    # Held-out data in the training data's id space: the same rows get the same ids.
    held = _ingest(tmp_path, tmp_path / "log.csv", {**CONFIG, "vocab_from": str(data)}, "held")
    again = _batch(held, rows)
    for name in model.vocab_sizes:
        np.testing.assert_array_equal(again[name].col_ids.numpy(), features[name].col_ids.numpy(), err_msg=name)
