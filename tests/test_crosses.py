"""CrossSpec: the Arrow ids against keras `HashedCrossing` and `tf.sparse.cross_hashed`; GraphCross against Arrow."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from sparse_io.crosses import CrossOverflow, CrossSpec, cross_arrow

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from transforms.tfdata.crosses import GraphCross  # noqa: E402


def _keras(num_bins, *columns):
    layer = keras.layers.HashedCrossing(num_bins=num_bins)
    return np.asarray(layer(tuple(tf.constant(c) for c in columns))).tolist()


RNG = np.random.default_rng(7)
STRINGS = np.array([f"u{i}" for i in RNG.integers(0, 10**6, 300)] + ["", "é", "a" * 70] * 2, dtype=object)
INTS = np.concatenate([RNG.integers(-(2**40), 2**40, len(STRINGS) - 4), [0, -1, 2**63 - 1, -(2**63)]])


@pytest.mark.parametrize("num_bins", [1, 7, 1000, 2**40])
def test_single_values_equal_keras_hashed_crossing(num_bins, native_helpers):
    ints2 = RNG.permutation(INTS)
    strings2 = RNG.permutation(STRINGS)
    for columns in ((STRINGS, INTS), (INTS, STRINGS), (INTS, ints2), (STRINGS, strings2), (STRINGS, INTS, ints2)):
        expected = _keras(num_bins, *[c.astype(str) if c.dtype == object else c for c in columns])
        arrays = [pa.array(c.tolist(), pa.string() if c.dtype == object else pa.int64()) for c in columns]
        ids, overflow = cross_arrow(arrays, num_bins, native=native_helpers)
        assert ids.to_pylist() == [[e] for e in expected]
        assert overflow == CrossOverflow(0, 0)


def test_int32_columns_cross_as_their_int64_values():
    small = pa.array([1, -2, 3], pa.int32())
    ids, _ = cross_arrow([small, pa.array(["x", "y", "z"])], 100)
    assert ids.to_pylist() == [[e] for e in _keras(100, np.array([1, -2, 3], np.int64), np.array(["x", "y", "z"]))]


def _reference_lists(rows_a, rows_b, num_bins, cap):
    """Per row: the product in tf.sparse.cross order, each pair hashed by tf.sparse.cross_hashed alone."""
    out = []
    for a, b in zip(rows_a, rows_b):
        pairs = list(itertools.product(a or [], b or []))[:cap]
        ids = []
        for x, y in pairs:
            one = tf.sparse.cross_hashed([tf.constant([[x]]), tf.constant([[y]], tf.int64)], num_buckets=num_bins)
            ids.append(int(one.values[0]))
        out.append(ids)
    return out


def test_list_columns_cross_as_the_cartesian_product_capped(native_helpers):
    rows_a = [["a", "b"], [], None, ["c"], ["d", "e", "f"]]
    rows_b = [[1, 2, 3], [4], [5], [], [6, 7]]
    ids, overflow = cross_arrow([pa.array(rows_a, pa.list_(pa.string())), pa.array(rows_b, pa.list_(pa.int64()))],
                                1000, max_per_row=4, native=native_helpers)
    assert ids.to_pylist() == _reference_lists(rows_a, rows_b, 1000, 4)
    # Row 0 has 6 crosses (2 dropped), row 4 has 6 (2 dropped).
    assert overflow == CrossOverflow(rows=2, dropped=4)


def test_a_list_crosses_a_single_value_per_row(native_helpers):
    ids, _ = cross_arrow([pa.array([["a", "b"], ["c"]]), pa.array([7, None], pa.int64())], 50,
                         native=native_helpers)
    assert ids.to_pylist() == _reference_lists([["a", "b"], ["c"]], [[7], []], 50, 10)


def test_refusals_name_the_column():
    with pytest.raises(ValueError, match="column 'price'.*strings and integers"):
        CrossSpec(("user", "price"), 10).apply_arrow([pa.array(["a"]), pa.array([1.5])], "x")
    with pytest.raises(ValueError, match="different row counts"):
        cross_arrow([pa.array(["a"]), pa.array([1, 2])], 10)
    with pytest.raises(ValueError, match="at least two"):
        CrossSpec(("user",), 10)
    with pytest.raises(ValueError, match="num_bins"):
        CrossSpec(("a", "b"), 0)


def test_graph_cross_equals_the_arrow_cross_on_the_same_values():
    spec = CrossSpec(("user", "occupation", "tags"), 997, max_per_row=3)
    users = ["u1", "", "u3", "u4", "u5"]  # "" is a missing cell at serving, a null at ingest
    occupations = [3, 4, None, -9, 12]
    tags = [["x", "y"], ["z"], ["q"], [], ["p", "r", "s", "t"]]
    arrow, overflow = spec.apply_arrow([
        pa.array([u or None for u in users]), pa.array(occupations, pa.int64()),
        pa.array(tags, pa.list_(pa.string()))])
    missing = np.iinfo(np.int64).min
    graph = GraphCross(spec)([tf.constant(users), tf.constant([missing if o is None else o for o in occupations],
                                                              tf.int64), tf.ragged.constant(tags)])
    assert graph.to_list() == arrow.to_pylist()
    assert [len(r) for r in arrow.to_pylist()] == [2, 0, 0, 0, 3]
    assert overflow == CrossOverflow(rows=1, dropped=1)


def test_spec_of_feature_reads_a_cross_and_a_shared_vocabulary(tmp_path):
    from sparse_io.id_maps import VocabularySpec, spec_of_feature
    from sparse_io.schema import FeatureSpec
    from transforms.tfdata.ids import GraphIdMap

    cross = FeatureSpec("x", "sparse", "int64", hash_buckets=64, cross=["u", "o"], cross_max_per_row=5)
    assert spec_of_feature(cross) == CrossSpec(("u", "o"), 64, 5)
    with pytest.raises(ValueError, match="one-column id spec"):
        GraphIdMap(spec_of_feature(cross))
    (tmp_path / "cate.txt").write_text("shoes\nhats\n")
    members = [FeatureSpec(n, "sparse", "int64", vocabulary_size=3, num_oov_buckets=1, shared_vocabulary="cate")
               for n in ("cate_id", "his_cate")]
    specs = [spec_of_feature(m, str(tmp_path)) for m in members]
    assert specs[0] == specs[1] == VocabularySpec(("shoes", "hats"), 1)
    values = [["hats", "bags"], [], ["shoes"]]
    arrow = specs[1].apply_arrow(pa.array(values, pa.list_(pa.string()))).to_pylist()
    assert arrow == [[2, 0], [], [1]] == GraphIdMap(specs[0])(tf.ragged.constant(values, tf.string)).to_list()


def test_make_log_dataset_crosses_raw_values_as_the_ingest(tmp_path):
    from sparse_io.schema import FeatureSpec, Schema
    from transforms.testing import ingest_in_memory
    from transforms.tfdata.log_dataset import make_log_dataset

    lines = ["clicked,user,occupation,tags", "1,u1,3,a|b|c", "0,u2,,b", "1,u1,7,", "0,u3,3,c|a"]
    log = tmp_path / "log.csv"
    log.write_text("\n".join(lines) + "\n")
    schema = Schema([FeatureSpec("clicked", "label", "int64"), FeatureSpec("user", "sparse", "string"),
                     FeatureSpec("occupation", "dense", "int64"), FeatureSpec("tags", "sparse", "string")])
    crosses = {"user_x_occ": CrossSpec(("user", "occupation"), 97),
               "user_x_tags": CrossSpec(("user", "tags"), 31, max_per_row=2)}
    (features, _), = make_log_dataset(str(log), "csv", 4, schema=schema, hash_bins={"user": 50, "tags": 50},
                                      crosses=crosses, output="ragged")
    config = {"input": {"format": "csv", "schema": [s.to_dict() for s in schema]},
              "features": {"user": {"hash_buckets": 50}, "tags": {"hash_buckets": 50},
                           "user_x_occ": {"cross": ["user", "occupation"], "hash_buckets": 97},
                           "user_x_tags": {"cross": ["user", "tags"], "hash_buckets": 31, "max_per_row": 2}},
              "output": {"num_shards": 1, "shuffle": False}}
    ingested = ingest_in_memory(lines, config)

    def keyed(rows):
        return sorted((r["user"], r["user_x_occ"], r["user_x_tags"]) for r in rows)

    graph = [{name: features[name][i].numpy().tolist() for name in ("user", "user_x_occ", "user_x_tags")}
             for i in range(4)]
    assert keyed(graph) == keyed(ingested.rows)
    assert [len(r["user_x_tags"]) for r in graph] == [2, 1, 0, 2] and graph[1]["user_x_occ"] == []
    with pytest.raises(ValueError, match="source 'nope'"):
        make_log_dataset(str(log), "csv", 4, schema=schema, hash_bins={"user": 5, "tags": 5},
                         crosses={"x": CrossSpec(("user", "nope"), 3)})
