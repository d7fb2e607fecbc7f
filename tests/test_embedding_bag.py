"""ops.embedding_bag against tf.nn.embedding_lookup_sparse and the plain reference of tests/oracles.py."""

import numpy as np
import oracles
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import ops

IMPLEMENTATIONS = ["segment", "csr", "native"]


def _reference(table, rows, cols, gains, sample_count):
    """out[r] = sum of gains[k] * table[cols[k]] over entries with rows[k] == r; row S is padding."""
    return np.array(oracles.bags(table, (rows, cols, gains), sample_count)).reshape(sample_count, table.shape[1])


def _random_batch(rng, sample_count, vocab, max_len, last_row_filled=True):
    lengths = rng.integers(0, max_len + 1, sample_count)
    if last_row_filled and sample_count:
        lengths[-1] = max(lengths[-1], 1)
    rows = np.repeat(np.arange(sample_count), lengths)
    # A small id range forces repeated ids, within and across rows.
    cols = rng.integers(0, vocab, rows.size)
    weights = rng.uniform(0.1, 2.0, rows.size).astype(np.float32)
    return lengths, rows, cols, weights


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [True, False])
def test_matches_embedding_lookup_sparse(implementation, combiner, weighted):
    rng = np.random.default_rng(7)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    lengths, rows, cols, weights = _random_batch(rng, 17, 50, 6)
    if not weighted:
        weights = np.ones_like(weights)
    positions = np.arange(rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    indices = np.stack([rows, positions], axis=1).astype(np.int64)
    shape = [17, int(lengths.max())]
    ids = tf.SparseTensor(indices, cols.astype(np.int64), shape)
    sp_weights = tf.SparseTensor(indices, weights, shape) if weighted else None
    expected = tf.nn.embedding_lookup_sparse(table, ids, sp_weights, combiner=combiner).numpy()

    coo = oracles.coo_of_row_lengths(lengths, cols.tolist(), weights.tolist(), combiner)
    gains = np.array(coo.gains, np.float32)
    out = ops.embedding_bag(table, coo.row_ids, coo.col_ids, gains, 17, implementation=implementation)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    plain = _reference(table, coo.row_ids, coo.col_ids, gains, 17)
    np.testing.assert_allclose(out.numpy(), plain, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_padding_entries_contribute_nothing_whatever_their_gain(implementation):
    rng = np.random.default_rng(1)
    table = rng.standard_normal((20, 4)).astype(np.float32)
    _, rows, cols, gains = _random_batch(rng, 5, 20, 4)
    plain = ops.embedding_bag(table, rows, cols, gains, 5, implementation=implementation)
    padded = ops.embedding_bag(
        table,
        np.concatenate([rows, [5, 5, 5]]),
        np.concatenate([cols, [0, 0, 3]]),
        np.concatenate([gains, [0.0, 0.0, 7.0]]).astype(np.float32),
        5,
        implementation=implementation,
    )
    assert padded.shape == (5, 4)
    np.testing.assert_array_equal(padded.numpy(), plain.numpy())


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_table_gradient_is_indexed_slices_over_distinct_ids(implementation):
    rng = np.random.default_rng(2)
    table = tf.Variable(rng.standard_normal((40, 6)).astype(np.float32))
    _, rows, cols, gains = _random_batch(rng, 9, 12, 5)  # ids < 12 of 40: heavy repetition
    upstream = rng.standard_normal((9, 6)).astype(np.float32)
    with tf.GradientTape() as tape:
        out = ops.embedding_bag(table, rows, cols, gains, 9, implementation=implementation)
        loss = tf.reduce_sum(out * upstream)
    grad = tape.gradient(loss, table)

    assert isinstance(grad, tf.IndexedSlices)
    distinct = np.unique(cols)
    assert grad.values.shape[0] == distinct.size
    np.testing.assert_array_equal(np.sort(grad.indices.numpy()), distinct)
    expected = np.zeros((40, 6))
    for r, c, g in zip(rows, cols, gains):
        expected[c] += g * upstream[r]
    np.testing.assert_allclose(tf.convert_to_tensor(grad).numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_gradient_flows_to_gains(implementation):
    rng = np.random.default_rng(3)
    table = rng.standard_normal((15, 5)).astype(np.float32)
    _, rows, cols, gains = _random_batch(rng, 6, 15, 4)
    gains_var = tf.Variable(gains)
    upstream = rng.standard_normal((6, 5)).astype(np.float32)
    with tf.GradientTape() as tape:
        out = ops.embedding_bag(table, rows, cols, gains_var, 6, implementation=implementation)
        loss = tf.reduce_sum(out * upstream)
    grad = tf.convert_to_tensor(tape.gradient(loss, gains_var)).numpy()
    expected = np.array([upstream[r] @ table[c] for r, c in zip(rows, cols)])
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_sharded_table_equals_one_table(strategy, implementation):
    rng = np.random.default_rng(4)
    vocab, shards = 23, 3
    full = rng.standard_normal((vocab, 4)).astype(np.float32)
    if strategy == "mod":
        pieces = [full[s::shards] for s in range(shards)]
    else:
        pieces = [full[:10], full[10:13], full[13:]]  # "div" shards may have any sizes
    variables = [tf.Variable(p) for p in pieces]
    _, rows, cols, gains = _random_batch(rng, 8, vocab, 5)
    with tf.GradientTape() as tape:
        out = ops.embedding_bag(
            variables, rows, cols, gains, 8, partition_strategy=strategy, implementation=implementation
        )
        loss = tf.reduce_sum(out**2)
    grads = tape.gradient(loss, variables)

    np.testing.assert_allclose(out.numpy(), _reference(full, rows, cols, gains, 8), rtol=1e-5, atol=1e-5)
    assert all(isinstance(g, tf.IndexedSlices) for g in grads)
    assert sum(int(g.values.shape[0]) for g in grads) == np.unique(cols).size
    with tf.GradientTape() as tape:
        whole = tf.Variable(full)
        loss = tf.reduce_sum(
            ops.embedding_bag(whole, rows, cols, gains, 8, implementation=implementation) ** 2
        )
    expected = tf.convert_to_tensor(tape.gradient(loss, whole)).numpy()
    dense_shards = [tf.convert_to_tensor(g).numpy() for g in grads]
    rebuilt = np.zeros_like(expected)
    if strategy == "mod":
        for s in range(shards):
            rebuilt[s::shards] = dense_shards[s]
    else:
        rebuilt = np.concatenate(dense_shards)
    np.testing.assert_allclose(rebuilt, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_any_entry_order_gives_the_same_result(implementation):
    rng = np.random.default_rng(5)
    table = rng.standard_normal((30, 3)).astype(np.float32)
    _, rows, cols, gains = _random_batch(rng, 7, 30, 5)
    shuffle = rng.permutation(rows.size)
    out = ops.embedding_bag(
        table, rows[shuffle], cols[shuffle], gains[shuffle], 7, implementation=implementation
    )
    np.testing.assert_allclose(out.numpy(), _reference(table, rows, cols, gains, 7), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_empty_batch_and_empty_rows_give_zeros(implementation):
    table = np.ones((4, 2), np.float32)
    empty = ops.embedding_bag(
        table,
        np.zeros(0, np.int32),
        np.zeros(0, np.int64),
        np.zeros(0, np.float32),
        3,
        implementation=implementation,
    )
    np.testing.assert_array_equal(empty.numpy(), np.zeros((3, 2)))
    sparse_rows = ops.embedding_bag(table, [1], [2], [2.0], 4, implementation=implementation)
    np.testing.assert_array_equal(sparse_rows.numpy(), [[0, 0], [2, 2], [0, 0], [0, 0]])


@pytest.mark.parametrize("num_shards", [1, 2])
def test_compiles_under_xla_with_the_same_result_and_sparse_gradient(num_shards):
    rng = np.random.default_rng(6)
    full = rng.standard_normal((25, 4)).astype(np.float32)
    shards = [tf.Variable(full[s::num_shards]) for s in range(num_shards)]
    _, rows, cols, gains = _random_batch(rng, 10, 25, 4)

    @tf.function(jit_compile=True)
    def step(rows, cols, gains):
        with tf.GradientTape() as tape:
            out = ops.embedding_bag(shards, rows, cols, gains, 10)
            loss = tf.reduce_sum(out**2)
        grads = tape.gradient(loss, shards)
        return out, [g.indices * num_shards + s for s, g in enumerate(grads)], [g.values for g in grads]

    out, indices, values = step(tf.constant(rows), tf.constant(cols), tf.constant(gains))
    np.testing.assert_allclose(out.numpy(), _reference(full, rows, cols, gains, 10), rtol=1e-5, atol=1e-5)
    # Under XLA each shard's gradient has a row per distinct id of the batch (zero for other shards' ids).
    assert all(v.shape[0] == np.unique(cols).size for v in values)
    nonzero = np.concatenate([i.numpy()[np.abs(v.numpy()).sum(1) > 0] for i, v in zip(indices, values)])
    np.testing.assert_array_equal(np.sort(nonzero), np.unique(cols))


@settings(max_examples=25)
@given(
    sample_count=st.integers(0, 12),
    vocab=st.integers(1, 20),
    max_len=st.integers(0, 6),
    seed=st.integers(0, 2**16),
    id_dtype=st.sampled_from([np.int32, np.int64]),
    implementation=st.sampled_from(IMPLEMENTATIONS),
    tensor_count=st.booleans(),
)
def test_random_batches_match_the_numpy_reference(
    sample_count, vocab, max_len, seed, id_dtype, implementation, tensor_count
):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocab, 3)).astype(np.float32)
    _, rows, cols, gains = _random_batch(rng, sample_count, vocab, max_len, last_row_filled=False)
    gains[rng.random(gains.size) < 0.2] = 0.0  # zero-weight entries
    count = tf.constant(sample_count) if tensor_count else sample_count
    out = ops.embedding_bag(
        table, rows.astype(np.int32), cols.astype(id_dtype), gains, count, implementation=implementation
    )
    expected = _reference(table, rows, cols, gains, sample_count)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_static_problems_raise_value_error_naming_the_feature():
    table = np.ones((4, 2), np.float32)
    with pytest.raises(ValueError, match=r"embedding_bag\[user\].*one length"):
        ops.embedding_bag(table, [0, 0], [1], [1.0], 1, name="user")
    with pytest.raises(ValueError, match="row_ids must be 1-D"):
        ops.embedding_bag(table, [[0]], [1], [1.0], 1)
    with pytest.raises(ValueError, match="col_ids must be int32 or int64"):
        ops.embedding_bag(table, [0], [1.0], [1.0], 1)
    with pytest.raises(ValueError, match="table shard 0 must have rank 2"):
        ops.embedding_bag(np.ones(4, np.float32), [0], [1], [1.0], 1)
    with pytest.raises(ValueError, match="partition_strategy"):
        ops.embedding_bag([table, table], [0], [1], [1.0], 1, partition_strategy="range")
    with pytest.raises(
        ValueError, match=r"'mod' sharding of 6 ids over 2 shards needs shard sizes \[3, 3\], got \[4, 2\]"
    ):
        ops.embedding_bag([table, np.ones((3, 2), np.float32)[:2]], [0], [1], [1.0], 1)
    with pytest.raises(ValueError, match="sample_count must be a non-negative int"):
        ops.embedding_bag(table, [0], [1], [1.0], -1)
    with pytest.raises(ValueError, match="implementation"):
        ops.embedding_bag(table, [0], [1], [1.0], 1, implementation="fast")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_out_of_range_ids_and_rows_raise_invalid_argument(implementation):
    table = np.ones((4, 2), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError):
        ops.embedding_bag(table, [0], [9], [1.0], 1, implementation=implementation)
    with pytest.raises(tf.errors.InvalidArgumentError):
        ops.embedding_bag(table, [3], [1], [1.0], 1, implementation=implementation)


def test_no_ids_at_all_gives_zero_rows_and_an_empty_gradient_in_a_graph():
    # Capacity 0 (a feature empty in every row): TensorFlow's CSR kernels used to kill the process here.
    table = tf.Variable(tf.random.normal([7, 3]))
    empty = (tf.zeros([0], tf.int32), tf.zeros([0], tf.int64), tf.zeros([0]))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            out = ops.embedding_bag(table, *empty, sample_count=4)
            loss = tf.reduce_sum(out)
        return out, tape.gradient(loss, table)

    out, grad = step()
    np.testing.assert_array_equal(out.numpy(), np.zeros((4, 3), np.float32))
    assert tf.convert_to_tensor(grad).numpy().sum() == 0
