"""Hypothesis fuzzing of the op entry points: valid input matches the plain references of
tests/oracles.py, malformed input raises InvalidArgumentError or ValueError naming the
check, eagerly and inside tf.function with unknown shapes, and nothing crashes or returns silently."""

from __future__ import annotations

import functools

import numpy as np
import oracles
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ops
from tests.coo_reference import EXACT_WEIGHTS, batches, reference_coo

COMBINERS = ("sum", "mean", "sqrtn")
SLOW = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BAD = (tf.errors.InvalidArgumentError, ValueError)


def _raises(call, pattern: str):
    """Runs `call`; it must raise InvalidArgumentError or ValueError whose message matches `pattern`."""
    with pytest.raises(BAD, match=pattern):
        result = call()
        # A graph error surfaces when the result is read; reading it must not pass either.
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)


# --- convert_to_coo ---------------------------------------------------------------------------------------


def _index(batch, kind):
    if kind == "ragged":
        return batch.row_splits()
    if kind == "sparse":
        return batch.sparse_indices()
    return np.zeros([0], np.int64)


@functools.cache
def _graph_convert(index_rank: int, combiner: str):
    """convert_to_coo traced once with every length unknown, so all checks happen at run time."""
    index_shape = [None] if index_rank == 1 else [None, None]
    return tf.function(
        lambda index, values, weights, count: ops.convert_to_coo(
            index, values, weights, sample_count=count, combiner=combiner
        ),
        input_signature=[
            tf.TensorSpec(index_shape, tf.int64),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.float32),
            tf.TensorSpec([], tf.int32),
        ],
    )


@st.composite
def _non_finite_batches(draw):
    """Batches whose per-id weights include NaN, inf and -inf at drawn positions."""
    batch = draw(batches())
    n = len(batch.ids)
    weights = np.array(draw(st.lists(st.sampled_from(EXACT_WEIGHTS), min_size=n, max_size=n)), np.float32)
    if n:
        for pos in draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3)):
            weights[pos] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    batch.weights, batch.shared = weights, None
    return batch


@given(batch=_non_finite_batches(), kind=st.sampled_from(["ragged", "sparse"]), combiner=st.sampled_from(COMBINERS))
def test_convert_to_coo_propagates_non_finite_weights_like_the_reference(batch, kind, combiner):
    rows, cols, gains, _ = ops.convert_to_coo(
        _index(batch, kind), batch.ids, batch.weights, sample_count=batch.sample_count, combiner=combiner
    )
    want_rows, want_cols, want_gains = reference_coo(
        batch.rows, batch.ids, batch.weights, batch.sample_count, combiner
    )
    np.testing.assert_array_equal(rows.numpy(), want_rows)
    np.testing.assert_array_equal(cols.numpy(), want_cols)
    # NaN where the reference has NaN, the same infinities, the rest within float32 rounding.
    np.testing.assert_allclose(gains.numpy(), want_gains, rtol=1e-5, atol=1e-6, equal_nan=True)


@given(batch=batches(), kind=st.sampled_from(["ragged", "sparse", "dense"]), combiner=st.sampled_from(COMBINERS))
def test_convert_to_coo_in_a_graph_with_unknown_shapes_matches_the_reference(batch, kind, combiner):
    if kind == "dense":
        batch = batch.__class__([1] * len(batch.ids), batch.ids, batch.weights, batch.shared)
    convert = _graph_convert(2 if kind == "sparse" else 1, combiner)
    weights = np.array([batch.shared], np.float32) if batch.shared is not None else batch.weights
    got = convert(_index(batch, kind), batch.ids.astype(np.int64), weights, np.int32(batch.sample_count))
    want_rows, want_cols, want_gains = batch.reference(combiner)
    np.testing.assert_array_equal(got[0].numpy(), want_rows)
    np.testing.assert_array_equal(got[1].numpy(), want_cols)
    np.testing.assert_allclose(got[2].numpy(), want_gains, rtol=1e-5, atol=1e-6)


