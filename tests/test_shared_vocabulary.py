"""Shared vocabularies: one file counted over several features (against collections.Counter), one id space."""

from __future__ import annotations

import collections
import os
import re

import pytest

from pipelines.config import ConfigError, parse_config
from transforms.testing import ingest_in_memory

SCHEMA = [
    {"name": "clicked", "kind": "label", "dtype": "int64"},
    {"name": "cate_id", "dtype": "string"},
    {"name": "his_cate", "dtype": "string"},
    {"name": "user", "dtype": "string"},
    {"name": "shop", "dtype": "int64"},
]


def _config(features, **more):
    return {"input": {"format": "csv", "schema": SCHEMA}, "features": features,
            "output": {"format": "parquet", "num_shards": 1, "shuffle": False}, **more}


SHARED = {"cate_id": {"vocabulary": {"shared": "cate"}}, "his_cate": {"vocabulary": {"shared": "cate"}},
          "user": {"vocabulary": {}}}


@pytest.mark.parametrize("features, key, message", [
    ({"cate_id": {"vocabulary": {"shared": "cate"}}, "his_cate": {"vocabulary": {"shared": "cate", "top_k": 3}},
      "user": {"hash_buckets": 9}}, "features.his_cate.vocabulary.shared", "top_k None.*top_k 3"),
    ({"cate_id": {"vocabulary": {"shared": "cate", "num_oov_buckets": 2}},
      "his_cate": {"vocabulary": {"shared": "cate"}}, "user": {"hash_buckets": 9}},
     "features.his_cate.vocabulary.shared", "num_oov_buckets 2.*num_oov_buckets 1"),
    ({"cate_id": {"vocabulary": {"shared": "x"}}, "his_cate": {"hash_buckets": 9}, "user": {"hash_buckets": 9},
      "shop": {"vocabulary": {"shared": "x"}}}, "features.shop.vocabulary.shared", "string values.*integer values"),
    ({"cate_id": {"vocabulary": {"shared": "user"}}, "his_cate": {"vocabulary": {"shared": "user"}},
      "user": {"vocabulary": {}}}, "features.his_cate.vocabulary.shared", "also the feature 'user'"),
    ({"cate_id": {"vocabulary": {"shared": "../x"}}, "his_cate": {"hash_buckets": 9}, "user": {"hash_buckets": 9}},
     "features.cate_id.vocabulary.shared", "vocab/../x.txt"),
    ({"cate_id": {"vocabulary": {"shared": 3}}, "his_cate": {"hash_buckets": 9}, "user": {"hash_buckets": 9}},
     "features.cate_id.vocabulary.shared", "must be str"),
])
def test_mixed_settings_on_one_shared_name_are_refused_with_one_line(features, key, message):
    with pytest.raises(ConfigError, match=rf"'{re.escape(key)}'.*{message}") as e:
        parse_config(_config(features))
    assert "\n" not in str(e.value)


def test_shared_vocabulary_in_a_schema_entry_is_refused():
    schema = [*SCHEMA[:1], {"name": "cate_id", "dtype": "string", "shared_vocabulary": "c"}]
    with pytest.raises(ConfigError, match=r"'input.schema\[1\].shared_vocabulary'.*written by the ingest"):
        parse_config({"input": {"format": "csv", "schema": schema}, "features": {"cate_id": {"hash_buckets": 3}}})


LINES = ["clicked,cate_id,his_cate,user,shop"] + [
    f"{i % 2},c{(i * 7) % 5},{'|'.join(f'c{(i + j) % 9}' for j in range(i % 4))},u{i % 3},{i % 4}" for i in range(40)
]


def _expected_tokens(lines, columns, min_frequency=1):
    """Count descending, ties by value ascending: written independently of the ingest with Counter."""
    counts = collections.Counter()
    header = lines[0].split(",")
    for line in lines[1:]:
        cells = dict(zip(header, line.split(",")))
        for column in columns:
            counts.update(v for v in cells[column].split("|") if v)
    return [t for t, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n >= min_frequency]


