"""ComputeVocabulary / ApplyVocabulary: counts, ordering, files Keras loads, identical indices."""

import collections
import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.beam import ApplyVocabulary, ComputeVocabulary, in_process_options
from transforms.beam.lookup import read_vocabulary

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def _expected_tokens(values, min_frequency=1, top_k=None):
    """Reference: count with Counter, order by (-count, value), drop what a vocab file cannot hold."""
    counts = collections.Counter(values)
    ranked = sorted(
        counts.items(), key=lambda kv: (-kv[1], kv[0].encode() if isinstance(kv[0], str) else kv[0])
    )
    tokens = [
        v
        for v, c in ranked
        if c >= min_frequency and not (isinstance(v, str) and (v == "" or "\n" in v or v.endswith("\r")))
    ]
    return tokens[:top_k] if top_k is not None else tokens


def _list_column(rows, value_type):
    return pa.array(rows, pa.list_(value_type))


def _random_batches(rng, num_batches=4):
    words = ["a", "b", "c", "dd", "é", "日本", "", "x\ny", "tail\r", "z"]
    batches = []
    for _ in range(num_batches):
        n = int(rng.integers(0, 40))
        genre = [
            None
            if rng.random() < 0.1
            else [words[int(w)] for w in rng.zipf(1.6, rng.integers(0, 4)) % len(words)]
            for _ in range(n)
        ]
        rating = [[int(v) for v in rng.integers(-3, 9, rng.integers(0, 3))] for _ in range(n)]
        batches.append(
            pa.record_batch(
                {"genre": _list_column(genre, pa.string()), "item": _list_column(rating, pa.int64())}
            )
        )
    return batches


def _keras_indices(out_dir, batches):
    """Reference: per row id, the Keras lookup layers' indices for each row's ids (files loaded by Keras)."""
    genre = keras.layers.StringLookup(vocabulary=os.path.join(out_dir, "genre.txt"), num_oov_indices=2)
    item = keras.layers.IntegerLookup(vocabulary=os.path.join(out_dir, "item.txt"), num_oov_indices=2)
    expected = []
    for batch in batches:
        for rid, g, i in zip(*(batch.column(c).to_pylist() for c in ("rid", "genre", "item"))):
            g_idx = None if g is None else [int(x) for x in np.asarray(genre(tf.constant(g, tf.string)))]
            i_idx = [int(x) for x in np.asarray(item(tf.constant(i, tf.int64)))] if i else []
            expected.append((rid, g_idx, i_idx))
    return expected


def test_vocabulary_pipeline_matches_counter_and_keras(tmp_path):
    rng = np.random.default_rng(11)
    batches = _random_batches(rng) + [_random_batches(rng, 1)[0].slice(0, 0)]  # and an empty batch
    start = 0
    for k, b in enumerate(batches):
        batches[k] = b.append_column("rid", pa.array(range(start, start + b.num_rows), pa.int64()))
        start += b.num_rows
    out_dir = str(tmp_path / "vocab")
    top_dir = str(tmp_path / "top")
    all_genre = [v for b in batches for row in b.column("genre").to_pylist() if row for v in row]
    all_item = [v for b in batches for row in b.column("item").to_pylist() if row for v in row]

    def matches_keras(actual):
        # Runs after ApplyVocabulary, so the vocabulary files exist by then.
        assert sorted(actual) == sorted(_keras_indices(out_dir, batches))

    with BeamPipeline(options=in_process_options()) as p:
        source = p | beam.Create(batches)
        vocab = source | "Full" >> ComputeVocabulary(["genre", "item"], out_dir, num_oov_buckets=2)
        source | "Top" >> ComputeVocabulary("genre", top_dir, min_frequency=2, top_k=2)
        indexed = source | ApplyVocabulary(vocab)
        assert_that(
            vocab | beam.Map(lambda v: (v.feature, v.size, v.num_oov_buckets, v.dtype)),
            equal_to(
                [
                    ("genre", len(_expected_tokens(all_genre)), 2, "string"),
                    ("item", len(_expected_tokens(all_item)), 2, "int64"),
                ]
            ),
            label="files",
        )
        rows = indexed | beam.FlatMap(
            lambda b: zip(*(b.column(c).to_pylist() for c in ("rid", "genre", "item")))
        )
        assert_that(rows, matches_keras, label="indices")
    assert read_vocabulary(os.path.join(out_dir, "genre.txt")) == _expected_tokens(all_genre)
    assert read_vocabulary(os.path.join(out_dir, "item.txt")) == [str(v) for v in _expected_tokens(all_item)]
    assert read_vocabulary(os.path.join(top_dir, "genre.txt")) == _expected_tokens(all_genre, 2, 2)


def test_bad_arguments_are_rejected_at_construction(tmp_path):
    with pytest.raises(ValueError, match="min_frequency"):
        ComputeVocabulary("f", str(tmp_path), min_frequency=0)
    with pytest.raises(ValueError, match="top_k"):
        ComputeVocabulary("f", str(tmp_path), top_k=0)
    with pytest.raises(ValueError, match="does not exist"):
        ApplyVocabulary({"f": str(tmp_path / "missing.txt")})
    with pytest.raises(ValueError, match="name the features"):
        ApplyVocabulary(str(tmp_path))
    with pytest.raises(ValueError, match="farmhash' only"):
        ApplyVocabulary({}, salt=5)


@pytest.mark.parametrize("name", ["../../x", "/abs/x", "sub/x"])
def test_a_feature_name_that_would_leave_the_output_is_refused_before_anything_is_written(tmp_path, name):
    out = tmp_path / "deep" / "out" / "vocab"
    with pytest.raises(ValueError, match="refusing"):
        ComputeVocabulary([name], str(out))
    with pytest.raises(ValueError, match="refusing"):
        ApplyVocabulary(str(out), features=[name])
    assert list(tmp_path.rglob("*")) == []
