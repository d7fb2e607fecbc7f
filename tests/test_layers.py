"""ops.layers: EmbeddingBag and BlockSparseDense as Keras 3 layers (inputs, config, save/load, training)."""

import keras
import numpy as np
import oracles
import pytest
import tensorflow as tf

import ops
from ops.layers import BlockSparseDense, EmbeddingBag

VOCAB, DIM = 30, 8


def _bags(rng, rows=6, max_len=4):
    """Lists of ids and of weights per sample; sample 2 is empty."""
    ids = [list(rng.integers(0, VOCAB, rng.integers(1, max_len + 1))) for _ in range(rows)]
    ids[2] = []
    weights = [list(rng.uniform(0.5, 2.0, len(row)).astype(np.float32)) for row in ids]
    return ids, weights


def _expected(table, ids, weights, combiner):
    """out[s] = the bag of sample s: the oracle's COO of the samples, summed over gain * table[id]."""
    bags = oracles.bags(table, oracles.coo(ids, weights, combiner), len(ids))
    return np.array(bags).reshape(len(ids), table.shape[1])


def _sparse(ids, values):
    indices = [[s, j] for s, row in enumerate(ids) for j in range(len(row))]
    flat = [v for row in values for v in row]
    shape = [len(ids), max(len(row) for row in ids)]
    return tf.SparseTensor(np.array(indices, np.int64), np.array(flat), shape)


def _table(layer):
    """The full [vocab, dim] table of an EmbeddingBag layer, rebuilt from its shards."""
    shards = [s.numpy() for s in layer.shards]
    if layer.num_shards == 1:
        return shards[0]
    if layer.partition_strategy == "div":
        return np.concatenate(shards)
    table = np.zeros((layer.vocab_size, layer.dim), np.float32)
    for s, shard in enumerate(shards):
        table[s :: layer.num_shards] = shard
    return table


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_embedding_bag_accepts_ragged_sparse_and_dict_inputs(combiner):
    rng = np.random.default_rng(0)
    ids, weights = _bags(rng)
    layer = EmbeddingBag(VOCAB, DIM, combiner=combiner)
    ragged = tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1)
    out_ragged = layer(ragged).numpy()
    table = _table(layer)
    ones = [[1.0] * len(row) for row in ids]
    np.testing.assert_allclose(out_ragged, _expected(table, ids, ones, combiner), rtol=1e-5, atol=1e-6)

    sparse_ids = _sparse(ids, [[np.int64(i) for i in row] for row in ids])
    np.testing.assert_allclose(layer(sparse_ids).numpy(), out_ragged, rtol=1e-6, atol=1e-7)

    ragged_weights = tf.ragged.constant(weights, dtype=tf.float32, ragged_rank=1)
    weighted = layer({"ids": ragged, "weights": ragged_weights}).numpy()
    np.testing.assert_allclose(weighted, _expected(table, ids, weights, combiner), rtol=1e-5, atol=1e-6)
    sparse_weighted = layer({"ids": sparse_ids, "weights": _sparse(ids, weights)}).numpy()
    np.testing.assert_allclose(sparse_weighted, weighted, rtol=1e-6, atol=1e-7)


