"""VocabularyLookup / read_vocabulary: indices identical to Keras's lookup layers on the same file."""

import numpy as np
import pyarrow as pa
import pytest

from transforms.beam.lookup import VocabularyLookup, read_vocabulary

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def test_lookup_indices_equal_keras_string_and_integer_lookup(tmp_path):
    tokens = ["b", "a", "日本", "c "]
    path = tmp_path / "v.txt"
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    probe = ["a", "zz", "日本", "c ", "c", "b", "q", "", "a"]
    for oov in (1, 2, 5):
        ours = VocabularyLookup(read_vocabulary(str(path)), oov)(pa.array(probe), "f")
        layer = keras.layers.StringLookup(vocabulary=str(path), num_oov_indices=oov)
        np.testing.assert_array_equal(ours, np.asarray(layer(tf.constant(probe))))
    salted = VocabularyLookup(read_vocabulary(str(path)), 3, oov_method="farmhash", salt=(7, 8))
    layer = keras.layers.StringLookup(
        vocabulary=str(path), num_oov_indices=3, oov_method="farmhash", salt=[7, 8]
    )
    np.testing.assert_array_equal(salted(pa.array(probe), "f"), np.asarray(layer(tf.constant(probe))))
    ints = tmp_path / "i.txt"
    ints.write_text("7\n-3\n100\n")
    probe = np.array([7, 8, -3, -9, 100, 0, 12345], np.int64)
    for oov in (1, 3):
        for method in ("floormod", "farmhash"):
            lookup = VocabularyLookup(read_vocabulary(str(ints)), oov, oov_method=method)
            layer = keras.layers.IntegerLookup(vocabulary=str(ints), num_oov_indices=oov, oov_method=method)
            np.testing.assert_array_equal(lookup(pa.array(probe), "f"), np.asarray(layer(tf.constant(probe))))


def test_lookup_rejects_oov_without_buckets_and_repeated_tokens():
    with pytest.raises(ValueError, match=r"feature 'g'.*'q'.*position 1.*num_oov_buckets is 0"):
        VocabularyLookup(["a"], 0)(pa.array(["a", "q"]), "g")
    with pytest.raises(ValueError, match="appears twice"):
        VocabularyLookup(["a", "b", "a"], 1, feature="g")(pa.array(["a"]), "g")


def test_salt_needs_the_farmhash_oov_method_as_in_keras():
    with pytest.raises(ValueError, match="farmhash' only"):
        VocabularyLookup(["a"], 2, salt=5)
    with pytest.raises(ValueError, match="oov_method"):
        VocabularyLookup(["a"], 2, oov_method="crc")
