"""ops.pad_coo: fixed-capacity COO, overflow handling, and one XLA compilation for many batches."""

import doctest
import importlib

import numpy as np
import pytest
import tensorflow as tf
from coo_reference import graph_nodes, host_memory_data, ops_without_gpu_kernel
from hypothesis import given
from hypothesis import strategies as st
from oracles import pad

import ops


def _random_coo(rng, sample_count, nnz, vocab=50):
    rows = np.sort(rng.integers(0, sample_count, nnz)).astype(np.int32)
    cols = rng.integers(1, vocab, nnz).astype(np.int64)  # id 0 only ever appears as padding
    gains = rng.uniform(0.1, 2.0, nnz).astype(np.float32)
    return rows, cols, gains


@given(
    nnz=st.integers(0, 20),
    capacity=st.integers(0, 24),
    sample_count=st.integers(1, 6),
    overflow=st.sampled_from(["error", "drop"]),
    col_dtype=st.sampled_from([np.int32, np.int64]),
    seed=st.integers(0, 2**16),
)
def test_pads_or_drops_to_exactly_capacity(nnz, capacity, sample_count, overflow, col_dtype, seed):
    rows, cols, gains = _random_coo(np.random.default_rng(seed), sample_count, nnz)
    cols = cols.astype(col_dtype)
    if overflow == "error" and nnz > capacity:
        with pytest.raises(tf.errors.InvalidArgumentError, match="check capacity failed"):
            ops.pad_coo(rows, cols, gains, capacity, sample_count=sample_count)
        return
    got = ops.pad_coo(rows, cols, gains, capacity, sample_count=sample_count, overflow=overflow)
    want, dropped = pad((rows.tolist(), cols.tolist(), gains.tolist()), capacity, sample_count, overflow)
    if overflow == "drop":
        got, got_dropped = got
        assert int(got_dropped) == dropped
    assert isinstance(got, ops.Coo) and got.sample_count == sample_count
    assert [t.shape.as_list() for t in got[:3]] == [[capacity]] * 3
    assert (got[0].dtype, got[1].dtype, got[2].dtype) == (tf.int32, tf.as_dtype(col_dtype), tf.float32)
    assert [t.numpy().tolist() for t in got[:3]] == list(want)


def test_static_shape_is_capacity_even_when_inputs_have_unknown_length():
    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.float32),
            tf.TensorSpec([], tf.int32),
        ]
    )
    def pad(rows, cols, gains, sample_count):
        padded, dropped = ops.pad_coo(rows, cols, gains, 16, sample_count=sample_count, overflow="drop")
        assert [t.shape.as_list() for t in padded[:3]] == [[16]] * 3
        return padded, dropped

    (rows, cols, gains, _), dropped = pad([0, 1, 1], [4, 5, 6], [1.0, 1.0, 1.0], 2)
    assert rows.numpy().tolist() == [0, 1, 1] + [2] * 13
    assert int(dropped) == 0


def _embedding_bag(table, rows, cols, gains, sample_count):
    """A segment-sum bag with one extra segment that collects the padding, then sliced off."""
    picked = tf.gather(table, cols) * gains[:, None]
    return tf.math.unsorted_segment_sum(picked, rows, sample_count + 1)[:sample_count]


def _dense_reference(table, rows, cols, gains, sample_count):
    bag = np.zeros((sample_count, table.shape[0]))
    np.add.at(bag, (rows, cols), gains)
    return bag @ table


def test_jit_compiled_consumer_traces_once_across_batches_of_different_nnz():
    sample_count, capacity = 32, 256
    rng = np.random.default_rng(3)
    table = tf.constant(rng.normal(size=(50, 4)).astype(np.float32))
    bag = tf.function(_embedding_bag, jit_compile=True)
    unpadded_bag = tf.function(_embedding_bag, jit_compile=True)
    nnz_seen = set()
    for _ in range(20):
        lengths = rng.integers(0, 8, sample_count)
        ids = rng.integers(1, 50, lengths.sum())
        splits = np.concatenate([[0], np.cumsum(lengths)])
        coo = ops.convert_to_coo(splits, ids, 1.0, sample_count=sample_count, combiner="mean")
        nnz_seen.add(int(coo[0].shape[0]))
        padded = ops.pad_coo(coo, capacity=capacity)
        out = bag(table, *padded)
        want = _dense_reference(table.numpy(), *(t.numpy() for t in coo[:3]), sample_count)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
        if len(nnz_seen) <= 3:  # the contrast: unpadded input retraces as nnz changes
            unpadded_bag(table, *coo)
    assert len(nnz_seen) > 10
    assert bag.experimental_get_tracing_count() == 1
    assert unpadded_bag.experimental_get_tracing_count() >= 2


