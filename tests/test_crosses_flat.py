"""Crosses of flat (one value per row) columns with nulls, sliced and chunked, against keras `HashedCrossing`.

The flat inputs take a path of their own in `cross_arrow` (no product to enumerate; null slots are hashed
with the others, never crossed): each row's id must still be Keras' id of that row's raw values, and a row
missing any input must have none. The reference hashes only the rows where every input is present. Each
test runs the native chain (`native/crosses.cc`) and its numpy reference (`native=False`): the
`native_helpers` fixture.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparse_io.crosses import CrossOverflow, cross_arrow

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

RNG = np.random.default_rng(11)
N = 200
USERS = [None if RNG.random() < 0.2 else f"user{int(i)}" for i in RNG.integers(0, 50, N)]
ITEMS = [None if RNG.random() < 0.2 else int(i) for i in RNG.integers(-(2**40), 2**40, N)]
TAGS = [None if RNG.random() < 0.1 else t for t in RNG.choice(["", "x", "a" * 40, "é"], N)]


def _expected(num_bins, *columns):
    present = [i for i in range(N) if all(c[i] is not None for c in columns)]
    layer = keras.layers.HashedCrossing(num_bins=num_bins)
    inputs = tuple(tf.constant([c[i] for i in present], tf.int64 if isinstance(next(v for v in c if v is not None),
                                                                               int) else tf.string)
                   for c in columns)
    ids = dict(zip(present, np.asarray(layer(inputs)).tolist()))
    return [[ids[i]] if i in ids else [] for i in range(N)]


def _arrow(values):
    kind = pa.int64() if isinstance(next(v for v in values if v is not None), int) else pa.string()
    return pa.array(values, kind)


@pytest.mark.parametrize("num_bins", [1, 97, 2**20, 2**62 + 7])
def test_flat_columns_with_nulls_equal_keras_per_present_row(num_bins, native_helpers):
    for columns in ((USERS, ITEMS), (ITEMS, USERS), (USERS, TAGS, ITEMS)):
        ids, overflow = cross_arrow([_arrow(c) for c in columns], num_bins, native=native_helpers)
        assert ids.to_pylist() == _expected(num_bins, *columns)
        assert overflow == CrossOverflow(0, 0)


def test_sliced_and_chunked_flat_columns_read_their_own_rows(native_helpers):
    lo, hi = 37, 161
    users = _arrow(USERS).slice(lo, hi - lo)
    items = pa.chunked_array([_arrow(ITEMS[lo:100]), _arrow(ITEMS[100:hi])])
    ids, _ = cross_arrow([users, items], 1000, native=native_helpers)
    assert ids.to_pylist() == _expected(1000, USERS, ITEMS)[lo:hi]


def test_a_list_of_one_value_per_row_crosses_like_the_flat_column(native_helpers):
    as_lists = pa.array([None if u is None else [u] for u in USERS], pa.list_(pa.string()))
    flat, _ = cross_arrow([_arrow(USERS), _arrow(ITEMS)], 500, native=native_helpers)
    listed, _ = cross_arrow([as_lists, _arrow(ITEMS)], 500, native=native_helpers)
    assert listed.to_pylist() == flat.to_pylist() == _expected(500, USERS, ITEMS)


@pytest.mark.parametrize("num_bins", [0, -3, 2.5, True])
def test_a_bin_count_below_one_or_not_an_integer_is_refused(num_bins, native_helpers):
    with pytest.raises(ValueError, match="num_bins must be a positive integer"):
        cross_arrow([_arrow(USERS), _arrow(ITEMS)], num_bins, native=native_helpers)
