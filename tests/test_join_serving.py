"""Serving a model trained on joined columns: the signature takes them as inputs, the caller supplies them.

Expected scores: the trained model restored from its checkpoint and fed the ingested shards (one
unshuffled shard of one batch: rows in log order); served with each row's table values as raw cells (a user
absent from the table: the missing cell "" and NaN, as the join gave), the scores must be the same.
"""

import numpy as np
import pytest
import tensorflow as tf
import yaml

from pipelines.ingest import run_ingest
from pipelines.train import train
from tests.test_serving_lists import _scores_from_shards

# user: (occupation, age, tags); u4 is not in the table. The table's lists are " "-joined and "NA" is its null.
USERS = {"u1": ("doctor", "25", "shoes sale"), "u2": ("artist", "", "NA"), "u3": ("nurse", "61", "hats")}
_ROWS = [("1", "u1"), ("0", "u2"), ("1", "u3"), ("0", "u4"), ("1", "u2"), ("0", "u1"), ("1", "u4"), ("0", "u3")] * 6

CONFIG = {
    "input": {"format": "csv", "schema": [{"name": "clicked", "kind": "label", "dtype": "int64"},
                                          {"name": "user", "kind": "sparse", "dtype": "string"}]},
    "join": [{"table": "users.csv", "key": "user", "columns": ["occupation", "age", "tags"],
              "list_separator": " ", "null_values": ["", "NA"],
              "schema": [{"name": "age", "kind": "dense", "dtype": "float32"}]}],
    "features": {"user": {"hash_buckets": 64}, "occupation": {"vocabulary": {}}, "tags": {"vocabulary": {}}},
    "output": {"format": "parquet", "num_shards": 1, "shuffle": False},
    "stats": {"batch_sizes": [16]},
}


@pytest.mark.slow
def test_joined_columns_are_signature_inputs_scored_as_trained(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "log.csv").write_text("clicked,user\n" + "".join(",".join(r) + "\n" for r in _ROWS))
    (tmp_path / "users.csv").write_text("user,occupation,age,tags\n" + "".join(
        f"{u},{job},{age},{tags}\n" for u, (job, age, tags) in USERS.items()))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    run_ingest(["--input", "log.csv", "--config", "config.yaml", "--output", "data", "--no_report"])
    result = train(["--data", "data", "--model_dir", "model", "--steps", "3", "--batch_size", "16",
                    "--embedding_dim", "4", "--hidden_units", "16", "--block_size", "16", "--quiet"])
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    assert set(served.structured_input_signature[1]) == {"user", "occupation", "age", "tags"}
    # The caller sends the table's cells as the table writes them: tags " "-joined, "NA" for none.
    jobs = [USERS.get(u, ("", "", ""))[0] for _, u in _ROWS]
    tags = [USERS.get(u, ("", "", "NA"))[2] for _, u in _ROWS]
    ages = [float(USERS[u][1]) if u in USERS and USERS[u][1] else np.nan for _, u in _ROWS]
    scores = served(user=tf.constant([u for _, u in _ROWS]), occupation=tf.constant(jobs),
                    age=tf.constant(ages, tf.float32), tags=tf.constant(tags))["probability"].numpy()
    expected = _scores_from_shards(tmp_path)
    assert expected.shape == scores.shape == (len(_ROWS),)
    assert np.std(expected[:8]) > 1e-4  # rows differ, so a wrong joined value would show
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
