"""One definition of how a raw value becomes an id: each spec's Arrow and graph implementations agree.

`sparse_io.id_maps` specs are applied by the Beam ingest through Arrow (`apply_arrow`) and by
`make_log_dataset` and the serving signature through TensorFlow (`GraphIdMap`). Both are checked here on the
same values (empty strings, unicode, negative and extreme integers, unknown values, null rows) against Keras's
own layers, the reference every implementation promises to equal.
"""

import keras
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from sparse_io.id_maps import HashSpec, VocabularySpec, spec_of_feature
from sparse_io.schema import FeatureSpec, SchemaError
from transforms.tfdata.ids import GraphIdMap

STRINGS = [["a", "", "é", "日本語", "🙂"], [], None, ["x" * 300, "a", "OOV-token", "zz"], ["Z", "b"]]
INTS = [[0, -1, 7, 2**63 - 1], None, [-(2**63), 123456789012, 5], [], [42, -42, 3]]
VOCAB_STRINGS = ("b", "a", "é", "", "日本語")  # "" is a token here: an empty string is still a value
VOCAB_INTS = ("7", "-1", "42", str(2**63 - 1))


def _flat(rows):
    return [v for r in rows if r is not None for v in r]


def _graph(spec, rows, dtype):
    ragged = tf.ragged.constant([r or [] for r in rows], dtype=dtype, row_splits_dtype=tf.int64)
    return GraphIdMap(spec)(ragged).to_list()


def _arrow(spec, rows, arrow_type):
    out = spec.apply_arrow(pa.array(rows, pa.list_(arrow_type)), "f").to_pylist()
    return [r or [] for r in out], [r is None for r in out]


def _keras(layer, rows):
    flat = _flat(rows)
    ids = layer(tf.constant(flat)).numpy().tolist() if flat else []
    out, i = [], 0
    for r in rows:
        n = len(r or [])
        out.append(ids[i:i + n])
        i += n
    return out


HASHES = [HashSpec(10), HashSpec(1 << 20), HashSpec(1000, salt=7), HashSpec(97, salt=(3, 2**62)),
          HashSpec(50, mask_value="a"), HashSpec(1)]


@pytest.mark.parametrize("spec", HASHES, ids=repr)
def test_hash_spec_arrow_and_graph_equal_keras_hashing_on_strings(spec):
    reference = _keras(keras.layers.Hashing(spec.num_bins, mask_value=spec.mask_value,
                                            salt=list(spec.salt) if spec.salt else None), STRINGS)
    arrow, null_rows = _arrow(spec, STRINGS, pa.string())
    assert null_rows == [r is None for r in STRINGS]  # a null row stays null (no ids), never an error
    assert arrow == _graph(spec, STRINGS, tf.string) == reference


@pytest.mark.parametrize("spec", [s for s in HASHES if s.mask_value is None], ids=repr)
def test_hash_spec_arrow_and_graph_equal_keras_hashing_on_integers(spec):
    reference = _keras(keras.layers.Hashing(spec.num_bins, salt=list(spec.salt) if spec.salt else None), INTS)
    arrow, _ = _arrow(spec, INTS, pa.int64())
    assert arrow == _graph(spec, INTS, tf.int64) == reference


@pytest.mark.parametrize("k, method, salt", [(1, "floormod", None), (3, "farmhash", None), (4, "farmhash", 11)])
def test_vocabulary_spec_arrow_and_graph_equal_keras_string_lookup(k, method, salt):
    spec = VocabularySpec(VOCAB_STRINGS, k, oov_method=method, salt=salt)
    layer = keras.layers.StringLookup(vocabulary=list(VOCAB_STRINGS), num_oov_indices=k, mask_token=None,
                                      salt=salt)
    arrow, _ = _arrow(spec, STRINGS, pa.string())
    assert arrow == _graph(spec, STRINGS, tf.string) == _keras(layer, STRINGS)
    assert arrow[0][0] == k + 1 and arrow[0][1] == k + 3  # "a" is line 1, "" line 3: worked out by hand


@pytest.mark.parametrize("k, method", [(1, "floormod"), (3, "floormod"), (5, "farmhash")])
def test_vocabulary_spec_on_integer_ids_matches_keras_integer_lookup_rules(k, method):
    spec = VocabularySpec(VOCAB_INTS, k, oov_method=method)
    arrow, _ = _arrow(spec, INTS, pa.int64())
    assert arrow == _graph(spec, INTS, tf.int64)
    if method == "floormod":  # IntegerLookup's own OOV rule
        layer = keras.layers.IntegerLookup(vocabulary=[int(t) for t in VOCAB_INTS], num_oov_indices=k,
                                           mask_token=None)
        assert arrow == _keras(layer, INTS)
    # By hand: 7 is line 0, -1 line 1, 42 line 2, int64 max line 3; -42 is unknown.
    assert arrow[0][1:] == [k + 1, k + 0, k + 3] and arrow[4][0] == k + 2
    assert arrow[4][1] == ((-42) % k if method == "floormod" else arrow[4][1])