# Each corruption of a valid batch and what the error must say: the static (ValueError) wording
# where the shapes alone show it, the run-time check name otherwise.
CORRUPTIONS = {
    "rows decrease": r"rows_sorted",
    "row out of range": r"rows_in_range",
    "splits do not end at nnz": r"row_splits_end",
    "splits decrease": r"row_splits_sorted",
    "splits start above 0": r"row_splits_start",
    "splits wrong length": r"row_splits_length|row_splits has \d+ entries",
    "weights wrong length": r"weights_length|weights has \d+ elements",
    "indices wrong length": r"indices_length|sparse indices but \d+ values",
    "dense wrong length": r"dense_length|exactly one id per sample",
}


@st.composite
def _corrupted(draw):
    """(index, values, weights, sample_count, corruption) with exactly one defect."""
    corruption = draw(st.sampled_from(sorted(CORRUPTIONS)))
    batch = draw(batches(max_rows=6))
    s, n = batch.sample_count, len(batch.ids)
    values = batch.ids.astype(np.int64)
    weights = batch.weights
    if corruption == "rows decrease":
        assume_rows = batch.rows
        if len(set(assume_rows.tolist())) < 2:  # make two rows with ids: row 0 and a later one
            batch = batch.__class__([1, 1] + [0] * max(s - 2, 0), np.array([3, 4]), np.ones(2, np.float32), None)
            s, values, weights = batch.sample_count, batch.ids.astype(np.int64), batch.weights
        index = batch.sparse_indices()
        # Move the last id (in the highest row) to the front: column 0 then falls right after it.
        index = np.concatenate([index[-1:], index[:-1]])
        return index, values, weights, s, corruption
    if corruption == "row out of range":
        index = batch.sparse_indices()
        if n == 0:
            index, values, weights = np.array([[0, 0]], np.int64), np.array([1], np.int64), np.ones(1, np.float32)
        if draw(st.booleans()):
            index[0, 0] = -draw(st.integers(1, 2**40))
        else:
            index[-1, 0] = s + draw(st.integers(0, 2**40))
        return index, values, weights, s, corruption
    if corruption == "indices wrong length":
        index = batch.sparse_indices()
        extra = draw(st.integers(1, 3))
        index = np.concatenate([index, np.full((extra, 2), max(s - 1, 0), np.int64)])
        return index, values, np.ones(1, np.float32), max(s, 1), corruption
    if corruption == "dense wrong length":
        extra = draw(st.sampled_from([-1, 1, 2]))
        count = max(len(values) + extra, 0)
        if count == len(values):
            count += 1
        return np.zeros([0], np.int64), values, np.ones(1, np.float32), count, corruption
    if corruption == "weights wrong length":
        wrong = draw(st.integers(0, n + 3).filter(lambda k: k not in (1, n)))
        return batch.row_splits(), values, np.ones(wrong, np.float32), s, corruption
    splits = batch.row_splits()
    if corruption == "splits wrong length":
        splits = splits[:-1] if draw(st.booleans()) and len(splits) > 1 else np.append(splits, splits[-1])
        return splits, values, weights, s, corruption
    if s == 0:
        batch = batch.__class__([1, 2], np.array([5, 6, 7]), np.ones(3, np.float32), None)
        s, values, weights, splits = 2, batch.ids.astype(np.int64), batch.weights, batch.row_splits()
    if corruption == "splits do not end at nnz":
        splits[-1] += draw(st.integers(1, 100))
    elif corruption == "splits start above 0":
        # Every entry moves up, so only the start is wrong (and the end, checked after it).
        splits = splits + draw(st.integers(1, 100))
    else:  # "splits decrease": an interior drop, or a negative last entry for one row
        if s >= 2:
            splits[1] = splits[2] + draw(st.integers(1, 50))
            splits[2:] = np.maximum(splits[2:], 0)
            # A drop at position 1 needs splits[1] > splits[2]; the end stays n.
            if splits[1] <= splits[2]:
                splits[1] = splits[2] + 1
        else:
            splits[-1] = -draw(st.integers(1, 50))
    return splits, values, weights, s, corruption


@given(case=_corrupted(), combiner=st.sampled_from(COMBINERS))
def test_convert_to_coo_rejects_each_defect_eagerly_naming_it(case, combiner):
    index, values, weights, count, corruption = case
    if corruption == "splits decrease" and index.size == 2:
        pattern = CORRUPTIONS[corruption] + "|row_splits_end"  # [0, -k]: falls and misses nnz
    else:
        pattern = CORRUPTIONS[corruption]
    _raises(lambda: ops.convert_to_coo(index, values, weights, sample_count=count, combiner=combiner), pattern)


