"""Grouped conversion and padding: many features in one call give what the contract gives per feature."""

import numpy as np
import oracles
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.tfdata.coo import Coo
from transforms.tfdata.core.csr_group import CsrGroup
from transforms.tfdata.core.grouped import convert_group, group_ragged, pad_coo_features


def _ragged(rows, dtype):
    flat = [v for r in rows for v in r]
    return tf.RaggedTensor.from_row_lengths(tf.constant(flat, dtype), tf.constant([len(r) for r in rows], tf.int64))


feature = st.lists(st.lists(st.integers(0, 4), max_size=5), min_size=3, max_size=3)  # 3 rows, small ids: duplicates


@settings(max_examples=20)
@given(
    features=st.lists(feature, min_size=1, max_size=4),
    combiner=st.sampled_from(["sum", "mean", "sqrtn"]),
    weighted=st.booleans(),
)
def test_a_group_converts_like_each_feature_on_its_own(features, combiner, weighted):
    rng = np.random.default_rng(len(features))
    weights = [[[float(np.float32(w)) for w in rng.random(len(r)) + 0.25] for r in f] for f in features]
    names = [f"f{k}" for k in range(len(features))]
    ids = {n: _ragged(f, tf.int64) for n, f in zip(names, features)}
    ws = {n: _ragged(w, tf.float32) for n, w in zip(names, weights)} if weighted else {}
    ((group, how),) = group_ragged(ids, ws, combiner)
    assert how == combiner
    out = convert_group(group, how)
    for n, f, w in zip(names, features, weights):
        oracles.assert_entries(out[n], oracles.coo(f, w if weighted else None, combiner))


one_hot = st.lists(st.lists(st.integers(0, 4), max_size=1), min_size=3, max_size=3)  # the one-id-per-row path


@settings(max_examples=20)
@given(
    features=st.lists(one_hot, min_size=1, max_size=3),
    combiner=st.sampled_from(["sum", "mean", "sqrtn"]),
    weighting=st.sampled_from(["none", "scalar", "per-id"]),
    data=st.data(),
)
def test_one_hot_groups_and_shared_scalar_weights_follow_the_rule(features, combiner, weighting, data):
    names = [f"f{k}" for k in range(len(features))]
    ids = {n: _ragged(f, tf.int64) for n, f in zip(names, features)}
    if weighting == "per-id":
        values = st.sampled_from([0.0, -1.5, 0.25, 2.0])
        weights = [[data.draw(st.lists(values, min_size=len(r), max_size=len(r))) for r in f] for f in features]
        ws = {n: _ragged(w, tf.float32) for n, w in zip(names, weights)}
    else:
        shared = -0.5 if weighting == "scalar" else None
        weights = [shared] * len(features)
        ws = {} if shared is None else dict.fromkeys(names, shared)
    ((group, how),) = group_ragged(ids, ws, combiner)
    out = convert_group(group, how)
    for n, f, w in zip(names, features, weights):
        oracles.assert_entries(out[n], oracles.coo(f, w, combiner))


def test_the_concatenated_layout_converts_and_slices_like_the_ragged_one():
    a, b = [[1, 1, 2], [], [3]], [[4], [5, 5], []]
    splits = tf.constant([0, 3, 3, 4, 5, 7, 7], tf.int64)
    values = tf.constant([1, 1, 2, 3, 4, 5, 5], tf.int64)
    group = CsrGroup(["a", "b"], splits, values, num_rows=tf.constant(3, tf.int64))
    out = convert_group(group, "sum")
    assert out["a"].col_ids.numpy().tolist() == [1, 2, 3] and out["a"].gains.numpy().tolist() == [2.0, 1.0, 1.0]
    assert out["b"].row_ids.numpy().tolist() == [0, 1] and out["b"].gains.numpy().tolist() == [1.0, 2.0]
    (got_a, _), (got_b, _) = group.features(3)
    assert got_a.to_list() == a and got_b.to_list() == b


def _coo(rows, cols):
    return Coo(tf.constant(rows, tf.int32), tf.constant(cols, tf.int64), tf.ones([len(rows)], tf.float32))


def test_padding_many_features_at_once_follows_the_pad_rule_per_feature():
    coo = {"a": _coo([0, 1], [7, 8]), "b": _coo([], []), "c": _coo([0, 0, 2], [1, 2, 3]), "dense": tf.zeros([3])}
    out = pad_coo_features(coo, {"a": 3, "b": 2, "c": 3}, sample_count=3, overflow="error", dropped=None)
    assert out["a"].row_ids.numpy().tolist() == [0, 1, 3] and out["a"].col_ids.numpy().tolist() == [7, 8, 0]
    assert out["b"].row_ids.numpy().tolist() == [3, 3] and out["b"].gains.numpy().tolist() == [0.0, 0.0]
    assert out["c"].col_ids.numpy().tolist() == [1, 2, 3] and out["c"].row_ids.shape == [3]
    assert out["dense"] is coo["dense"]


@settings(max_examples=20)
@given(
    features=st.lists(st.lists(st.integers(0, 3), max_size=4), min_size=1, max_size=3).flatmap(
        lambda f: st.tuples(st.just(f), st.lists(st.integers(0, 5), min_size=len(f), max_size=len(f)))
    ),
    sample_count=st.integers(0, 4),
    col_dtype=st.sampled_from([tf.int32, tf.int64]),
)
def test_padding_many_features_with_drops_follows_the_pad_rule_per_feature(features, sample_count, col_dtype):
    """Each feature's entries are (row, col) pairs taken from `rows_of`; capacities may cut them."""
    rows_of, caps = features
    names = [f"f{k}" for k in range(len(rows_of))]
    coo = {}
    for name, rows in zip(names, rows_of):
        cols = [10 * k + 1 for k in range(len(rows))]
        gains = [0.5 + k for k in range(len(rows))]
        coo[name] = Coo(tf.constant(rows, tf.int32), tf.constant(cols, col_dtype), tf.constant(gains, tf.float32))
    dropped = tf.Variable(0, dtype=tf.int64)
    out = pad_coo_features(
        coo, dict(zip(names, caps)), sample_count=sample_count, overflow="drop", dropped=dropped
    )
    lost = 0
    for name, cap in zip(names, caps):
        want, cut = oracles.pad(tuple(t.numpy().tolist() for t in coo[name][:3]), cap, sample_count, "drop")
        oracles.assert_entries(out[name], want, rtol=0, atol=0)
        assert out[name].col_ids.dtype == col_dtype and out[name].row_ids.shape == [cap]
        lost += cut
    assert int(dropped.numpy()) == lost


def test_overflow_names_the_feature_or_drops_and_counts():
    coo = {"a": _coo([0, 1], [7, 8]), "c": _coo([0, 0, 2], [1, 2, 3])}
    message = r"check 'capacity' failed: feature 'c' has 3 COO entries, more than its capacity 2"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        pad_coo_features(coo, {"a": 2, "c": 2}, sample_count=3, overflow="error", dropped=None)
    dropped = tf.Variable(0, dtype=tf.int64)
    out = pad_coo_features(coo, {"a": 1, "c": 2}, sample_count=3, overflow="drop", dropped=dropped)
    assert out["a"].col_ids.numpy().tolist() == [7] and out["c"].col_ids.numpy().tolist() == [1, 2]
    assert int(dropped.numpy()) == 2
