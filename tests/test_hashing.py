"""sparse_io.hashing gives exactly the buckets of keras.layers.Hashing, column by column."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparse_io.hashing import hash_columns, hash_ids_arrow, hash_strings, normalize_salt

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


def test_hash_columns_equals_each_column_hashed_alone_and_names_a_bad_one():
    a = pa.array([["x", "yy"], None, []], pa.list_(pa.string()))
    b = pa.array([[5, -7], [2**40]], pa.list_(pa.int64()))
    c = pa.array(["x", "", "zz"])
    d = pa.array([["q"]], pa.list_(pa.string()))
    out = hash_columns([a, b, c, d], [10, 1 << 20, 7, 1000], salt=4, features=["a", "b", "c", "d"])
    for column, bins, got in zip([a, b, c, d], [10, 1 << 20, 7, 1000], out):
        assert got.equals(hash_ids_arrow(column, bins, 4))
    assert out[0].to_pylist()[0] == _keras_buckets(["x", "yy"], 10, 4).tolist()
    bad = pa.array([["x"], [None]], pa.list_(pa.string()))
    with pytest.raises(ValueError, match=r"feature 'e'.*row 1"):
        hash_columns([a, bad], [10, 10], features=["a", "e"])


def test_hash_columns_takes_remembered_fingerprints_and_gives_the_same_ids():
    from sparse_io.string_hashes import fingerprint64

    a = pa.array([f"a{i}" for i in range(500)])
    b = pa.array([[f"b{i}", f"c{i}"] for i in range(500)], pa.list_(pa.string()))
    expected = hash_columns([pa.array(a.to_pylist()), pa.array(b.to_pylist(), b.type)], [97, 1 << 20])
    fingerprint64(a, remember=True)  # as a cross of `a` does before HashIds
    fingerprint64(b.values, remember=True)
    got = hash_columns([a, b], [97, 1 << 20])
    assert [g.to_pylist() for g in got] == [e.to_pylist() for e in expected]