def test_padding_contributes_nothing_even_when_table_row_zero_is_nan():
    sample_count = 5
    rows, cols, gains = _random_coo(np.random.default_rng(0), sample_count, 12)
    table = np.random.default_rng(1).normal(size=(50, 3)).astype(np.float32)
    table[0] = np.nan
    padded = ops.pad_coo(rows, cols, gains, 20, sample_count=sample_count)
    got = _embedding_bag(tf.constant(table), *padded)
    want = _dense_reference(table[1:], rows, cols - 1, gains, sample_count)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_padding_gain_is_zero_so_a_weighted_sum_ignores_it():
    padded = ops.pad_coo([0, 1], [3, 4], [2.0, 0.5], 6, sample_count=2)
    table = tf.reshape(tf.range(10, dtype=tf.float32), [10, 1])
    contributions = tf.gather(table, padded[1])[:, 0] * padded[2]
    assert contributions.numpy().tolist() == [6.0, 2.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("overflow", ["error", "drop"])
@pytest.mark.parametrize("col_dtype", [tf.int32, tf.int64])
def test_runs_on_gpu_kernels_with_its_data_in_device_memory(overflow, col_dtype):
    @tf.function
    def pad(rows, cols, gains, sample_count):
        return ops.pad_coo(rows, cols, gains, 64, sample_count=sample_count, overflow=overflow)

    specs = [tf.TensorSpec([None], dtype) for dtype in (tf.int32, col_dtype, tf.float32)]
    traced = pad.get_concrete_function(*specs, tf.TensorSpec([], tf.int32))
    assert not ops_without_gpu_kernel(graph_nodes(traced))
    assert not host_memory_data(traced)


def test_overflow_error_raises_inside_tf_function():
    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None]),
        ]
    )
    def pad(rows, cols, gains):
        return ops.pad_coo(rows, cols, gains, 2, sample_count=4, name="C9")

    with pytest.raises(tf.errors.InvalidArgumentError, match="feature C9.*check capacity failed"):
        pad([0, 1, 2], [1, 2, 3], [1.0, 1.0, 1.0])


def test_lengths_that_differ_only_at_run_time_raise_invalid_argument():
    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None]),
        ]
    )
    def pad(rows, cols, gains):
        return ops.pad_coo(rows, cols, gains, 8, sample_count=4)

    with pytest.raises(tf.errors.InvalidArgumentError, match="check equal_lengths failed"):
        pad([0, 1, 2], [1, 2], [1.0, 1.0, 1.0])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"capacity": -1}, "capacity must be a Python int >= 0"),
        ({"capacity": 4.0}, "capacity must be a Python int"),
        ({"capacity": tf.constant(4)}, "capacity must be a Python int"),
        ({"overflow": "wrap"}, "unknown overflow mode"),
        ({"sample_count": -2}, "sample_count must be >= 0"),
        ({"cols": [1, 2]}, "lengths 3, 2 and 3"),
        ({"gains": tf.constant([1, 1, 1], tf.float64)}, "gains must be float32"),
        ({"rows": [0.0, 1.0, 2.0]}, "row_ids must be int32 or int64"),
        ({"rows": [[0, 1, 2]]}, "row_ids must be 1-D"),
    ],
)
def test_static_problems_raise_value_error(kwargs, fragment):
    args = {"rows": [0, 1, 2], "cols": [1, 2, 3], "gains": [1.0, 1.0, 1.0], "capacity": 4, "sample_count": 3}
    args.update(kwargs)
    with pytest.raises(ValueError, match=fragment):
        ops.pad_coo(
            args["rows"],
            args["cols"],
            args["gains"],
            args["capacity"],
            sample_count=args["sample_count"],
            overflow=args.get("overflow", "error"),
        )


def test_docstring_examples_run():
    results = doctest.testmod(importlib.import_module("ops.pad_coo"))
    assert results.attempted > 0 and results.failed == 0
