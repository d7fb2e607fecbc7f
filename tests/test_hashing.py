"""sparse_io.hashing must give exactly the buckets of keras.layers.Hashing / TF's hash ops."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparse_io import hashing
from sparse_io.hashing import fingerprint64, hash_ids_arrow, hash_strings, normalize_salt, siphash24

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

# Valid UTF-8 only: Arrow strings cannot hold lone surrogates.
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=90)
_SALTS = st.one_of(
    st.none(),
    st.integers(0, 2**63 - 1),
    st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)),
)


def _keras_buckets(values, num_bins, salt=None, mask_value=None) -> np.ndarray:
    layer = keras.layers.Hashing(num_bins=num_bins, salt=salt, mask_value=mask_value)
    return np.asarray(layer(tf.constant(values))).reshape(-1)


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
    # 2**63 - 1 buckets keep 63 of the 64 bits, so any arithmetic slip shows.
    big = 2**63 - 1
    np.testing.assert_array_equal(
        fingerprint64(array) % np.uint64(big), tf.strings.to_hash_bucket_fast(strings, big).numpy()
    )
    for key in ([0, 0], [1, 2], [-1, 2**63 - 1]):
        expected = tf.strings.to_hash_bucket_strong(strings, big, key=key).numpy()
        np.testing.assert_array_equal(siphash24(array, tuple(key)) % np.uint64(big), expected)


def test_equal_length_batches_take_the_strided_path_and_match():
    # All strings of one length are evenly spaced in the buffer: loads become strided views.
    rng = np.random.default_rng(3)
    for length in (0, 1, 3, 4, 7, 8, 12, 16, 17, 32, 33, 64, 65, 128, 129, 200):
        strings = ["".join(rng.choice(list("0123456789abcdef"), length)) for _ in range(20)]
        array = pa.array(strings).slice(3)  # a sliced array starts mid-buffer
        for salt in (None, (9, -9)):
            np.testing.assert_array_equal(
                hash_strings(array, 2**63 - 1, salt), _keras_buckets(strings[3:], 2**63 - 1, salt)
            )


@given(values=st.lists(_TEXT, min_size=1, max_size=40), num_bins=st.integers(1, 2**40), salt=_SALTS)
def test_string_buckets_equal_keras_hashing(values, num_bins, salt):
    ours = hash_strings(pa.array(values, pa.string()), num_bins, salt)
    np.testing.assert_array_equal(ours, _keras_buckets(values, num_bins, salt))


@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=40), salt=_SALTS)
def test_int64_ids_hash_like_keras_and_like_their_decimal_text(values, salt):
    ours = hash_strings(pa.array(values, pa.int64()), 1_000_003, salt)
    np.testing.assert_array_equal(ours, _keras_buckets(np.array(values, np.int64), 1_000_003, salt))
    as_text = hash_strings(pa.array([str(v) for v in values]), 1_000_003, salt)
    np.testing.assert_array_equal(ours, as_text)


def test_power_of_two_bins_mask_path_matches_modulo():
    values = [f"{i:08x}" for i in range(0, 5000, 7)]
    for bins in (1, 2, 1024, 2**40):
        np.testing.assert_array_equal(hash_strings(pa.array(values), bins), _keras_buckets(values, bins))


def test_mask_value_reserves_bucket_zero_like_keras():
    values = ["", "a", "b", "", "zzz"]
    ours = hash_strings(pa.array(values), 7, mask_value="")
    np.testing.assert_array_equal(ours, _keras_buckets(values, 7, mask_value=""))
    assert ours[0] == 0 and ours[3] == 0 and (ours[[1, 2, 4]] > 0).all()


def test_batches_larger_than_one_chunk_and_mixed_lengths(monkeypatch):
    monkeypatch.setattr(hashing, "_CHUNK", 37)
    strings = _all_lengths_strings()[::-1] * 2
    for salt in (None, 5):
        ours = hash_strings(pa.array(strings), 99_991, salt)
        np.testing.assert_array_equal(ours, _keras_buckets(strings, 99_991, salt))


def test_list_column_keeps_rows_null_rows_and_slicing():
    ids = pa.array([["a", "b"], [], None, ["c"], ["a", "d", "e"]], pa.list_(pa.string()))
    sliced = ids.slice(1, 4)
    out = hash_ids_arrow(sliced, 1000, feature="C1")
    assert out.type == pa.list_(pa.int64())
    rows = out.to_pylist()
    assert rows[0] == [] and rows[1] is None
    expected = _keras_buckets(["c", "a", "d", "e"], 1000)
    assert rows[2] == [expected[0]] and rows[3] == list(expected[1:])
    flat = hash_ids_arrow(pa.array(["c", "a"]), 1000)
    assert flat.to_pylist() == list(expected[:2])
    large = hash_ids_arrow(pa.array([["c"]], pa.large_list(pa.string())), 1000)
    assert large.type == pa.large_list(pa.int64()) and large.to_pylist() == [[expected[0]]]
    view = hash_strings(pa.array(["c", "a"], pa.string_view()), 1000)
    assert view.tolist() == list(expected[:2])
    chunked = hash_ids_arrow(pa.chunked_array([ids.slice(0, 2), ids.slice(2)]), 1000)
    assert chunked.to_pylist()[3] == [expected[0]]


def test_bad_inputs_name_feature_and_position():
    ids = pa.array([["a"], ["b", None]], pa.list_(pa.string()))
    with pytest.raises(ValueError, match=r"feature 'C7'.*null.*row 1"):
        hash_ids_arrow(ids, 10, feature="C7")
    with pytest.raises(ValueError, match="feature 'I1'.*strings or integers"):
        hash_strings(pa.array([1.5]), 10, feature="I1")
    with pytest.raises(ValueError, match="num_bins"):
        hash_strings(pa.array(["a"]), 0)
    with pytest.raises(ValueError, match="salt"):
        normalize_salt([1, 2, 3])
    with pytest.raises(ValueError, match="int64"):
        normalize_salt(2**64 - 1)
    assert normalize_salt(3) == (3, 3)
