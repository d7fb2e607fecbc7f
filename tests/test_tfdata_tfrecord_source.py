"""The graph-native TFRecord reader: contract Examples parsed exactly, bad records named, tf.data service."""

import math

import pytest
import tensorflow as tf
from oracles import assert_entries
from tfdata_data import SCHEMA, batch_rows, example_bytes, random_rows, reference_coo, write_tfrecord_shards

from transforms import make_dataset
from transforms.tfdata.core.columns import select_columns
from transforms.tfdata.tfrecord.source import parse_batch


def _parse(serialized):
    columns, label = select_columns(SCHEMA, None, None)
    return parse_batch(tf.constant(serialized), columns, label)


def test_examples_written_from_the_contract_parse_to_the_same_rows():
    rows = random_rows(30, seed=8)
    out = _parse([example_bytes(r) for r in rows])
    features = {k: v for k, v in out.items() if k != "label"}
    assert batch_rows(features, out["label"]) == rows
    assert math.isnan(float(out["price"].numpy()[[r["price"] is None for r in rows].index(True)]))


def _example(**features):
    def feature(value):
        if all(isinstance(v, int) for v in value):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=value))
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))

    return tf.train.Example(
        features=tf.train.Features(feature={k: feature(v) for k, v in features.items()})
    ).SerializeToString()


def test_weights_that_do_not_line_up_and_dense_lists_are_errors_naming_the_feature():
    good = dict(label=[0], price=[1.0], user=[3], items=[1, 2], items__weights=[0.5, 0.5])
    short = {**good, "items__weights": [0.5]}
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"feature 'items': check 'weights row lengths'"):
        _parse([_example(**good), _example(**short)])
    double = {**good, "price": [1.0, 2.0]}
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"feature 'price': check 'one value per row'"):
        _parse([_example(**double)])


def test_the_tfrecord_dataset_runs_inside_the_tf_data_service(tmp_path):
    rows = random_rows(60, seed=9)
    write_tfrecord_shards(str(tmp_path), rows, 2)
    dispatcher = tf.data.experimental.service.DispatchServer(tf.data.experimental.service.DispatcherConfig(port=0))
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1], port=0)
    )
    ds = make_dataset(str(tmp_path), 16, shuffle=True, seed=3, output="coo")
    distributed = ds.apply(
        tf.data.experimental.service.distribute(processing_mode="parallel_epochs", service=dispatcher.target)
    )
    labels = []
    for features, label in distributed:
        batch = [rows[int(y)] for y in label.numpy()]
        labels += label.numpy().tolist()
        assert features["items"].row_ids.dtype == tf.int32
        assert_entries(features["items"], reference_coo(batch, "items", weighted=True))
        assert_entries(features["user"], reference_coo(batch, "user", weighted=False))
    assert sorted(labels) == list(range(60))
    del worker


@pytest.mark.parametrize("global_seed", [0, 5])
def test_a_global_seed_neither_breaks_nor_changes_the_seeded_shuffle(tmp_path, global_seed):
    # keras.utils.set_random_seed(0) is common in training scripts; TensorFlow used to trip on it here.
    write_tfrecord_shards(str(tmp_path), random_rows(40, seed=2), 3)

    def order():
        ds = make_dataset(str(tmp_path), 8, shuffle=True, seed=11, num_epochs=2, output="coo", shuffle_buffer=16)
        return [int(v) for _, label in ds for v in label.numpy()]

    tf.random.set_seed(None)
    expected = order()
    try:
        tf.random.set_seed(global_seed)
        assert order() == expected
    finally:
        tf.random.set_seed(None)
    assert sorted(expected) == sorted(list(range(40)) * 2) and expected[:40] != expected[40:]
