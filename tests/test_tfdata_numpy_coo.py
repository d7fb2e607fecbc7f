"""The Parquet reader's numpy COO gives what ops.convert_to_coo gives, on random batches."""

import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import ops
from transforms.tfdata.numpy_coo import piece_coo

rows_strategy = st.lists(st.lists(st.integers(0, 3), max_size=5), min_size=0, max_size=8)


def _check(rows, weights, combiner):
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    ids = np.array([v for r in rows for v in r], dtype=np.int64)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    got_rows, got_ids, starts, got_gains = piece_coo(lengths, ids, weights, combiner)
    w = tf.constant([weights], tf.float32) if np.isscalar(weights) else tf.constant(weights, tf.float32)
    want = ops.convert_to_coo(tf.constant(splits), tf.constant(ids), w, sample_count=len(rows), combiner=combiner)
    cols = got_ids if starts is None else got_ids[starts]
    assert got_rows.tolist() == want[0].numpy().tolist()
    assert cols.tolist() == want[1].numpy().tolist()
    np.testing.assert_allclose(got_gains, want[2].numpy(), rtol=2e-6, atol=1e-7)
    assert got_rows.dtype == np.int32 and got_gains.dtype == np.float32


@settings(max_examples=40)
@given(rows=rows_strategy, combiner=st.sampled_from(["sum", "mean", "sqrtn"]), data=st.data())
def test_per_id_weights_match_convert_to_coo(rows, combiner, data):
    n = sum(len(r) for r in rows)
    weights = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.5, 3.25]), min_size=n, max_size=n))
    _check(rows, np.array(weights, dtype=np.float32), combiner)


@settings(max_examples=25)
@given(rows=rows_strategy, combiner=st.sampled_from(["sum", "mean", "sqrtn"]), w=st.sampled_from([1.0, 2.5, 0.0]))
def test_a_scalar_weight_matches_convert_to_coo(rows, combiner, w):
    _check(rows, w, combiner)


def test_one_hot_rows_skip_the_merge_and_still_match():
    rows = [[5], [], [7], [7], []]
    _check(rows, 1.0, "mean")
    _check(rows, np.array([2.0, 0.0, -3.0], np.float32), "sqrtn")
    _, _, starts, _ = piece_coo(np.array([1, 0, 1]), np.array([5, 7]), 1.0, "sum")
    assert starts is None
