"""CsrBatch: invariants, and errors that name the feature, the check and the position."""

import numpy as np
import pytest

from sparse_io import CsrBatch, SparseValidationError


def _batch(splits, values, weights=1.0):
    return CsrBatch(np.array(splits, dtype=np.int64), np.array(values, dtype=np.int64), weights)


def test_valid_batch_passes_and_chains():
    b = _batch([0, 2, 2, 3], [7, 9, 7], np.array([1.0, 0.5, 2.0], np.float32))
    assert b.validate("items", vocabulary_size=10) is b
    assert (b.num_rows, b.nnz) == (3, 3)
    assert b.row_lengths().tolist() == [2, 0, 1]
    assert b.value_rowids().tolist() == [0, 0, 2]
    assert b.row(2).tolist() == [7]


def test_scalar_weight_fast_path_allocates_no_array():
    b = _batch([0, 1, 3], [1, 2, 3])
    assert b.has_scalar_weight and isinstance(b.weights, float) and b.weights == 1.0
    assert b.weights_array().tolist() == [1.0, 1.0, 1.0]
    assert _batch([0, 1], [4], np.float32(0.5)).weights == 0.5


def test_num_rows_must_match_row_splits():
    with pytest.raises(SparseValidationError, match=r"num_rows=3 .* 3 entries"):
        CsrBatch(np.array([0, 1, 2], np.int64), np.array([1, 2]), num_rows=3)


@pytest.mark.parametrize(
    "splits, values, pattern",
    [
        ([1, 2], [5], r"feature 'f': row_splits\[0\] is 1, expected 0"),
        ([0, 2, 1, 3], [1, 2, 3], r"feature 'f': row_splits decreases at row 1 \(2 -> 1\)"),
        ([0, 1, 4], [1, 2, 3], r"feature 'f': row_splits ends at 4 but there are 3 values"),
    ],
)
def test_bad_row_splits_named(splits, values, pattern):
    with pytest.raises(SparseValidationError, match=pattern):
        _batch(splits, values).validate("f")


def test_row_splits_dtype_checked():
    b = CsrBatch(np.array([0, 1], np.int32), np.array([1], np.int64))
    with pytest.raises(SparseValidationError, match="row_splits dtype is int32, expected int64"):
        b.validate("f")


def test_values_dtype_checked():
    b = CsrBatch(np.array([0, 1], np.int64), np.array([1.5]))
    with pytest.raises(SparseValidationError, match="values must be 1-D int32 or int64, got float64"):
        b.validate("f")


def test_negative_id_named_with_position_and_row():
    b = _batch([0, 0, 2, 4], [1, 2, 3, -4])
    with pytest.raises(
        SparseValidationError, match=r"feature 'items': id -4 at position 3 \(row 2\) is negative"
    ):
        b.validate("items")


def test_id_beyond_vocabulary_named_with_position_and_row():
    b = _batch([0, 2, 2, 3], [1, 9, 10])
    b.validate("items")  # no vocabulary: fine
    with pytest.raises(
        SparseValidationError,
        match=r"feature 'items': id 10 at position 2 \(row 2\) is >= vocabulary size 10",
    ):
        b.validate("items", vocabulary_size=10)


def test_weights_length_mismatch_named():
    b = _batch([0, 2], [1, 2], np.array([1.0], np.float32))
    with pytest.raises(SparseValidationError, match="feature 'w': weights length 1 does not match 2 values"):
        b.validate("w")


def test_weights_dtype_checked():
    b = _batch([0, 1], [1], np.array([1.0], np.float64))
    with pytest.raises(SparseValidationError, match="weights dtype is float64, expected float32"):
        b.validate("w")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weight_named_with_position_and_row(bad):
    b = _batch([0, 1, 3], [1, 2, 3], np.array([1.0, 2.0, bad], np.float32))
    with pytest.raises(
        SparseValidationError, match=r"feature 'w': weight .* at position 2 \(row 1\) is NaN or infinite"
    ):
        b.validate("w")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_scalar_weight_rejected(bad):
    with pytest.raises(SparseValidationError, match="scalar weight .* is not finite"):
        _batch([0, 1], [1], bad).validate("w")


def test_unnamed_batch_says_sparse_batch():
    with pytest.raises(SparseValidationError, match=r"^sparse batch: id -1 at position 0"):
        _batch([0, 1], [-1]).validate()


def test_validation_error_is_a_value_error():
    assert issubclass(SparseValidationError, ValueError)


def test_empty_batch_is_valid():
    b = _batch([0], [])
    assert b.validate("f", vocabulary_size=1).num_rows == 0
    assert b.row_lengths().tolist() == [] and b.value_rowids().tolist() == []


def test_equals_compares_rows_ids_and_weights_by_value():
    a = _batch([0, 2], [1, 2])
    assert a.equals(_batch([0, 2], [1, 2], np.array([1.0, 1.0], np.float32)))
    assert not a.equals(_batch([0, 2], [1, 2], 2.0))
    assert not a.equals(_batch([0, 1, 2], [1, 2]))
    assert not a.equals(_batch([0, 2], [2, 1]))