@given(case=_corrupted(), combiner=st.sampled_from(COMBINERS))
def test_convert_to_coo_rejects_each_defect_in_a_graph_naming_it(case, combiner):
    index, values, weights, count, corruption = case
    if corruption == "splits decrease" and index.size == 2:
        pattern = CORRUPTIONS[corruption] + "|row_splits_end"
    else:
        pattern = CORRUPTIONS[corruption]
    convert = _graph_convert(np.ndim(index), combiner)
    weights = np.asarray(weights, np.float32).reshape(-1)
    _raises(lambda: convert(index.astype(np.int64), values, weights, np.int32(count)), pattern)


# --- pad_coo ----------------------------------------------------------------------------------------------


@st.composite
def _coo(draw, max_len=12):
    m = draw(st.integers(0, max_len))
    count = draw(st.integers(0, 6))
    rows = np.array(draw(st.lists(st.integers(0, max(count - 1, 0)), min_size=m, max_size=m)), np.int32)
    col_dtype = draw(st.sampled_from([np.int32, np.int64]))
    cols = np.array(draw(st.lists(st.integers(0, 2**31 - 1), min_size=m, max_size=m)), col_dtype)
    gains = np.array(draw(st.lists(st.floats(-100, 100, width=32), min_size=m, max_size=m)), np.float32)
    return rows, cols, gains, count


@functools.cache
def _graph_pad(capacity: int, overflow: str, col_dtype):
    return tf.function(
        lambda r, c, g, s: ops.pad_coo(r, c, g, capacity, sample_count=s, overflow=overflow),
        input_signature=[
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None], col_dtype),
            tf.TensorSpec([None], tf.float32),
            tf.TensorSpec([], tf.int32),
        ],
    )


@given(coo=_coo(), capacity=st.sampled_from([0, 1, 4, 8, 16]), overflow=st.sampled_from(["error", "drop"]),
       graph=st.booleans())
def test_pad_coo_pads_drops_or_rejects_like_the_reference(coo, capacity, overflow, graph):
    rows, cols, gains, count = coo
    if graph:
        pad = _graph_pad(capacity, overflow, tf.as_dtype(cols.dtype))

        def call():
            return pad(rows, cols, gains, np.int32(count))
    else:

        def call():
            return ops.pad_coo(rows, cols, gains, capacity, sample_count=count, overflow=overflow)

    if len(rows) > capacity and overflow == "error":
        _raises(call, rf"check capacity failed: more COO entries than capacity={capacity}")
        return
    got = call()
    want, dropped = oracles.pad((rows.tolist(), cols.tolist(), gains.tolist()), capacity, count, overflow)
    if overflow == "drop":
        got, got_dropped = got
        assert int(got_dropped) == dropped
    assert isinstance(got, ops.Coo) and int(got.sample_count) == count
    for g, w, dtype in zip(got[:3], want, (np.int32, cols.dtype, np.float32)):
        assert g.shape == (capacity,) and g.dtype.as_numpy_dtype == dtype
        assert g.numpy().tolist() == w


@given(coo=_coo(max_len=6), cut=st.sampled_from(["row_ids", "col_ids", "gains"]), by=st.integers(1, 3))
def test_pad_coo_rejects_lengths_that_differ_naming_the_check(coo, cut, by):
    rows, cols, gains, count = coo
    parts = {"row_ids": rows, "col_ids": cols, "gains": gains}
    parts[cut] = np.concatenate([parts[cut], parts[cut][:1].repeat(by) if len(parts[cut]) else
                                 np.zeros(by, parts[cut].dtype)])
    pad = _graph_pad(16, "error", tf.as_dtype(cols.dtype))
    _raises(lambda: pad(parts["row_ids"], parts["col_ids"], parts["gains"], np.int32(count)), "equal_lengths")
    _raises(
        lambda: ops.pad_coo(parts["row_ids"], parts["col_ids"], parts["gains"], 16, sample_count=count),
        "they must be equal",
    )


@given(capacity=st.one_of(st.integers(-5, -1), st.floats(0, 9), st.booleans(), st.just("8")))
def test_pad_coo_rejects_a_capacity_that_is_not_a_non_negative_int(capacity):
    _raises(lambda: ops.pad_coo([0], [1], [1.0], capacity, sample_count=1), "capacity must be a Python int")