def test_one_file_counted_over_all_members_and_one_id_space(tmp_path):
    out = ingest_in_memory(LINES, _config(SHARED), output_dir=str(tmp_path / "train"))
    vocab = tmp_path / "train" / "vocab"
    assert sorted(os.listdir(vocab)) == ["cate.txt", "user.txt"]
    tokens = (vocab / "cate.txt").read_text().splitlines()
    assert tokens == _expected_tokens(LINES, ["cate_id", "his_cate"])
    index = {t: i + 1 for i, t in enumerate(tokens)}  # one OOV bucket first
    header = LINES[0].split(",")
    by_key = {}
    for line in LINES[1:]:
        cells = dict(zip(header, line.split(",")))
        by_key.setdefault((int(cells["clicked"]), cells["user"], int(cells["shop"]), cells["cate_id"]), []).append(
            ([index[cells["cate_id"]]], [index[v] for v in cells["his_cate"].split("|") if v]))
    user_tokens = (vocab / "user.txt").read_text().splitlines()
    got = collections.defaultdict(list)
    for row in out.rows:
        user = user_tokens[row["user"][0] - 1]
        got[(row["clicked"], user, row["shop"][0], tokens[row["cate_id"][0] - 1])].append(
            (row["cate_id"], row["his_cate"]))
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in by_key.items()}
    cate, his = out.schema["cate_id"], out.schema["his_cate"]
    assert cate.shared_vocabulary == his.shared_vocabulary == "cate"
    assert cate.id_space == his.id_space and cate.vocabulary_size == his.vocabulary_size == len(tokens) + 1
    assert out.schema["user"].shared_vocabulary is None

    # --vocab_from: the shared file is reused, the members keep one id space.
    later = LINES[:1] + ["1,c_new,c1|c_new,u1,2"]
    held = ingest_in_memory(later, _config(SHARED, vocab_from=str(tmp_path / "train")),
                            output_dir=str(tmp_path / "held"))
    assert sorted(os.listdir(tmp_path / "held" / "vocab")) == ["cate.txt", "user.txt"]
    assert (tmp_path / "held" / "vocab" / "cate.txt").read_text() == (vocab / "cate.txt").read_text()
    assert held.rows[0]["cate_id"] == [0] and held.rows[0]["his_cate"] == [index["c1"], 0]
    assert held.schema["his_cate"].id_space == his.id_space
    assert held.schema["his_cate"].shared_vocabulary == "cate"


def test_features_of_a_shared_vocabulary_train_one_embedding_table(tmp_path):
    tf = pytest.importorskip("tensorflow")
    from pipelines.train import train

    ingest_in_memory(LINES, _config(SHARED), output_dir=str(tmp_path / "train"))
    model_dir = tmp_path / "model"
    train(["--data", str(tmp_path / "train"), "--model_dir", str(model_dir), "--batch_size", "8", "--steps", "3",
           "--hidden_units", "16", "--block_size", "16", "--embedding_dim", "4", "--export", "none", "--quiet",
           "--exclude", "shop"])
    checkpoint = tf.train.latest_checkpoint(str(model_dir)) or tf.train.latest_checkpoint(
        str(next(p.parent for p in model_dir.rglob("checkpoint"))))
    tables = {name: shape for name, shape in tf.train.list_variables(checkpoint)
              if "embedding" in name and "OPTIMIZER" not in name and name.endswith("VARIABLE_VALUE")}
    tokens = len((tmp_path / "train" / "vocab" / "cate.txt").read_text().splitlines())
    users = len((tmp_path / "train" / "vocab" / "user.txt").read_text().splitlines())
    # One table for cate_id and his_cate (the shared id space), one for user: two tables, sized by their files.
    assert sorted(shape[0] for shape in tables.values()) == sorted([tokens + 1, users + 1]), tables
    assert any("shared_embedding_cate" in name for name in tables), tables
    assert not any("embedding_cate_id" in name or "embedding_his_cate" in name for name in tables), tables


def test_ctr_model_shares_one_layer_and_both_features_train_it():
    tf = pytest.importorskip("tensorflow")
    from pipelines.model import BATCH_ROWS, CtrModel

    model = CtrModel({"a": 5, "b": 5, "c": 3}, [], embedding_dim=4, hidden_units=(16,), block_size=16,
                     tables={"a": "ab", "b": "ab"})
    model.build()
    assert model.embeddings["a"] is model.embeddings["b"] and model.embeddings["c"] is not model.embeddings["a"]
    assert sorted(v.shape[0] for v in model.trainable_variables if len(v.shape) == 2 and v.shape[1] == 4) == [3, 5]

    def coo(ids):
        return (tf.constant([0], tf.int32), tf.constant([ids], tf.int32), tf.constant([1.0]))

    with tf.GradientTape() as tape:
        out = model({"a": coo(1), "b": coo(2), "c": coo(0), BATCH_ROWS: tf.constant(1)})
    table = model.embeddings["a"].trainable_variables[0]
    grad = tf.convert_to_tensor(tape.gradient(out, table))
    assert sorted(int(i) for i in tf.where(tf.reduce_any(grad != 0, axis=1))[:, 0]) == [1, 2]
    with pytest.raises(ValueError, match="different id ranges"):
        CtrModel({"a": 5, "b": 6}, [], tables={"a": "ab", "b": "ab"})
    assert CtrModel.from_config(model.get_config()).tables == {"a": "ab", "b": "ab"}


