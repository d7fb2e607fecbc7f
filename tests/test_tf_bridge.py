"""CsrBatch <-> tf.RaggedTensor / tf.SparseTensor: exact round trips; a scalar weight stays a float."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import CsrBatch, SparseValidationError

tf = pytest.importorskip("tensorflow")

from sparse_io import csr_from_ragged, csr_from_sparse, csr_to_ragged, csr_to_sparse  # noqa: E402

_rows = st.lists(
    st.lists(
        st.tuples(st.integers(0, 2**40), st.floats(width=32, allow_nan=False, allow_infinity=False)),
        max_size=5,
    ),
    max_size=12,
)
_id_dtypes = st.sampled_from([np.int32, np.int64])


def _csr(rows, dtype, weighted):
    splits = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    ids = np.array([i % 2**31 if dtype == np.int32 else i for r in rows for i, _ in r], dtype=dtype)
    weights = np.array([w for r in rows for _, w in r], dtype=np.float32) if weighted else 0.5
    return CsrBatch(splits, ids, weights)


def _same(a: CsrBatch, b: CsrBatch) -> None:
    assert b.row_splits.dtype == np.int64 and a.row_splits.tolist() == b.row_splits.tolist()
    assert a.values.dtype == b.values.dtype and a.values.tolist() == b.values.tolist()
    if a.has_scalar_weight:
        assert b.has_scalar_weight and type(b.weights) is float and b.weights == a.weights
    else:
        assert b.weights.dtype == np.float32 and a.weights.tolist() == b.weights.tolist()


@settings(max_examples=25)
@given(_rows, _id_dtypes, st.booleans())
def test_ragged_round_trip_is_exact(rows, dtype, weighted):
    csr = _csr(rows, dtype, weighted)
    ids, w = csr_to_ragged(csr)
    assert ids.to_list() == [[i % 2**31 if dtype == np.int32 else i for i, _ in r] for r in rows]
    assert ids.shape[0] == len(rows)
    if weighted:
        assert w.to_list() == [[np.float32(x) for _, x in r] for r in rows]
    else:
        assert type(w) is float and w == 0.5
    _same(csr, csr_from_ragged(ids, w))


@settings(max_examples=25)
@given(_rows, _id_dtypes, st.booleans())
def test_sparse_round_trip_is_exact_and_row_major(rows, dtype, weighted):
    csr = _csr(rows, dtype, weighted)
    ids, w = csr_to_sparse(csr)
    expected_indices = [[r, c] for r, row in enumerate(rows) for c in range(len(row))]
    assert ids.indices.numpy().tolist() == expected_indices  # sorted row-major by construction
    assert ids.dense_shape.numpy().tolist() == [len(rows), max((len(r) for r in rows), default=0)]
    assert ids.values.numpy().tolist() == csr.values.tolist()
    if weighted:
        assert w.indices.numpy().tolist() == expected_indices
    else:
        assert type(w) is float and w == 0.5
    _same(csr, csr_from_sparse(ids, w))


def test_empty_batch_round_trips():
    csr = CsrBatch(np.zeros(1, np.int64), np.zeros(0, np.int64))
    _same(csr, csr_from_ragged(*csr_to_ragged(csr)))
    _same(csr, csr_from_sparse(*csr_to_sparse(csr)))


def test_trailing_empty_rows_are_kept():
    csr = CsrBatch(np.array([0, 1, 1, 1], np.int64), np.array([4], np.int64))
    assert csr_from_sparse(*csr_to_sparse(csr)).num_rows == 3
    assert csr_to_ragged(csr)[0].to_list() == [[4], [], []]


def test_missing_weights_mean_scalar_one():
    ids = tf.RaggedTensor.from_row_splits(tf.constant([1, 2], tf.int64), tf.constant([0, 2], tf.int64))
    b = csr_from_ragged(ids)
    assert type(b.weights) is float and b.weights == 1.0


def test_ragged_of_rank_three_is_rejected():
    ids = tf.ragged.constant([[[1]], [[2, 3]]], dtype=tf.int64)
    with pytest.raises(SparseValidationError, match="ragged_rank 1"):
        csr_from_ragged(ids)


def test_ragged_weights_with_other_splits_are_rejected():
    ids = tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)
    weights = tf.ragged.constant([[1.0], [2.0, 3.0]])
    with pytest.raises(SparseValidationError, match="weights row_splits differ"):
        csr_from_ragged(ids, weights)


def test_sparse_not_sorted_by_row_is_rejected():
    ids = tf.SparseTensor([[1, 0], [0, 0]], tf.constant([1, 2], tf.int64), [2, 1])
    with pytest.raises(SparseValidationError, match="not sorted by row at position 1"):
        csr_from_sparse(ids)


def test_sparse_weights_with_other_indices_are_rejected():
    ids = tf.SparseTensor([[0, 0], [1, 0]], tf.constant([1, 2], tf.int64), [2, 1])
    weights = tf.SparseTensor([[0, 0], [0, 1]], tf.constant([1.0, 2.0]), [2, 2])
    with pytest.raises(SparseValidationError, match="weights indices differ"):
        csr_from_sparse(ids, weights)
