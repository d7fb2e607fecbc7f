"""The columnar reader's COO follows the COO rule: numpy's `piece_coo` and the native kernel, checked against the
plain oracle on random batches (and, additionally, against ops.convert_to_coo, the other fast path)."""

import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import Entries, assert_entries, coo

import ops
from transforms.tfdata.columnar.numpy_coo import native_available, native_coo_into, piece_coo

rows_strategy = st.lists(st.lists(st.integers(0, 3), max_size=12), min_size=0, max_size=8)
# The native kernel where it is built here; numpy's piece_coo, its reference, everywhere.
IMPLEMENTATIONS = ["numpy", "native"] if native_available(np.dtype(np.int64)) else ["numpy"]


def _got(rows, weights, combiner, implementation="numpy") -> tuple:
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    ids = np.array([v for r in rows for v in r], dtype=np.int64)
    if implementation == "native":
        out = np.empty(len(ids), np.int32), np.empty(len(ids), np.int64), np.empty(len(ids), np.float32)
        count = native_coo_into(lengths, ids, weights, combiner, *out)
        return tuple(a[:count] for a in out)
    got_rows, got_ids, starts, got_gains = piece_coo(lengths, ids, weights, combiner)
    assert got_rows.dtype == np.int32 and got_gains.dtype == np.float32
    cols = got_ids if starts is None else got_ids[starts]
    return got_rows, cols, got_gains


def _check(rows, weights, combiner, implementation="numpy"):
    """`weights`: one float, or float32 per-id weights in row order."""
    if isinstance(weights, np.ndarray):
        flat = iter(weights.tolist())
        per_row = [[next(flat) for _ in r] for r in rows]
    else:
        per_row = float(weights)
    got = _got(rows, weights, combiner, implementation)
    assert_entries(got, coo(rows, per_row, combiner), rtol=2e-6, atol=1e-7)
    # The graph fast path agrees too (an additional check: both follow the same rule).
    splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    ids = np.array([v for r in rows for v in r], dtype=np.int64)
    w = tf.constant([weights], tf.float32) if np.isscalar(weights) else tf.constant(weights, tf.float32)
    graph = ops.convert_to_coo(tf.constant(splits), tf.constant(ids), w, sample_count=len(rows), combiner=combiner)
    assert_entries(got, Entries(*(t.numpy().tolist() for t in graph[:3])), rtol=2e-6, atol=1e-7)


@settings(max_examples=60)
@given(rows=rows_strategy, combiner=st.sampled_from(["sum", "mean", "sqrtn"]), data=st.data(),
       implementation=st.sampled_from(IMPLEMENTATIONS))
def test_per_id_weights_follow_the_coo_rule(rows, combiner, data, implementation):
    n = sum(len(r) for r in rows)
    weights = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.5, 3.25]), min_size=n, max_size=n))
    _check(rows, np.array(weights, dtype=np.float32), combiner, implementation)


@settings(max_examples=40)
@given(rows=rows_strategy, combiner=st.sampled_from(["sum", "mean", "sqrtn"]), w=st.sampled_from([1.0, 2.5, 0.0]),
       implementation=st.sampled_from(IMPLEMENTATIONS))
def test_a_scalar_weight_follows_the_coo_rule(rows, combiner, w, implementation):
    _check(rows, w, combiner, implementation)


def test_one_hot_rows_skip_the_merge_and_still_follow_the_rule():
    rows = [[5], [], [7], [7], []]
    _check(rows, 1.0, "mean")
    _check(rows, np.array([2.0, 0.0, -3.0], np.float32), "sqrtn")
    # Hand-worked: rows 0, 2, 3 hold one id each; sqrtn gives w / |w|, and 0 for a zero weight.
    got = _got(rows, np.array([2.0, 0.0, -3.0], np.float32), "sqrtn")
    assert_entries(got, Entries([0, 2, 3], [5, 7, 7], [1.0, 0.0, -1.0]))
    _, _, starts, _ = piece_coo(np.array([1, 0, 1]), np.array([5, 7]), 1.0, "sum")
    assert starts is None


def test_a_hand_worked_batch_with_merges_and_an_empty_row():
    # Rows [7, 7, 2], [], [5]; weights 1, 3, 4 | - | 2; mean: row 0 sums to 8, row 2 to 2.
    got = _got([[7, 7, 2], [], [5]], np.array([1.0, 3.0, 4.0, 2.0], np.float32), "mean")
    assert_entries(got, Entries([0, 0, 2], [7, 2, 5], [0.5, 0.5, 1.0]))


def test_rows_of_several_ids_none_repeating_its_neighbour_take_the_csr_as_it_is():
    # Row 0 holds 7 twice, but not side by side: no merge (the rule merges neighbours only).
    rows = [[7, 2, 7], [], [5, 6], [1, 2, 3, 4]]
    weights = np.array([1.0, 3.0, 4.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0], np.float32)
    for combiner in ("sum", "mean", "sqrtn"):
        _check(rows, weights, combiner)
        _check(rows, 2.0, combiner)
    lengths = np.array([len(r) for r in rows])
    ids = np.array([v for r in rows for v in r])
    got_rows, _, starts, gains = piece_coo(lengths, ids, weights, "sum")
    assert starts is None and got_rows.tolist() == [0, 0, 0, 2, 2, 3, 3, 3, 3]
    assert gains.tolist() == weights.tolist()
    # Mean over row 0's weights 1 + 3 + 4 = 8; row 2's 2 + 0 = 2.
    _, _, _, mean = piece_coo(lengths, ids, weights, "mean")
    np.testing.assert_allclose(mean[:5], [1 / 8, 3 / 8, 4 / 8, 1.0, 0.0])
