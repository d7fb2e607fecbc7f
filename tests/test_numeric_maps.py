"""Bucketize and scale specs: the Arrow side (ingest) and the graph side (serving, make_log_dataset) agree.

References are independent of the code under test: `keras.layers.Discretization` for bucket ids, numpy
(`np.mean`, `np.std(ddof=0)`, min/max, `np.log1p`) for the scaled values, worked out here.
"""

import json

import keras
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from sparse_io.numeric_maps import BucketizeSpec, DerivedFeature, ScaleSpec, derived_of_feature
from sparse_io.schema import FeatureSpec, Schema, SchemaError
from transforms.tfdata.numeric import GraphNumericMap

BOUNDARIES = (18.0, 25.0, 35.0, 50.0)
# Values on, just below and above every boundary, negatives, and integers float32 cannot hold exactly.
INTS = [17, 18, 19, 24, 25, 34, 35, 49, 50, 51, -5, 0, 2**24 + 1, 2**40, None, 30]
FLOATS = [17.999, 18.0, 18.0001, 24.99999, 25.0, 35.0, 49.9, 50.0, 1e30, -1e30, None, float("nan"), 0.5, -0.0]


def _graph(spec, values, dtype):
    present = [v is not None and not (isinstance(v, float) and np.isnan(v)) for v in values]
    filled = tf.constant([0 if v is None else v for v in values], dtype)
    return GraphNumericMap(spec)(filled, tf.constant([not p for p in present])), present


@pytest.mark.parametrize("boundaries", [BOUNDARIES, (0.1, 0.2, 0.7), (-3.5,), (16777216.0, 16777218.0)])
@pytest.mark.parametrize("values,arrow_type,tf_dtype", [
    (INTS, pa.int64(), tf.int64),
    (FLOATS, pa.float32(), tf.float32),
    (FLOATS, pa.float64(), tf.float64),
    ([v for v in INTS if v is None or abs(v) < 2**31], pa.int32(), tf.int32),
], ids=["int64", "float32", "float64", "int32"])
def test_bucketize_arrow_and_graph_equal_keras_discretization(boundaries, values, arrow_type, tf_dtype):
    spec = BucketizeSpec(boundaries)
    arrow = spec.apply_arrow(pa.array(values, arrow_type)).to_pylist()
    graph, present = _graph(spec, values, tf_dtype)
    layer = keras.layers.Discretization(bin_boundaries=list(boundaries))
    kept = [v for v, p in zip(values, present) if p]
    reference = layer(tf.constant(kept, tf_dtype)).numpy().tolist()
    expected, it = [], iter(reference)
    for p in present:
        expected.append([next(it)] if p else [])  # a missing value: no id (an empty row)
    assert arrow == graph.to_list() == expected


def test_bucketize_ids_worked_out_by_hand():
    spec = BucketizeSpec(BOUNDARIES)
    out = spec.apply_arrow(pa.array([None, 17, 18, 25, 49.5, 50, 99], pa.float64())).to_pylist()
    assert out == [[], [0], [1], [2], [3], [4], [4]]
    assert spec.id_range == 5


@pytest.mark.parametrize("bad", [(3.0, 2.0), (1.0, 1.0), (1.0, float("nan")), (16777216.0, 16777217.0)])
def test_bucketize_refuses_boundaries_not_strictly_increasing_as_float32(bad):
    with pytest.raises(ValueError, match="boundaries"):
        BucketizeSpec(bad)


SOURCE = np.array([3.5, -2.0, 0.0, 10.25, 7.0, 7.0, 1e-3, 42.0, -0.75], np.float64)


def _scaled(spec, values, arrow_type, tf_dtype):
    column = pa.array(list(values) + [None], arrow_type)
    arrow = spec.apply_arrow(column).to_numpy(zero_copy_only=False)
    graph = GraphNumericMap(spec)(tf.constant(list(values) + [0], tf_dtype),
                                  tf.constant([False] * len(values) + [True])).numpy()
    return arrow, graph


def _same_float32(a, b):
    assert a.dtype == b.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_array_equal(a[~np.isnan(a)], b[~np.isnan(b)])  # bit for bit, not within a tolerance


@pytest.mark.parametrize("arrow_type,tf_dtype", [(pa.float64(), tf.float64), (pa.float32(), tf.float32)])
def test_z_score_is_population_std_and_both_sides_agree(arrow_type, tf_dtype):
    x = SOURCE.astype(np.float64 if arrow_type == pa.float64() else np.float32)
    mean, std = float(np.mean(x.astype(np.float64))), float(np.std(x.astype(np.float64), ddof=0))
    spec = ScaleSpec("z_score", mean=mean, std=std)
    arrow, graph = _scaled(spec, x, arrow_type, tf_dtype)
    _same_float32(arrow, graph)
    np.testing.assert_allclose(arrow[:-1], ((x - mean) / std).astype(np.float32), rtol=1e-6)
    assert np.isnan(arrow[-1])  # a missing value stays missing


