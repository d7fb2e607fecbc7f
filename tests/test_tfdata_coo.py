"""to_coo and pad_to_capacity on feature dicts, against a reference written from the contract."""

import json

import numpy as np
import pytest
import tensorflow as tf
from oracles import assert_entries, capacity_for, pad
from tfdata_data import random_rows, reference_coo

from transforms.tfdata import Coo, capacity_from_stats, load_stats, pad_to_capacity, to_coo


def _batch(rows):
    def ragged(key, dtype):
        return tf.RaggedTensor.from_row_lengths(
            tf.constant([v for r in rows for v in r[key]], dtype), [len(r[key]) for r in rows]
        )

    return {
        "price": tf.constant([np.nan if r["price"] is None else r["price"] for r in rows], tf.float32),
        "user": ragged("user", tf.int64),
        "items": ragged("items", tf.int64),
        "items__weights": ragged("items__weights", tf.float32),
    }


def _lists(coo):
    return coo.row_ids.numpy().tolist(), coo.col_ids.numpy().tolist(), coo.gains.numpy().tolist()


def test_to_coo_converts_every_sparse_feature_and_folds_in_the_weights_column():
    rows = random_rows(40, seed=3)
    out = to_coo(_batch(rows))
    assert sorted(out) == ["items", "price", "user"]  # items__weights consumed, price passed through
    assert isinstance(out["user"], Coo) and isinstance(out["price"], tf.Tensor)
    for name, weighted in (("user", False), ("items", True)):
        assert_entries(out[name], reference_coo(rows, name, weighted), rtol=1e-6)


def test_to_coo_applies_a_per_feature_combiner():
    rows = random_rows(30, seed=4)
    out = to_coo(_batch(rows), combiner={"items": "mean"})
    assert_entries(out["items"], reference_coo(rows, "items", True, "mean"))
    assert_entries(out["user"], reference_coo(rows, "user", False, "sum"))


def test_to_coo_runs_inside_a_dataset_map_on_batched_elements():
    rows = random_rows(25, seed=5)
    ds = tf.data.Dataset.from_tensors(_batch(rows)).map(lambda b: to_coo(b, validate=False))
    out = next(iter(ds))
    assert_entries(out["user"], reference_coo(rows, "user", False))


def test_to_coo_refuses_string_ids_and_unknown_names():
    with pytest.raises(ValueError, match="feature 'tags': ids have dtype string; hash them"):
        to_coo({"tags": tf.ragged.constant([["a"], []])})
    with pytest.raises(ValueError, match="weights given for feature"):
        to_coo({"a": tf.ragged.constant([[1]], dtype=tf.int64)}, weights={"b": 1.0})
    with pytest.raises(ValueError, match="combiner given for feature"):
        to_coo({"a": tf.ragged.constant([[1]], dtype=tf.int64)}, combiner={"b": "mean"})


def _stats(tmp_path=None):
    stats = {
        "format_version": 1,
        "num_rows": 100,
        "features": {
            "user": {"ids_per_row": {"max": 1}, "capacity": {"8": {"max": 8, "p99_9": 7}}},
            "items": {
                "ids_per_row": {"max": 6},
                "capacity": {"8": {"max": 30, "p99_9": 25}, "32": {"max": 90}},
            },
        },
    }
    if tmp_path is not None:
        (tmp_path / "stats.json").write_text(json.dumps(stats))
    return stats


def test_capacity_from_stats_uses_the_exact_entry_or_a_sound_derivation():
    stats = _stats()
    assert capacity_from_stats(stats, "items", 8) == 30
    assert capacity_from_stats(stats, "items", 8, kind="p99_9") == 25
    assert capacity_from_stats(stats, "items", 5) == 30  # a larger window bounds a smaller one
    assert capacity_from_stats(stats, "items", 16) == 60  # two windows of 8, below 16 * 6 and 90
    assert capacity_from_stats(stats, "user", 100) == 100  # 100 rows * at most 1 id
    for feature in ("user", "items"):
        for batch_size in (1, 4, 7, 8, 9, 16, 31, 32, 33, 100):
            want = capacity_for(stats["features"][feature], batch_size)
            assert capacity_from_stats(stats, feature, batch_size) == want, (feature, batch_size)
    with pytest.raises(ValueError, match="only 'max' can be derived"):
        capacity_from_stats(stats, "items", 16, kind="p99_9")
    with pytest.raises(ValueError, match="no feature 'nope'"):
        capacity_from_stats(stats, "nope", 8)


def test_pad_to_capacity_gives_static_lengths_from_stats_json(tmp_path):
    rows = random_rows(8, seed=6)
    coo = to_coo(_batch(rows))
    _stats(tmp_path)
    padded = pad_to_capacity(coo, str(tmp_path), batch_size=8)
    assert padded["items"].row_ids.shape == [30] and padded["user"].col_ids.shape == [8]
    assert_entries(padded["items"], pad(reference_coo(rows, "items", True), 30, sample_count=8)[0])
    assert_entries(padded["user"], pad(reference_coo(rows, "user", False), 8, sample_count=8)[0])
    assert load_stats(str(tmp_path / "stats.json"))["num_rows"] == 100


def test_pad_to_capacity_overflow_raises_or_drops_and_counts():
    coo = Coo(tf.constant([0, 0, 1], tf.int32), tf.constant([4, 5, 6], tf.int64), tf.constant([1.0, 1.0, 1.0]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="capacity"):
        pad_to_capacity({"f": coo}, {"f": 2}, sample_count=2)
    dropped = tf.Variable(0, dtype=tf.int64)
    out = pad_to_capacity({"f": coo}, {"f": 2}, sample_count=2, overflow="drop", dropped=dropped)
    assert out["f"].col_ids.numpy().tolist() == [4, 5]
    assert int(dropped.numpy()) == 1
    with pytest.raises(ValueError, match="no capacity for feature"):
        pad_to_capacity({"f": coo}, {"g": 3}, sample_count=2)
    with pytest.raises(ValueError, match="sample_count"):
        pad_to_capacity({"f": coo}, {"f": 3})
