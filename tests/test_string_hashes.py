"""sparse_io.string_hashes: full 64-bit Fingerprint64 and SipHash values equal TensorFlow's."""

import numpy as np
import pyarrow as pa
import pytest

from sparse_io import string_hashes
from sparse_io.string_hashes import fingerprint64, siphash24

tf = pytest.importorskip("tensorflow")

# 2**63 - 1 buckets keep 63 of the 64 bits, so any arithmetic slip shows.
BIG = 2**63 - 1


def _fast(strings):
    return tf.strings.to_hash_bucket_fast(strings, BIG).numpy()


def _strong(strings, key):
    return tf.strings.to_hash_bucket_strong(strings, BIG, key=list(key)).numpy()


def _all_lengths_strings() -> list[str]:
    """Every byte length 0..300 (each Fingerprint64 path, 1-4 rounds of its 64-byte loop), mixed scripts."""
    rng = np.random.default_rng(7)
    alphabet = ["a", "Z", "0", "é", "ß", "日", "本", "😀", "\x00", "\t"]
    out = []
    for length in range(301):
        chars, size = [], 0
        while size < length:
            c = alphabet[rng.integers(len(alphabet))]
            if size + len(c.encode()) > length:
                c = "x"
            chars.append(c)
            size += len(c.encode())
        out.append("".join(chars))
    return out


def test_full_64_bit_hashes_match_tensorflow_for_every_length_path():
    strings = _all_lengths_strings()
    assert [len(s.encode()) for s in strings] == list(range(301))
    array = pa.array(strings)
    np.testing.assert_array_equal(fingerprint64(array) % np.uint64(BIG), _fast(strings))
    for key in ((0, 0), (1, 2), (-1, 2**63 - 1)):
        np.testing.assert_array_equal(siphash24(array, key) % np.uint64(BIG), _strong(strings, key))


def test_equal_length_batches_take_the_strided_path_and_match():
    # All strings of one length are evenly spaced in the buffer: loads become strided views.
    rng = np.random.default_rng(3)
    for length in (0, 1, 3, 4, 7, 8, 12, 16, 17, 32, 33, 64, 65, 128, 129, 200):
        strings = ["".join(rng.choice(list("0123456789abcdef"), length)) for _ in range(20)]
        array = pa.array(strings).slice(3)  # a sliced array starts mid-buffer
        np.testing.assert_array_equal(fingerprint64(array) % np.uint64(BIG), _fast(strings[3:]))
        np.testing.assert_array_equal(
            siphash24(array, (9, -9)) % np.uint64(BIG), _strong(strings[3:], (9, -9))
        )


def test_batches_larger_than_one_chunk_and_mixed_lengths(monkeypatch):
    monkeypatch.setattr(string_hashes, "_CHUNK", 37)
    strings = _all_lengths_strings()[::-1] * 2
    array = pa.array(strings)
    np.testing.assert_array_equal(fingerprint64(array) % np.uint64(BIG), _fast(strings))
    np.testing.assert_array_equal(siphash24(array, (5, 5)) % np.uint64(BIG), _strong(strings, (5, 5)))


def test_remembered_fingerprints_name_one_array_only():
    from sparse_io.string_hashes import remembered_fingerprints

    values = pa.array([f"id{i:05d}" for i in range(1000)])
    assert remembered_fingerprints(values) is None
    computed = fingerprint64(values, remember=True)
    again = remembered_fingerprints(values)
    assert again is not None and np.array_equal(again, computed) and not again.flags.writeable
    # Same bytes elsewhere, or a slice of the same buffers: not the array remembered.
    assert remembered_fingerprints(pa.array(values.to_pylist())) is None
    assert remembered_fingerprints(values.slice(1)) is None
    assert np.array_equal(fingerprint64(values.slice(1)), computed[1:])
