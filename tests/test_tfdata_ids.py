"""hash_ids matches keras.layers.Hashing, lookup_ids matches StringLookup, truncate keeps the right ids."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.tfdata.ids import hash_ids, lookup_ids, truncate, vocabulary_table

WORDS = ["", "a", "05db9164", "ünïcödé", "日本語", "123", "-7", " spaced ", "x" * 300]


@pytest.mark.parametrize("salt", [None, 7, (133, 137)])
def test_hash_ids_gives_the_buckets_of_keras_hashing_on_strings(salt):
    rng = np.random.default_rng(1)
    words = WORDS + ["".join(chr(c) for c in rng.integers(32, 0x2FF, rng.integers(0, 12))) for _ in range(200)]
    ours = hash_ids(tf.constant(words), 1009, salt=salt).numpy()
    theirs = np.asarray(keras.layers.Hashing(num_bins=1009, salt=salt)(tf.constant(words)))
    np.testing.assert_array_equal(ours, theirs.reshape(ours.shape))


@settings(max_examples=20)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=30))
def test_hash_ids_hashes_integers_as_keras_does(values):
    ids = tf.constant(values, tf.int64)
    ours = hash_ids(ids, 97).numpy()
    theirs = np.asarray(keras.layers.Hashing(num_bins=97)(ids)).reshape(-1)
    np.testing.assert_array_equal(ours, theirs)


def test_hash_ids_keeps_ragged_and_sparse_structure():
    ragged = tf.ragged.constant([["a", "b"], [], ["c"]])
    out = hash_ids(ragged, 10)
    assert isinstance(out, tf.RaggedTensor)
    assert out.row_splits.numpy().tolist() == [0, 2, 2, 3]
    flat = keras.layers.Hashing(num_bins=10)(tf.constant(["a", "b", "c"]))
    assert out.flat_values.numpy().tolist() == np.asarray(flat).reshape(-1).tolist()
    sparse = hash_ids(ragged.to_sparse(), 10)
    assert isinstance(sparse, tf.SparseTensor)
    assert sparse.values.numpy().tolist() == out.flat_values.numpy().tolist()


def test_hash_ids_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_bins"):
        hash_ids(tf.constant(["a"]), 0)
    with pytest.raises(ValueError, match="salt"):
        hash_ids(tf.constant(["a"]), 3, salt="pepper")
    with pytest.raises(ValueError, match="strings or integers"):
        hash_ids(tf.constant([1.5]), 3)


@pytest.mark.parametrize("num_oov", [1, 3])
def test_lookup_ids_gives_the_indices_of_keras_string_lookup(tmp_path, num_oov):
    vocab = ["05db9164", "68fd1e64", "ünï", "z"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    queries = tf.constant(vocab + ["missing", "", "other", "z"])
    ours = lookup_ids(queries, vocabulary_table(str(path)), num_oov).numpy()
    theirs = np.asarray(keras.layers.StringLookup(vocabulary=str(path), num_oov_indices=num_oov)(queries))
    np.testing.assert_array_equal(ours, theirs)
    from_list = lookup_ids(queries, vocabulary_table(vocab), num_oov).numpy()
    np.testing.assert_array_equal(from_list, theirs)


def _truncate_reference(rows, n, keep):
    return [r[-n:] if keep == "last" else r[:n] for r in rows]


@settings(max_examples=25)
@given(
    rows=st.lists(st.lists(st.integers(0, 99), max_size=8), max_size=8),
    n=st.integers(1, 5),
    keep=st.sampled_from(["last", "first"]),
)
def test_truncate_keeps_the_last_or_first_ids_of_each_row(rows, n, keep):
    ragged = tf.RaggedTensor.from_row_lengths(
        tf.constant([v for r in rows for v in r], tf.int64), [len(r) for r in rows]
    )
    assert truncate(ragged, n, keep).to_list() == _truncate_reference(rows, n, keep)


def test_truncate_works_on_sparse_and_in_a_dataset_map():
    ragged = tf.ragged.constant([[1, 2, 3, 4], [5], []], dtype=tf.int64)
    sparse = truncate(ragged.to_sparse(), 2)
    assert tf.RaggedTensor.from_sparse(sparse).to_list() == [[3, 4], [5], []]
    ds = tf.data.Dataset.from_tensors(ragged).map(lambda r: truncate(r, 3, keep="first"))
    assert next(iter(ds)).to_list() == [[1, 2, 3], [5], []]
    with pytest.raises(ValueError, match="keep"):
        truncate(ragged, 2, keep="middle")
