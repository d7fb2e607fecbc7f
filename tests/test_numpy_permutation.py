"""The op's shuffle (ops/native/numpy_permutation.h) against numpy's `default_rng(entropy).permutation(n)`.

The Python reader shuffles units and rows with numpy; the Arrow dataset op must give the very same
orders, so its permutation is numpy's, bit for bit, for the entropies the reader uses.
"""

import ctypes

import numpy as np
import pytest
from native_functions import native_function


@pytest.fixture(scope="module")
def permutation():
    function = native_function(
        "sparseflow_numpy_permutation", [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p], None
    )

    def call(entropy, n):
        words = np.array(entropy, np.uint64)
        out = np.full(n, -1, np.int64)
        function(words.ctypes.data, len(words), n, out.ctypes.data)
        return out

    return call


@pytest.mark.parametrize(
    "entropy, n",
    [
        ([0, 0], 1),
        ([5, 0], 10),
        ([4, 1], 2),
        ([123456789012345, 3], 37),  # a seed of two 32-bit words
        ([(1 << 63) - 25, 7, 12, 1], 20),  # a unit's rows: (seed, epoch, unit, 1)
        ([7, 1, 5, 1], 65_536),
        ([2, 9], 0),
    ],
)
def test_equals_numpys_permutation(permutation, entropy, n):
    np.testing.assert_array_equal(permutation(entropy, n), np.random.default_rng(entropy).permutation(n))


def test_an_entropy_of_more_words_than_the_pool_equals_numpys(permutation):
    # Six 32-bit words: the two past SeedSequence's pool of four are mixed in afterwards.
    entropy = [(1 << 62) + 12345, (1 << 40) + 7, 3, 1]
    np.testing.assert_array_equal(permutation(entropy, 1000), np.random.default_rng(entropy).permutation(1000))