# --- embedding_bag ----------------------------------------------------------------------------------------


@st.composite
def _bags(draw, finite=True):
    """(table [V, D], row_ids, col_ids, gains, sample_count); row == sample_count marks padding."""
    vocab, dim, count, n = draw(st.integers(1, 9)), draw(st.integers(1, 4)), draw(st.integers(0, 5)), draw(
        st.integers(0, 14))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    table = rng.uniform(-2, 2, (vocab, dim)).astype(np.float32)
    rows = rng.integers(0, count + 1, n).astype(draw(st.sampled_from([np.int32, np.int64])))
    cols = rng.integers(0, vocab, n).astype(draw(st.sampled_from([np.int32, np.int64])))
    gains = rng.uniform(-3, 3, n).astype(np.float32)
    if not finite and n:
        for pos in draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=2)):
            gains[pos] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return table, rows, cols, gains, count


def _bag_reference(table, rows, cols, gains, count):
    out = np.zeros((count, table.shape[1]), np.float64)
    for r, c, g in zip(rows, cols, gains):
        if r < count:  # the padding row contributes nothing
            out[r] += np.float64(g) * table[c]
    return out


@functools.cache
def _graph_bag(implementation: str):
    return tf.function(
        lambda t, r, c, g, s: ops.embedding_bag(t, r, c, g, s, implementation=implementation),
        input_signature=[
            tf.TensorSpec([None, None], tf.float32),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.float32),
            tf.TensorSpec([], tf.int32),
        ],
    )


@given(bag=_bags(finite=False), implementation=st.sampled_from(["segment", "csr"]), graph=st.booleans())
def test_embedding_bag_matches_the_reference_and_propagates_non_finite_gains(bag, implementation, graph):
    table, rows, cols, gains, count = bag
    if graph:
        got = _graph_bag(implementation)(table, rows.astype(np.int64), cols.astype(np.int64), gains,
                                         np.int32(count))
    else:
        got = ops.embedding_bag(table, rows, cols, gains, count, implementation=implementation)
    np.testing.assert_allclose(got.numpy(), _bag_reference(table, rows, cols, gains, count),
                               rtol=1e-5, atol=1e-5, equal_nan=True)


@st.composite
def _bad_bags(draw):
    """A valid bag with one or two ids or rows moved out of range; returns it with the expected check."""
    table, rows, cols, gains, count = draw(_bags())
    if len(rows) == 0:
        rows, cols, gains = np.zeros(1, rows.dtype), np.zeros(1, cols.dtype), np.ones(1, np.float32)
    n, vocab = len(rows), table.shape[0]
    positions = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=2)))
    what = draw(st.sampled_from(["col_ids", "row_ids"]))
    big = np.iinfo(np.int32).max
    for pos in positions:
        if what == "col_ids":
            cols[pos] = draw(st.sampled_from([-1, vocab, vocab + 7, big, -big]))
        else:
            rows[pos] = draw(st.sampled_from([-1, count + 1, count + 9, big, -big]))
    return (table, rows, cols, gains, count), what, positions[0]


@given(case=_bad_bags(), implementation=st.sampled_from(["segment", "csr"]), graph=st.booleans())
def test_embedding_bag_rejects_out_of_range_ids_and_rows_naming_the_first(case, implementation, graph):
    (table, rows, cols, gains, count), what, first = case
    if graph:

        def call():
            return _graph_bag(implementation)(table, rows.astype(np.int64), cols.astype(np.int64), gains,
                                              np.int32(count))

        position = rf"first offending position:\] \[{first}\]"
    else:

        def call():
            return ops.embedding_bag(table, rows, cols, gains, count, implementation=implementation)

        position = f"first offending position: {first}"
    _raises(call, rf"check {what}_in_range failed.*{position}")


@given(bag=_bags(), cut=st.sampled_from(["row_ids", "col_ids", "gains"]), by=st.integers(1, 3))
def test_embedding_bag_rejects_lengths_that_differ_at_run_time(bag, cut, by):
    table, rows, cols, gains, count = bag
    parts = {"row_ids": rows.astype(np.int64), "col_ids": cols.astype(np.int64), "gains": gains}
    parts[cut] = np.concatenate([parts[cut], np.zeros(by, parts[cut].dtype)])
    bag_fn = _graph_bag("segment")
    _raises(lambda: bag_fn(table, parts["row_ids"], parts["col_ids"], parts["gains"], np.int32(count)),
            "equal_lengths")
    _raises(lambda: ops.embedding_bag(table, parts["row_ids"], parts["col_ids"], parts["gains"], count),
            "must have one length")


