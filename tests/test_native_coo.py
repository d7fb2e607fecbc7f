"""The native CSR-to-COO kernel of the columnar reader: its reference's entries, its room and offsets, the reader.

`numpy_coo.piece_coo` is its reference; both are checked against the plain oracle (tests/oracles.py, written
apart from both) in test_tfdata_numpy_coo.py.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.tfdata.columnar.numpy_coo import native_available, native_coo_into, piece_coo

pytestmark = pytest.mark.skipif(not native_available(np.dtype(np.int64)), reason="native kernels not built here")

rows_strategy = st.lists(st.lists(st.integers(0, 3), max_size=12), min_size=0, max_size=10)


def _native(rows, weights, combiner, dtype=np.int64, row_offset=0):
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    ids = np.array([v for r in rows for v in r], dtype=dtype)
    room = len(ids) + 3  # more room than needed: only the first `count` entries are written
    out = np.full(room, -7, np.int32), np.full(room, -7, dtype), np.full(room, -7.0, np.float32)
    count = native_coo_into(lengths, ids, weights, combiner, *out, row_offset=row_offset)
    assert (out[0][count:] == -7).all() and (out[2][count:] == -7.0).all()
    return out[0][:count], out[1][:count], out[2][:count]


@settings(max_examples=40)
@given(rows=rows_strategy, combiner=st.sampled_from(["sum", "mean", "sqrtn"]), data=st.data())
def test_the_kernel_gives_its_references_entries(rows, combiner, data):
    # The rule itself is checked against the oracle in test_tfdata_numpy_coo.py, for both implementations.
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    ids = np.array([v for r in rows for v in r], dtype=np.int64)
    weights = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 2.0, -1.5]), min_size=len(ids),
                                          max_size=len(ids))), np.float32)
    got = _native(rows, weights, combiner)
    ref_rows, ref_ids, starts, ref_gains = piece_coo(lengths, ids, weights, combiner)
    np.testing.assert_array_equal(got[0], ref_rows)
    np.testing.assert_array_equal(got[1], ref_ids if starts is None else ref_ids[starts])
    np.testing.assert_allclose(got[2], ref_gains, rtol=2e-6, atol=1e-7)


def test_a_hand_worked_batch_with_merges_an_empty_row_and_a_row_offset():
    # Rows [7, 7, 2], [], [5]; weights 1, 3, 4 | - | 2; mean: row 0 sums to 8, row 2 to 2; rows shifted by 10.
    rows, cols, gains = _native([[7, 7, 2], [], [5]], np.array([1.0, 3.0, 4.0, 2.0], np.float32), "mean",
                                row_offset=10)
    assert rows.tolist() == [10, 10, 12] and cols.tolist() == [7, 2, 5]
    np.testing.assert_allclose(gains, [0.5, 0.5, 1.0])


def test_int32_ids_and_inputs_the_kernel_must_not_read_past():
    rows, cols, gains = _native([[3, 3, 1]], 2.0, "sum", dtype=np.int32)
    assert cols.dtype == np.int32 and cols.tolist() == [3, 1] and gains.tolist() == [4.0, 2.0]
    small = np.empty(2, np.int32), np.empty(2, np.int64), np.empty(2, np.float32)
    with pytest.raises(ValueError, match="room for 3 entries"):
        native_coo_into(np.array([3]), np.array([1, 2, 3]), 1.0, "sum", *small)
    room = np.empty(9, np.int32), np.empty(9, np.int64), np.empty(9, np.float32)
    with pytest.raises(ValueError, match="do not cover 3 ids"):
        native_coo_into(np.array([4]), np.array([1, 2, 3]), 1.0, "sum", *room)
    with pytest.raises(ValueError, match="negative row lengths"):
        native_coo_into(np.array([5, -2]), np.array([1, 2, 3]), 1.0, "sum", *room)
    with pytest.raises(ValueError, match="2 weights for 3 ids"):
        native_coo_into(np.array([3]), np.array([1, 2, 3]), np.ones(2, np.float32), "sum", *room)
    with pytest.raises(ValueError, match="rows reach outside the 3 ids"):
        native_coo_into(np.array([2]), np.array([1, 2, 3]), 1.0, "sum", *room, starts=np.array([2]))
    with pytest.raises(ValueError, match="rows reach outside the 3 ids"):
        native_coo_into(np.array([1]), np.array([1, 2, 3]), 1.0, "sum", *room, starts=np.array([-1]))


@settings(max_examples=30)
@given(rows=rows_strategy, combiner=st.sampled_from(["sum", "mean", "sqrtn"]), data=st.data())
def test_rows_read_where_they_lie_equal_the_same_rows_gathered_first(rows, combiner, data):
    # Shuffled batches pass each row's start in the unit instead of a gathered copy of the rows.
    order = data.draw(st.permutations(range(len(rows))))
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = np.array([v for r in rows for v in r], dtype=np.int64)
    weights = np.arange(1, len(ids) + 1, dtype=np.float32) / 4
    picked = np.array(order, dtype=np.int64)
    room = int(lengths.sum())
    out = np.empty(room, np.int32), np.empty(room, np.int64), np.empty(room, np.float32)
    count = native_coo_into(lengths[picked], ids, weights, combiner, *out, row_offset=3, starts=splits[picked])
    gathered = [rows[k] for k in order]
    flat = np.concatenate([weights[splits[k]:splits[k + 1]] for k in order]) if order else weights[:0]
    expected = _native(gathered, flat.astype(np.float32), combiner, row_offset=3)
    for got, want in zip((a[:count] for a in out), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_reader_gives_the_same_coo_batches_with_and_without_the_native_kernel(tmp_path, monkeypatch):
    from tfdata_data import SCHEMA, random_rows, write_parquet_shards

    from transforms.tfdata.columnar import coo_assembly
    from transforms.tfdata.columnar.reader import ColumnarSource
    from transforms.tfdata.core.columns import select_columns

    paths = write_parquet_shards(str(tmp_path), random_rows(90, seed=4), 2, row_group_size=16)
    columns, label = select_columns(SCHEMA, None, None)
    combiners = {c.name: "mean" for c in columns if c.is_sparse}

    def batches():
        source = ColumnarSource(paths, columns, label, 20, shuffle=True, seed=3, num_shards=1, index=0,
                                drop_remainder=False, coo=combiners)
        return [source.read(i) for i in range(source.num_batches(2))]

    native = batches()
    monkeypatch.setattr(coo_assembly, "native_available", lambda dtype: False)
    reference = batches()
    assert len(native) == len(reference) > 0
    for a, b in zip(native, reference, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_allclose(x, y, rtol=2e-6, atol=1e-7)