def test_embedding_bag_accepts_coo_tuples_with_padding_and_sample_count():
    rng = np.random.default_rng(1)
    ids, weights = _bags(rng)
    ragged = tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1)
    ragged_weights = tf.ragged.constant(weights, dtype=tf.float32, ragged_rank=1)
    rows, cols, gains, _ = ops.to_coo(ragged, weights=ragged_weights, combiner="mean")
    padded = ops.pad_coo(rows, cols, gains, int(rows.shape[0]) + 5, sample_count=len(ids))
    assert isinstance(padded, ops.Coo) and padded.sample_count == len(ids)

    layer = EmbeddingBag(VOCAB, DIM, sample_count=len(ids))
    expected = layer({"ids": ragged, "weights": ragged_weights}).numpy()
    np.testing.assert_allclose(layer(padded).numpy(), expected, rtol=1e-6, atol=1e-7)
    count = tf.constant(len(ids))  # Keras takes only tensors positionally
    np.testing.assert_allclose(layer((*padded[:3], count)).numpy(), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(EmbeddingBag.from_config(layer.get_config())(padded[:3]).shape, expected.shape)
    inferred = EmbeddingBag(VOCAB, DIM)
    inferred.build()
    inferred.set_weights(layer.get_weights())
    # Without sample_count the batch ends at the last row that has an id.
    np.testing.assert_allclose(inferred((rows, cols, gains)).numpy(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_sharded_embedding_bag_equals_one_table(strategy):
    rng = np.random.default_rng(2)
    ids, weights = _bags(rng, rows=8)
    ragged = tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1)
    sharded = EmbeddingBag(VOCAB, DIM, num_shards=4, partition_strategy=strategy)
    out = sharded(ragged).numpy()
    assert [s.shape[0] for s in sharded.shards] == [8, 8, 7, 7]
    single = EmbeddingBag(VOCAB, DIM)
    single.build()
    single.shards[0].assign(_table(sharded))
    np.testing.assert_allclose(out, single(ragged).numpy(), rtol=1e-6, atol=1e-7)


def test_embedding_bag_table_gradient_is_sparse():
    rng = np.random.default_rng(3)
    ids, _ = _bags(rng)
    layer = EmbeddingBag(VOCAB, DIM, num_shards=2)
    ragged = tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1)
    layer(ragged)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(ragged) ** 2)
    grads = tape.gradient(loss, layer.trainable_variables)
    assert all(isinstance(g, tf.IndexedSlices) for g in grads)
    assert sum(int(g.values.shape[0]) for g in grads) == len({i for row in ids for i in row})


def test_block_sparse_dense_computes_x_times_the_block_matrix_plus_bias():
    rng = np.random.default_rng(4)
    layout = ops.banded_layout(3, 2, 0)
    layer = BlockSparseDense(16, layout=layout, block_size=8, activation="relu", bias_initializer="ones")
    x = rng.standard_normal((2, 5, 24)).astype(np.float32)  # extra leading dims are kept
    out = layer(x).numpy()
    dense = np.zeros((24, 16), np.float32)
    for w, (r, c) in zip(layer.kernel.numpy(), np.argwhere(layout)):
        dense[r * 8 : (r + 1) * 8, c * 8 : (c + 1) * 8] = w
    assert out.shape == (2, 5, 16)
    np.testing.assert_allclose(out, np.maximum(x @ dense + 1.0, 0.0), rtol=1e-5, atol=1e-5)


def test_block_sparse_dense_draws_its_layout_from_density_and_seed():
    a = BlockSparseDense(64, density=0.25, block_size=16, seed=5)
    a.build((None, 128))
    assert a.layout.shape == (8, 4) and a.layout.sum() == 8
    assert a.kernel.shape == (8, 16, 16)
    b = BlockSparseDense(64, density=0.25, block_size=16, seed=5)
    b.build((None, 128))
    np.testing.assert_array_equal(a.layout, b.layout)


def test_block_sparse_dense_at_low_density_still_feeds_every_output_block():
    layer = BlockSparseDense(64, density=0.05, block_size=16, seed=0)
    layer.build((None, 32))  # a 2 x 4 grid: 5% would be no block at all
    assert layer.layout.sum(axis=0).tolist() == [1, 1, 1, 1]
    x = np.random.default_rng(0).normal(size=(8, 32)).astype(np.float32)
    assert np.all(np.std(layer(x).numpy(), axis=0) > 0)  # no output is a constant


def _model(rng):
    ids = keras.Input(shape=(None,), dtype="int64", ragged=True)
    hidden = EmbeddingBag(VOCAB, 16, combiner="mean", num_shards=2)(ids)
    hidden = BlockSparseDense(32, density=0.5, block_size=8, activation="relu", seed=3)(hidden)
    return keras.Model(ids, keras.layers.Dense(1)(hidden))


