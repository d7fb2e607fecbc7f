"""A columnar batch crosses into the graph as one buffer and a header (`columnar_dataset._pack`/`_unpack`)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from transforms.tfdata.columnar.batch_arrays import Arena
from transforms.tfdata.columnar.source import _pack, _unpack

DTYPES = [np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)]


def _round_trip(arrays, rows=7, position=(1, 2, 3, 4)):
    flat = [*arrays, np.array([rows], np.int64), np.array(position, np.int64)]
    buffer, header = _pack(flat)
    offsets, counts = header[5::2], header[6::2]
    assert (offsets >= 0).all() and (offsets % 64 == 0).all() and counts.tolist() == [a.size for a in arrays]
    assert all(o + n * a.itemsize <= len(buffer) for o, n, a in zip(offsets, counts, arrays))
    out = _unpack(tf.constant(buffer), tf.constant(header), [tf.as_dtype(a.dtype) for a in arrays])
    for got, want in zip(out, arrays):
        assert got.dtype == tf.as_dtype(want.dtype)
        np.testing.assert_array_equal(got.numpy(), want)
    assert out[-2].numpy().tolist() == [rows] and out[-1].numpy().tolist() == list(position)
    return buffer


@pytest.mark.parametrize("sizes", [[3, 5, 0, 9, 1], [0, 0, 0, 0, 0], [64, 0, 17, 0, 2]])
def test_arena_arrays_cross_as_the_arena_itself(sizes):
    rng = np.random.default_rng(sum(sizes))
    # Several arenas: their aligned start lies at different distances from the allocation's, and an
    # empty array may point at the allocation's start, before the buffer.
    for _ in range(16):
        arrays = Arena([(n, d) for n, d in zip(sizes, DTYPES)]).arrays
        for a in arrays:
            a[:] = rng.integers(-100, 100, len(a))
        buffer = _round_trip(arrays)
        assert all(np.shares_memory(buffer, a) for a in arrays if a.size)  # no copy on the reader's side


def test_arrays_of_no_single_arena_are_copied_into_one():
    rng = np.random.default_rng(3)
    arrays = [rng.integers(0, 9, n).astype(d) for n, d in zip([4, 6, 1, 0, 8], DTYPES)]
    arrays[1] = np.arange(13, dtype=np.int64)[1:7]  # an unaligned view
    buffer = _round_trip(arrays)
    assert not any(np.shares_memory(buffer, a) for a in arrays)