# --- BlockSparseMatMul ------------------------------------------------------------------------------------


def _dense_of(layout, w, bs):
    k, n = layout.shape
    dense = np.zeros((k * bs, n * bs))
    for i, (r, c) in enumerate(np.argwhere(layout)):
        dense[r * bs : (r + 1) * bs, c * bs : (c + 1) * bs] = w[i]
    return dense


@st.composite
def _layouts(draw):
    k, n = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    cells = draw(st.lists(st.booleans(), min_size=k * n, max_size=k * n))
    form = draw(st.sampled_from([bool, np.int64, np.float32]))  # 0/1 numbers are accepted as a layout
    return np.array(cells).reshape(k, n).astype(form)


@settings(max_examples=30)
@given(layout=_layouts(), block_size=st.sampled_from([8, 16]), rows=st.integers(0, 5), seed=st.integers(0, 99))
def test_block_sparse_matches_the_masked_dense_matmul(layout, block_size, rows, seed):
    rng = np.random.default_rng(seed)
    plan = ops.BlockSparseMatMul(layout, block_size, jit_compile=False)
    x = rng.standard_normal((rows, layout.shape[0] * block_size)).astype(np.float32)
    w = rng.standard_normal(plan.weight_shape).astype(np.float32)
    want = x.astype(np.float64) @ _dense_of(layout.astype(bool), w, block_size)
    np.testing.assert_allclose(plan(x, w).numpy(), want, rtol=0, atol=1e-4 * max(1.0, np.abs(want).max(initial=0)))


@given(block_size=st.one_of(
    st.integers(-70, 130).filter(lambda b: b not in (8, 16, 32, 64)),
    st.sampled_from([8.5, "8", None, True, 2**40]),
))
def test_block_sparse_rejects_block_sizes_outside_the_supported_set(block_size):
    _raises(lambda: ops.BlockSparseMatMul(np.eye(2, dtype=bool), block_size), "block_size must be one of")


@given(layout=st.one_of(
    st.lists(st.floats(allow_nan=True).filter(lambda v: v not in (0.0, 1.0)), min_size=1, max_size=4).map(
        lambda v: np.array(v).reshape(1, -1)),
    st.integers(2, 9).map(lambda v: np.full((2, 2), v)),
    st.just(np.array([["a", "b"]])),
    st.just(np.array([[True, None]], dtype=object)),
    st.integers(0, 3).map(lambda d: np.ones((1,) * d, bool) if d != 2 else np.ones((0, 3), bool)),
))
def test_block_sparse_rejects_layouts_that_are_not_boolean_grids(layout):
    _raises(lambda: ops.BlockSparseMatMul(layout, 8), "layout must be")


PLANS = {"3x2": np.array([[1, 0], [1, 1], [0, 1]], bool), "1x3": np.array([[1, 1, 0]], bool)}


@functools.cache
def _graph_plan(name: str):
    plan = ops.BlockSparseMatMul(PLANS[name], 8, jit_compile=False)
    return plan, tf.function(
        lambda x, w: plan(x, w),
        input_signature=[tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, None, None], tf.float32)],
    )


@given(name=st.sampled_from(sorted(PLANS)), x_cols=st.integers(0, 40), w_shape=st.tuples(
    st.integers(0, 4), st.sampled_from([4, 8, 16]), st.sampled_from([4, 8, 16])), graph=st.booleans())
def test_block_sparse_rejects_x_and_w_that_do_not_fit_the_layout(name, x_cols, w_shape, graph):
    plan, fn = _graph_plan(name)
    if x_cols == plan.in_features and w_shape == plan.weight_shape:
        return  # a valid pair: covered above
    x, w = np.ones((3, x_cols), np.float32), np.ones(w_shape, np.float32)
    if graph:
        pattern = "Shape of tensor .*x" if x_cols != plan.in_features else "Shape of tensor .*w"
        _raises(lambda: fn(x, w), pattern)
    else:
        pattern = "x must be" if x_cols != plan.in_features else "w must have shape"
        _raises(lambda: plan(x, w), pattern)