def _data(rng, rows=96):
    ids = [list(rng.integers(0, VOCAB, rng.integers(1, 5))) for _ in range(rows)]
    target = np.array([[np.mean(row) / VOCAB] for row in ids], np.float32)  # learnable from the ids
    return tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1), target


def test_config_round_trip_rebuilds_equal_layers():
    emb = EmbeddingBag(VOCAB, DIM, combiner="sqrtn", num_shards=3, partition_strategy="div", sample_count=7)
    clone = EmbeddingBag.from_config(emb.get_config())
    assert clone.get_config() == emb.get_config()
    dense = BlockSparseDense(32, density=0.5, block_size=8, activation="tanh", use_bias=False, seed=9)
    dense.build((None, 16))
    config = dense.get_config()
    assert config["density"] is None and len(config["layout"]) == 2  # the drawn layout is stored
    rebuilt = BlockSparseDense.from_config(config)
    rebuilt.build((None, 16))
    np.testing.assert_array_equal(rebuilt.layout, dense.layout)


def test_model_trains_with_fit_and_saves_and_loads_identically(tmp_path):
    rng = np.random.default_rng(5)
    x, y = _data(rng)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model = _model(rng)
    # XLA is exercised by the custom step below: under fit it would compile once per batch shape.
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse", jit_compile=False)
    history = model.fit(data, epochs=6, shuffle=False, verbose=0).history["loss"]
    assert history[-1] < history[0]

    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())


def test_custom_jit_compiled_train_step_updates_both_layers():
    rng = np.random.default_rng(6)
    x, y = _data(rng, rows=32)
    model = _model(rng)
    model(x)
    optimizer = keras.optimizers.SGD(0.1)
    before = [v.numpy().copy() for v in model.trainable_variables]

    @tf.function(jit_compile=True)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step(x, y)
    after = [v.numpy() for v in model.trainable_variables]
    assert all(not np.array_equal(a, b) for a, b in zip(before, after))


def test_bad_layer_arguments_raise_value_error():
    with pytest.raises(ValueError, match="exactly one of density and layout"):
        BlockSparseDense(32, density=0.5, layout=np.ones((1, 1), bool))
    with pytest.raises(ValueError, match="multiple of block_size"):
        BlockSparseDense(30, density=0.5, block_size=8)
    with pytest.raises(ValueError, match="input features"):
        BlockSparseDense(32, density=0.5, block_size=8).build((None, 20))
    with pytest.raises(ValueError, match="layout shape"):
        BlockSparseDense(16, layout=np.ones((3, 2), bool), block_size=8).build((None, 16))
    with pytest.raises(ValueError, match="combiner"):
        EmbeddingBag(VOCAB, DIM, combiner="max")
    with pytest.raises(ValueError, match="num_shards"):
        EmbeddingBag(VOCAB, DIM, num_shards=0)
    layer = EmbeddingBag(VOCAB, DIM)
    with pytest.raises(ValueError, match="'ids' entry"):
        layer({"weights": tf.ragged.constant([[1.0]])})
    with pytest.raises(ValueError, match="expected a RaggedTensor"):
        layer(tf.constant([[1, 2]]))


@pytest.mark.parametrize("num_shards", [1, 3])
def test_tf_train_checkpoint_saves_and_restores_every_layer_weight(tmp_path, num_shards):
    # Custom training loops checkpoint with tf.train.Checkpoint, which only sees attribute-held variables.
    def make():
        bag = EmbeddingBag(10, 4, num_shards=num_shards)
        dense = BlockSparseDense(16, density=0.5, block_size=8, seed=1)
        bag.build()
        dense.build((None, 16))
        return bag, dense

    bag, dense = make()
    path = tf.train.Checkpoint(bag=bag, dense=dense).save(str(tmp_path / "ckpt"))
    other_bag, other_dense = make()
    for v in other_bag.weights + other_dense.weights:
        v.assign(tf.zeros_like(v))
    tf.train.Checkpoint(bag=other_bag, dense=other_dense).restore(path).assert_existing_objects_matched()
    for a, b in zip(bag.weights + dense.weights, other_bag.weights + other_dense.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert len(other_bag.weights) == num_shards