def test_an_empty_vocabulary_maps_every_value_to_its_oov_bucket_on_both_sides():
    spec = VocabularySpec((), 3, oov_method="farmhash")
    arrow, _ = _arrow(spec, STRINGS, pa.string())
    assert arrow == _graph(spec, STRINGS, tf.string)
    assert arrow == _keras(keras.layers.Hashing(3), STRINGS)  # Keras's OOV rule: the FarmHash bucket


def test_a_null_id_inside_a_row_is_refused_by_the_arrow_side_naming_the_feature():
    with pytest.raises(ValueError, match=r"feature 'f'.*null.*row 1"):
        HashSpec(10).apply_arrow(pa.array([["a"], ["b", None]], pa.list_(pa.string())), "f")
    with pytest.raises(ValueError, match=r"feature 'f'.*null"):
        VocabularySpec(("a",)).apply_arrow(pa.array([["a"], ["b", None]], pa.list_(pa.string())), "f")


def test_specs_refuse_bad_settings():
    with pytest.raises(ValueError, match="num_bins"):
        HashSpec(0)
    with pytest.raises(ValueError, match="salt"):
        HashSpec(5, salt="x")
    with pytest.raises(ValueError, match="oov_method"):
        VocabularySpec(("a",), 2, oov_method="modulo")
    with pytest.raises(ValueError, match="OOV"):
        GraphIdMap(VocabularySpec(("a",), 0))


def test_the_spec_of_a_feature_is_what_schema_json_records(tmp_path):
    (tmp_path / "tags.txt").write_text("b\na\r\n")
    assert spec_of_feature(FeatureSpec("u", hash_buckets=8, salt=3)) == HashSpec(8, (3, 3))
    tags = spec_of_feature(FeatureSpec("tags", num_oov_buckets=2, vocabulary_size=4), str(tmp_path))
    assert tags == VocabularySpec(("b", "a"), 2, oov_method="floormod")
    assert spec_of_feature(FeatureSpec("n")) is None
    with pytest.raises(SchemaError, match="vocabulary_size says 5"):
        spec_of_feature(FeatureSpec("tags", num_oov_buckets=2, vocabulary_size=5), str(tmp_path))
    with pytest.raises(SchemaError, match="missing"):
        spec_of_feature(FeatureSpec("other", num_oov_buckets=1), str(tmp_path))


def test_the_graph_map_is_carried_by_a_saved_model(tmp_path):
    module = tf.Module()
    module.ids = GraphIdMap(VocabularySpec(("x", "y"), 2))
    module.f = tf.function(lambda v: module.ids(v), input_signature=[tf.TensorSpec([None], tf.string)])
    tf.saved_model.save(module, str(tmp_path / "m"))
    loaded = tf.saved_model.load(str(tmp_path / "m"))
    values = ["y", "q", "x"]
    expected = VocabularySpec(("x", "y"), 2).apply_arrow(pa.array(values)).to_pylist()
    assert loaded.f(tf.constant(values)).numpy().tolist() == expected
    assert np.array(expected)[[0, 2]].tolist() == [3, 2]


def test_make_log_dataset_gives_integer_ids_the_ingests_vocabulary_ids_unknown_ones_included(tmp_path):
    from sparse_io.schema import Schema
    from transforms.tfdata.log_dataset import make_log_dataset

    (tmp_path / "vocab.txt").write_text("42\n7\n")
    (tmp_path / "log.csv").write_text("clicked,item\n1,7|42|5\n0,9000000000001|42\n1,\n")
    schema = Schema([FeatureSpec("clicked", "label"), FeatureSpec("item", "sparse", "int64")])
    (features, _), = make_log_dataset(str(tmp_path / "log.csv"), "csv", 8, schema=schema, output="ragged",
                                      vocabularies={"item": str(tmp_path / "vocab.txt")}, num_oov_indices=3)
    spec = VocabularySpec(("42", "7"), 3)
    arrow = spec.apply_arrow(pa.array([[7, 42, 5], [9000000000001, 42], []], pa.list_(pa.int64()))).to_pylist()
    assert features["item"].to_list() == arrow == [[4, 3, 5 % 3], [9000000000001 % 3, 3], []]


def test_the_docstring_examples_run():
    import doctest

    import sparse_io.id_maps

    assert doctest.testmod(sparse_io.id_maps, extraglobs={"pa": pa}).failed == 0
