"""ops.Coo: the one COO batch type; a COO batch carries its sample count, so no embedding bag returns [B + 1, dim]."""

import numpy as np
import oracles
import pytest
import tensorflow as tf
from tfdata_data import random_rows, reference_coo, write_parquet_shards, write_tfrecord_shards

import ops
import transforms
from ops.layers import EmbeddingBag
from transforms import make_dataset

ROWS = random_rows(40, seed=5)
DIM = 4
VOCAB = 50  # random_rows' items are ids in [0, 50)


@pytest.fixture(scope="module")
def shard_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("coo_shards")
    write_parquet_shards(str(root / "parquet"), ROWS, 2, row_group_size=16)
    write_tfrecord_shards(str(root / "tfrecord"), ROWS, 2)
    return {"parquet": str(root / "parquet"), "tfrecord": str(root / "tfrecord")}


def _expected_bags(table: np.ndarray, rows: list[dict]) -> np.ndarray:
    """The bags of the oracle's mean COO of the weighted `items`, straight from the rows."""
    want = reference_coo(rows, "items", weighted=True, combiner="mean")
    return np.array(oracles.bags(table, want, len(rows))).reshape(len(rows), table.shape[1])


def test_the_tfdata_coo_type_is_ops_coo():
    assert transforms.Coo is ops.Coo
    assert transforms.tfdata.Coo is ops.Coo
    coo = ops.Coo(tf.constant([0]), tf.constant([3]), tf.constant([1.0]))
    assert coo.sample_count is None and coo._fields == ("row_ids", "col_ids", "gains", "sample_count")


@pytest.mark.parametrize("fmt", ["parquet", "tfrecord"])
def test_padded_batches_from_make_dataset_carry_their_sample_count_into_the_embedding_bags(shard_dirs, fmt):
    # 40 rows in batches of 16: the last batch has 8 rows, and capacities pad every batch.
    ds = make_dataset(shard_dirs[fmt], 16, shuffle=False, combiner="mean", capacities={"user": 16, "items": 120})
    layer = EmbeddingBag(VOCAB, DIM, combiner="mean")
    layer.build()
    table = layer.shards[0].numpy()
    seen = 0
    for features, label in ds:
        coo = features["items"]
        assert isinstance(coo, ops.Coo)
        rows = int(label.shape[0])
        assert int(coo.sample_count) == rows
        assert int(tf.reduce_max(coo.row_ids)) == rows  # padding entries point at row `rows`
        batch = ROWS[seen : seen + rows]
        want = _expected_bags(table, batch)
        oracles.assert_entries(coo, oracles.pad(reference_coo(batch, "items", True, "mean"), 120, rows)[0])
        for out in (layer(coo), ops.embedding_bag(table, coo), ops.embedding_bag(table, *coo)):
            assert out.shape == [rows, DIM]
            np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
        seen += rows
    assert seen == len(ROWS)


def test_a_tf_function_sees_the_carried_count(shard_dirs):
    ds = make_dataset(shard_dirs["parquet"], 16, shuffle=False, capacities={"user": 16, "items": 120},
                      drop_remainder=True)
    layer = EmbeddingBag(VOCAB, DIM)
    step = tf.function(lambda features: layer(features["items"]))
    features, label = next(iter(ds))
    assert step(features).shape == [16, DIM]


def test_a_padded_coo_without_sample_count_is_an_error_naming_the_fix():
    ids = tf.ragged.constant([[3, 1], [], [2]], dtype=tf.int64)
    coo = transforms.pad_to_capacity(transforms.to_coo(ids), 6, sample_count=3)
    row_ids, col_ids, gains, sample_count = coo
    assert row_ids.numpy().tolist() == [0, 0, 2, 3, 3, 3] and int(sample_count) == 3
    layer = EmbeddingBag(10, DIM)
    assert layer(coo).shape == [3, DIM]
    with pytest.raises(tf.errors.InvalidArgumentError, match="no sample_count.*pass the ops.Coo from make_dataset"):
        layer((row_ids, col_ids, gains))
    with pytest.raises(tf.errors.InvalidArgumentError, match="no sample_count"):
        tf.function(lambda r, c, g: layer((r, c, g)))(row_ids, col_ids, gains)
    with pytest.raises(ValueError, match="sample_count is required"):
        ops.embedding_bag(layer.shards[0], row_ids, col_ids, gains)
    with pytest.raises(ValueError, match="sample_count is required"):
        ops.embedding_bag(layer.shards[0], ops.Coo(row_ids, col_ids, gains))
    # The layer's own sample_count, or an explicit one, settles it.
    assert EmbeddingBag(10, DIM, sample_count=3)((row_ids, col_ids, gains)).shape == [3, DIM]
    assert ops.embedding_bag(layer.shards[0], row_ids, col_ids, gains, 3).shape == [3, DIM]


def test_an_unpadded_three_tuple_still_counts_its_rows():
    rows, cols, gains, _ = ops.convert_to_coo(
        tf.constant([0, 2, 3, 5], tf.int64), tf.constant([1, 4, 2, 7, 0], tf.int64), 1.0, sample_count=3, combiner="sum"
    )
    layer = EmbeddingBag(10, DIM, combiner="sum")
    out = layer((rows, cols, gains))
    table = layer.shards[0].numpy()
    want = np.stack([table[1] + table[4], table[2], table[7] + table[0]])
    assert out.shape == [3, DIM]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


def test_to_coo_counts_trailing_empty_rows():
    ids = tf.ragged.constant([[3], [], []], dtype=tf.int64)
    coo = transforms.to_coo({"f": ids})["f"]
    assert int(coo.sample_count) == 3
    assert ops.embedding_bag(tf.ones([5, 2]), coo).shape == [3, 2]


def test_the_two_to_coos_take_everything_but_their_input_by_keyword():
    ids = tf.ragged.constant([[1, 1], [2]], dtype=tf.int64)
    with pytest.raises(TypeError):
        ops.to_coo(ids, 2.0)  # weights by position
    with pytest.raises(TypeError):
        transforms.to_coo({"f": ids}, "mean")  # combiner by position
    by_ops = ops.to_coo(ids, weights=2.0, combiner="mean")
    by_transforms = transforms.to_coo({"f": ids}, weights={"f": 2.0}, combiner="mean")["f"]
    assert by_ops.gains.numpy().tolist() == by_transforms.gains.numpy().tolist() == [1.0, 1.0]
