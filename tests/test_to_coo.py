"""ops.to_coo on RaggedTensor, SparseTensor and CsrBatch, against the plain reference."""

import dataclasses
import doctest
import importlib

import numpy as np
import pytest
import tensorflow as tf
from coo_reference import assert_coo_equal, batches
from hypothesis import given
from hypothesis import strategies as st

import ops
from sparse_io import CsrBatch

COMBINERS = ("sum", "mean", "sqrtn")


def _ragged(batch, flat):
    return tf.RaggedTensor.from_row_splits(flat, batch.row_splits())


def _sparse(batch, flat):
    return tf.SparseTensor(batch.sparse_indices(), flat, [batch.sample_count, max(batch.lengths, default=0)])


def _input(batch, kind: str, weights_form: str):
    """(x, weights) in the given kind; weights None only for an all-ones shared weight."""
    if kind == "csr":
        w = batch.shared if batch.shared is not None else batch.weights
        return CsrBatch(batch.row_splits(), batch.ids, w), None
    make = _ragged if kind == "ragged" else _sparse
    x = make(batch, batch.ids)
    if batch.shared is None:
        return x, make(batch, batch.weights)
    if weights_form == "none":
        return x, None
    if weights_form == "tensor":
        return x, tf.constant(batch.shared, tf.float32)
    return x, batch.shared


@given(
    st.sampled_from(["ragged", "sparse", "csr"]),
    batches(),
    st.sampled_from(COMBINERS),
    st.sampled_from(["none", "float", "tensor"]),
)
def test_every_input_kind_matches_reference(kind, batch, combiner, weights_form):
    if weights_form == "none" and batch.shared is not None:
        batch = dataclasses.replace(batch, shared=1.0, weights=np.ones_like(batch.weights))
    x, weights = _input(batch, kind, weights_form)
    got = ops.to_coo(x, weights=weights, combiner=combiner)
    assert_coo_equal(got, batch.reference(combiner), batch.ids.dtype)


def test_dataset_map_with_ragged_ids_and_weights():
    ids = tf.ragged.constant([[4, 4, 1], [], [2], [7, 7]], dtype=tf.int64)
    weights = tf.ragged.constant([[1.0, 3.0, 4.0], [], [2.0], [1.0, 1.0]])
    ds = tf.data.Dataset.from_tensor_slices((ids, weights)).batch(3)
    ds = ds.map(lambda x, w: ops.to_coo(x, weights=w, combiner="mean"))
    got = [tuple(np.round(t.numpy(), 6).tolist() for t in coo) for coo in ds]
    assert got == [([0, 0, 2], [4, 1, 2], [0.5, 0.5, 1.0], 3), ([0], [7], [1.0], 1)]


def test_sparse_tensor_in_tf_function_with_unknown_batch_size():
    @tf.function(
        input_signature=[
            tf.SparseTensorSpec([None, None], tf.int64),
            tf.SparseTensorSpec([None, None], tf.float32),
        ]
    )
    def convert(x, w):
        return ops.to_coo(x, weights=w, combiner="sum")

    x = tf.SparseTensor([[0, 0], [0, 1], [2, 0]], tf.constant([5, 5, 6], tf.int64), [4, 2])
    w = tf.SparseTensor([[0, 0], [0, 1], [2, 0]], [0.5, 0.25, 2.0], [4, 2])
    rows, cols, gains, samples = convert(x, w)
    assert int(samples) == 4
    assert (rows.numpy().tolist(), cols.numpy().tolist(), gains.numpy().tolist()) == (
        [0, 2],
        [5, 6],
        [0.75, 2.0],
    )


def test_csr_batch_single_weight_stays_a_scalar():
    csr = CsrBatch(np.array([0, 2, 3]), np.array([1, 1, 9], np.int32), 0.5)
    rows, cols, gains, _ = ops.to_coo(csr, combiner="sum")
    assert cols.dtype == tf.int32
    assert (rows.numpy().tolist(), cols.numpy().tolist(), gains.numpy().tolist()) == (
        [0, 1],
        [1, 9],
        [1.0, 0.5],
    )


RAGGED = tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)
SPARSE = tf.SparseTensor([[0, 0], [1, 0]], tf.constant([1, 2], tf.int64), [2, 1])


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: ops.to_coo(tf.constant([1, 2])), "expected a tf.RaggedTensor"),
        (lambda: ops.to_coo(tf.ragged.constant([[[1]]], dtype=tf.int64)), "ragged_rank 1"),
        (lambda: ops.to_coo(tf.SparseTensor([[0, 0, 0]], [1], [1, 1, 1])), "2-D SparseTensor"),
        (lambda: ops.to_coo(CsrBatch(np.array([0, 1]), np.array([1])), weights=2.0), "carries its own weights"),
        (lambda: ops.to_coo(RAGGED, weights=SPARSE), "must be None, a float or a RaggedTensor"),
        (lambda: ops.to_coo(SPARSE, weights=RAGGED), "must be None, a float or a SparseTensor"),
        (lambda: ops.to_coo(RAGGED, weights=True), "must be a float"),
        (lambda: ops.to_coo(RAGGED, combiner="max"), "unknown combiner"),
        (
            lambda: ops.to_coo(RAGGED, weights=tf.ragged.constant([[1.0], [2.0], [3.0]])),
            "row_splits shape",
        ),
    ],
)
def test_static_problems_raise_value_error(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


def test_ragged_weights_with_other_row_splits_raise_invalid_argument():
    weights = tf.ragged.constant([[1.0], [2.0, 3.0]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="weights_row_splits"):
        ops.to_coo(RAGGED, weights=weights, name="hist")


def test_sparse_weights_with_other_indices_raise_invalid_argument():
    weights = tf.SparseTensor([[0, 0], [1, 1]], [1.0, 2.0], [2, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="feature C3.*weights_indices"):
        ops.to_coo(SPARSE, weights=weights, name="C3")


def test_mismatched_weights_in_dataset_map_raise_on_iteration():
    ids = tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)
    weights = tf.ragged.constant([[1.0], [2.0, 3.0]])
    ds = tf.data.Dataset.from_tensors((ids, weights)).map(lambda x, w: ops.to_coo(x, weights=w))
    with pytest.raises(tf.errors.InvalidArgumentError, match="weights_row_splits"):
        list(ds)


def test_unsorted_sparse_rows_raise_invalid_argument():
    unsorted = tf.SparseTensor([[1, 0], [0, 0]], tf.constant([1, 2], tf.int64), [2, 1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="rows_sorted"):
        ops.to_coo(unsorted)


def test_docstring_examples_run():
    results = doctest.testmod(importlib.import_module("ops.to_coo"))
    assert results.attempted > 0 and results.failed == 0
