"""Arrow list columns <-> CsrBatch: exact round trips, and zero-copy asserted by buffer address."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparse_io import CsrBatch, SparseValidationError, csr_from_arrow, csr_to_arrow

# A row is None (a null list: an empty row) or a list of (id, weight) pairs.
_ids = st.integers(0, 2**40)
_weights = st.floats(width=32, allow_nan=False, allow_infinity=False)
_rows = st.lists(st.one_of(st.none(), st.lists(st.tuples(_ids, _weights), max_size=6)), max_size=25)


def _reference(rows):
    """Plain-Python CSR of `rows` (None -> empty row)."""
    splits, ids, weights = [0], [], []
    for row in rows:
        for i, w in row or []:
            ids.append(i)
            weights.append(w)
        splits.append(len(ids))
    return splits, ids, weights


def _arrays(rows, list_type=pa.list_):
    ids = pa.array([None if r is None else [i for i, _ in r] for r in rows], type=list_type(pa.int64()))
    weights = pa.array([None if r is None else [w for _, w in r] for r in rows], type=list_type(pa.float32()))
    return ids, weights


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _values_address(list_array) -> int:
    """Address of the first id of `list_array` (a possibly sliced list array) in its Arrow values buffer."""
    start = int(list_array.offsets[0].as_py())
    values = list_array.values
    return values.buffers()[1].address + (values.offset + start) * values.type.byte_width


@given(_rows)
def test_list_array_round_trip_is_exact(rows):
    ids, weights = _arrays(rows)
    splits, ref_ids, ref_w = _reference(rows)
    b = csr_from_arrow(ids, weights)
    assert b.row_splits.dtype == np.int64 and b.row_splits.tolist() == splits
    assert b.values.tolist() == ref_ids
    assert b.weights.dtype == np.float32 and b.weights.tolist() == ref_w
    assert b.num_rows == len(rows)
    b.validate("f")
    back_ids, back_w = csr_to_arrow(b)
    assert back_ids.to_pylist() == [[i for i, _ in r or []] for r in rows]
    assert back_w.to_pylist() == [[w for _, w in r or []] for r in rows]


@given(_rows)
def test_large_list_array_round_trip_is_exact(rows):
    ids, weights = _arrays(rows, pa.large_list)
    b = csr_from_arrow(ids, weights)
    assert b.row_splits.tolist() == _reference(rows)[0]
    back_ids, back_w = csr_to_arrow(b, large=True)
    assert back_ids.type == pa.large_list(pa.int64())
    assert back_ids.to_pylist() == [[i for i, _ in r or []] for r in rows]
    assert back_w.to_pylist() == [[w for _, w in r or []] for r in rows]


@given(_rows, st.lists(st.integers(0, 25), max_size=4))
def test_chunked_array_reads_like_its_concatenation(rows, cuts):
    ids, weights = _arrays(rows)
    bounds = sorted({0, len(rows), *[min(c, len(rows)) for c in cuts]})
    chunked = pa.chunked_array([ids.slice(a, b - a) for a, b in zip(bounds, bounds[1:])], type=ids.type)
    w_chunked = pa.chunked_array([weights], type=weights.type)
    b = csr_from_arrow(chunked, w_chunked)
    splits, ref_ids, ref_w = _reference(rows)
    assert b.row_splits.tolist() == splits and b.values.tolist() == ref_ids and b.weights.tolist() == ref_w


@given(_rows, st.integers(0, 25), st.integers(0, 25))
def test_sliced_array_is_read_zero_copy(rows, a, length):
    ids, weights = _arrays(rows)
    a = min(a, len(rows))
    sliced, w_sliced = ids.slice(a, length), weights.slice(a, length)
    kept = rows[a : a + length]
    b = csr_from_arrow(sliced, w_sliced)
    splits, ref_ids, ref_w = _reference(kept)
    assert b.row_splits.tolist() == splits and b.values.tolist() == ref_ids and b.weights.tolist() == ref_w
    if b.nnz:
        assert _address(b.values) == _values_address(sliced)
        assert _address(b.weights) == _values_address(w_sliced)


def test_single_chunk_values_are_a_view_of_the_arrow_buffer():
    ids = pa.array([[1, 2], [], [3, 4, 5]], type=pa.list_(pa.int64()))
    b = csr_from_arrow(ids)
    assert _address(b.values) == ids.values.buffers()[1].address + ids.values.offset * 8
    assert not b.values.flags.writeable  # a view of immutable Arrow memory, not a copy
    one_chunk = csr_from_arrow(pa.chunked_array([ids]))
    assert _address(one_chunk.values) == _address(b.values)


def test_int32_ids_stay_int32_and_zero_copy():
    ids = pa.array([[1], [2, 3]], type=pa.list_(pa.int32()))
    b = csr_from_arrow(ids)
    assert b.values.dtype == np.int32
    assert _address(b.values) == ids.values.buffers()[1].address
    back, _ = csr_to_arrow(b)
    assert back.type == pa.list_(pa.int32()) and back.to_pylist() == [[1], [2, 3]]


def test_large_list_unsliced_row_splits_are_not_copied():
    ids = pa.array([[1], [2, 3]], type=pa.large_list(pa.int64()))
    b = csr_from_arrow(ids)
    assert _address(b.row_splits) == ids.buffers()[1].address


def test_csr_to_arrow_wraps_the_ids_buffer():
    values = np.array([5, 6, 7], dtype=np.int64)
    ids, w = csr_to_arrow(CsrBatch(np.array([0, 1, 3], np.int64), values))
    assert ids.values.buffers()[1].address == _address(values)
    assert w == 1.0 and isinstance(w, float)


def test_scalar_weight_passes_through_both_ways():
    ids = pa.array([[1, 2]], type=pa.list_(pa.int64()))
    b = csr_from_arrow(ids, 0.5)
    assert b.has_scalar_weight and b.weights == 0.5
    assert csr_from_arrow(ids, np.float32(0.25)).weights == 0.25
    assert csr_to_arrow(b)[1] == 0.5


def test_null_lists_spanning_values_are_empty_rows():
    # Arrow allows a null slot to cover values; they must not leak into the batch.
    offsets = pa.array([0, 2, 3, 5], pa.int32())
    ids = pa.ListArray.from_arrays(
        offsets, pa.array([1, 2, 3, 4, 5], pa.int64()), mask=pa.array([False, True, False])
    )
    weights = pa.ListArray.from_arrays(
        offsets, pa.array([1, 2, 3, 4, 5], pa.float32()), mask=pa.array([False, True, False])
    )
    b = csr_from_arrow(ids, weights)
    assert b.row_splits.tolist() == [0, 2, 2, 4]
    assert b.values.tolist() == [1, 2, 4, 5] and b.weights.tolist() == [1, 2, 4, 5]


@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list])
def test_empty_batches_round_trip(list_type):
    for ids in (pa.array([], type=list_type(pa.int64())), pa.chunked_array([], type=list_type(pa.int64()))):
        b = csr_from_arrow(ids, num_rows=0)
        assert b.num_rows == 0 and b.nnz == 0 and b.row_splits.tolist() == [0]
        assert csr_to_arrow(b)[0].to_pylist() == []


def test_weights_with_other_row_lengths_are_an_error_naming_the_row():
    ids = pa.array([[1, 2], [3], []], type=pa.list_(pa.int64()))
    weights = pa.array([[1.0, 2.0], [], [3.0]], type=pa.list_(pa.float32()))
    with pytest.raises(
        SparseValidationError, match=r"feature 'items': weights row lengths .* \(first at row 1\)"
    ):
        csr_from_arrow(ids, weights, feature="items")
    with pytest.raises(SparseValidationError, match=r"\(3 rows vs 2\)"):
        csr_from_arrow(ids, weights.slice(0, 2))


def test_float64_weights_become_float32():
    ids = pa.array([[1, 2]], type=pa.list_(pa.int64()))
    b = csr_from_arrow(ids, pa.array([[0.5, 2.0]], type=pa.list_(pa.float64())))
    assert b.weights.dtype == np.float32 and b.weights.tolist() == [0.5, 2.0]


def test_bad_inputs_are_named_errors():
    with pytest.raises(SparseValidationError, match="expected a list or large_list array, got int64"):
        csr_from_arrow(pa.array([1, 2]))
    with pytest.raises(SparseValidationError, match="ids must be int32 or int64, got float64"):
        csr_from_arrow(pa.array([[1.0]]))
    with pytest.raises(SparseValidationError, match="feature 'f': ids has a null at position 1"):
        csr_from_arrow(pa.array([[1, None]]), feature="f")
    with pytest.raises(SparseValidationError, match="num_rows=3 but the array has 1 rows"):
        csr_from_arrow(pa.array([[1]]), num_rows=3)