HISTORY_SCHEMA = [
    {"name": "user", "kind": "dense", "dtype": "string"},
    {"name": "item", "kind": "dense", "dtype": "string"},
    {"name": "cate", "kind": "dense", "dtype": "string"},
    {"name": "ts", "kind": "dense", "dtype": "int64"},
    {"name": "query_cate", "kind": "sparse", "dtype": "string"},
]
EVENTS = [
    {"user": "u1", "item": "a", "cate": "x", "ts": 1, "query_cate": ["y"]},
    {"user": "u1", "item": "b", "cate": "y", "ts": 2, "query_cate": ["y", "w"]},
    {"user": "u1", "item": "c", "cate": "x", "ts": 3, "query_cate": []},
    {"user": "u2", "item": "a", "cate": "x", "ts": 1, "query_cate": ["w"]},
    {"user": "u2", "item": "d", "cate": "z", "ts": 2, "query_cate": ["y"]},
]


def test_a_history_item_column_shares_a_vocabulary_with_an_event_feature(tmp_path):
    config = {
        "input": {"format": "jsonl", "schema": HISTORY_SCHEMA},
        "histories": {"key": "user", "item": "item", "time": "ts", "item_columns": ["cate"],
                      "examples_per_event": True},
        "features": {"item": {"hash_buckets": 100}, "cate": {"vocabulary": {"shared": "category"}},
                     "query_cate": {"vocabulary": {"shared": "category"}}},
        "output": {"num_shards": 1, "shuffle": False},
    }
    out = ingest_in_memory(EVENTS, config, output_dir=str(tmp_path / "out"))
    tokens = (tmp_path / "out" / "vocab" / "category.txt").read_text().splitlines()
    counts = collections.Counter([e["cate"] for e in EVENTS] + [q for e in EVENTS for q in e["query_cate"]])
    assert tokens == sorted(counts, key=lambda t: (-counts[t], t))  # x: 3, y: 4, w: 2, z: 1 -> y, x, w, z
    index = {t: i + 1 for i, t in enumerate(tokens)}
    by_user = collections.defaultdict(list)
    for e in EVENTS:
        by_user[e["user"]].append(e)
    expected = []
    for events in by_user.values():
        for i, e in enumerate(events[1:], 1):
            expected.append(([index[p["cate"]] for p in events[:i]], index[e["cate"]],
                             [index[q] for q in e["query_cate"]]))
    got = [(r["cate"], r["target_cate"], r["query_cate"]) for r in out.rows]
    assert sorted(got) == sorted(expected)
    spaces = {out.schema[n].id_space for n in ("cate", "target_cate", "query_cate")}
    assert len(spaces) == 1
    assert out.schema["cate"].shared_vocabulary == out.schema["query_cate"].shared_vocabulary == "category"


def test_history_side_lists_of_one_shared_vocabulary_look_up_one_table():
    tf = pytest.importorskip("tensorflow")
    from pipelines.history_model import HistoryModel

    model = HistoryModel("item", 20, "rating", embedding_dim=4, hidden_units=(16,), block_size=16,
                         side_sparse={"cate": 7, "query_cate": 7, "shop": 5}, tables={"cate": "c", "query_cate": "c"})
    model.build()
    assert model.side_0 is model.side_1 and model.side_2 is not model.side_0
    tables = [v for v in model.trainable_variables if len(v.shape) == 2 and v.shape[1] == 4]
    # The shared table once (7 rows), the shop table (5); the history bag and the items (20) as before.
    assert sorted(v.shape[0] for v in tables if v.shape[0] != 16) == [5, 7, 20, 20]  # 16: the user projection

    def coo(ids):
        return (tf.constant([0, 1], tf.int32), tf.constant(ids, tf.int32), tf.constant([1.0, 1.0]))

    features = {"item": coo([1, 2]), "cate": coo([3, 3]), "query_cate": coo([4, 5]), "shop": coo([0, 1]),
                "target_item": tf.constant([1, 2], tf.int64)}
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(model(features))
    grad = tf.convert_to_tensor(tape.gradient(out, model.side_0.trainable_variables[0]))
    assert sorted(int(i) for i in tf.where(tf.reduce_any(grad != 0, axis=1))[:, 0]) == [3, 4, 5]
    with pytest.raises(ValueError, match="different id ranges"):
        HistoryModel("item", 20, side_sparse={"a": 3, "b": 4}, tables={"a": "t", "b": "t"})
    assert HistoryModel.from_config(model.get_config()).tables == {"cate": "c", "query_cate": "c"}