def test_min_max_and_log1p_against_numpy():
    low, high = float(SOURCE.min()), float(SOURCE.max())
    arrow, graph = _scaled(ScaleSpec("min_max", low=low, high=high), SOURCE, pa.float64(), tf.float64)
    _same_float32(arrow, graph)
    np.testing.assert_allclose(arrow[:-1], (SOURCE - low) / (high - low), rtol=1e-6)
    assert arrow[:-1].min() == 0.0 and arrow[:-1].max() == 1.0
    arrow, graph = _scaled(ScaleSpec("log1p"), SOURCE, pa.float64(), tf.float64)
    _same_float32(arrow, graph)
    defined = SOURCE > -1
    np.testing.assert_allclose(arrow[:-1][defined], np.log1p(SOURCE[defined]), rtol=1e-6)
    assert np.isnan(arrow[:-1][~defined]).all()  # -2.0 has no log1p: missing, never -inf or a number


def test_log1p_of_minus_one_or_less_is_null_in_arrow():
    out = ScaleSpec("log1p").apply_arrow(pa.array([-1.0, -3.0, 0.0, None])).to_pylist()
    assert out == [None, None, 0.0, None]


def test_degenerate_parameters_follow_tf_transform():
    # std 0: scale_to_z_score returns x - mean; max == min: scale_to_0_1 returns sigmoid(x).
    arrow, graph = _scaled(ScaleSpec("z_score", mean=2.0, std=0.0), np.array([2.0, 5.0]), pa.float64(), tf.float64)
    _same_float32(arrow, graph)
    assert arrow[:2].tolist() == [0.0, 3.0]
    arrow, graph = _scaled(ScaleSpec("min_max", low=4.0, high=4.0), np.array([0.0, 4.0]), pa.float64(), tf.float64)
    _same_float32(arrow, graph)
    np.testing.assert_allclose(arrow[:2], [0.5, 1 / (1 + np.exp(-4.0))], rtol=1e-6)


def test_int64_source_scaled_in_float64():
    x = np.array([2**40, -7, 0], np.int64)
    spec = ScaleSpec("z_score", mean=1.5, std=3.0)
    arrow, graph = _scaled(spec, x, pa.int64(), tf.int64)
    _same_float32(arrow, graph)
    assert arrow[:3].tolist() == [np.float32((2**40 - 1.5) / 3.0), np.float32(-8.5 / 3.0), np.float32(-0.5)]


@pytest.mark.parametrize("feature", [
    DerivedFeature("age_bucket", "age", BucketizeSpec(BOUNDARIES)),
    DerivedFeature("ts_q", "ts", BucketizeSpec((1.5, 2.5)), quantiles=3),
    DerivedFeature("price_z", "price", ScaleSpec("z_score", mean=1.25, std=0.5)),
    DerivedFeature("price_mm", "price", ScaleSpec("min_max", low=-1.0, high=3.0)),
    DerivedFeature("price_log", "price", ScaleSpec("log1p")),
], ids=lambda f: f.name)
def test_schema_json_round_trip(feature):
    text = Schema([feature.feature_spec()]).to_json()
    back = Schema.from_json(json.loads(json.dumps(text)))[feature.name]
    assert derived_of_feature(back) == feature


def test_malformed_transform_names_the_feature():
    with pytest.raises(SchemaError, match="'f'.*transform"):
        derived_of_feature(FeatureSpec("f", transform={"source": "x", "scale": "z_score"}))  # no mean, no std
    with pytest.raises(SchemaError, match="transform must be an object"):
        FeatureSpec("f", transform=["x"])


def test_eval_data_scaled_with_other_parameters_is_a_mismatch():
    from sparse_io.id_space import IdSpaceMismatch, check_same_id_spaces

    train = Schema([DerivedFeature("price_z", "price", ScaleSpec("z_score", mean=1.0, std=2.0)).feature_spec(),
                    DerivedFeature("age_b", "age", BucketizeSpec((18.0, 25.0))).feature_spec()])
    check_same_id_spaces(train, train)
    rescaled = train.replace("price_z", transform={"source": "price", "scale": "z_score", "mean": 1.5, "std": 2.0})
    with pytest.raises(IdSpaceMismatch, match="'price_z'.*scales it otherwise"):
        check_same_id_spaces(train, rescaled, other_name="--eval_data x")
    rebucketed = train.replace("age_b", **DerivedFeature("age_b", "age", BucketizeSpec((18.0, 30.0))).schema_fields())
    with pytest.raises(IdSpaceMismatch, match="'age_b'"):
        check_same_id_spaces(train, rebucketed)
