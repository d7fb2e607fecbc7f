"""BlockSparseMatMul against a dense matmul with the masked dense matrix, written here in numpy."""

import numpy as np
import pytest
import tensorflow as tf

import ops


def _dense(layout, w, bs):
    """The dense [K, N] matrix: block i of w at np.argwhere(layout)[i], zeros elsewhere."""
    k_blocks, n_blocks = layout.shape
    dense = np.zeros((k_blocks * bs, n_blocks * bs))
    for i, (r, c) in enumerate(np.argwhere(layout)):
        dense[r * bs : (r + 1) * bs, c * bs : (c + 1) * bs] = w[i]
    return dense


def _layout(kind, k_blocks, n_blocks, rng):
    if kind == "empty":
        return np.zeros((k_blocks, n_blocks), bool)
    if kind == "empty rows and columns":
        layout = rng.random((k_blocks, n_blocks)) < 0.5
        layout[1, :] = False  # an input block row with no blocks
        layout[:, 2] = False  # an output block column with no blocks
        return layout
    density = {"5%": 0.05, "50%": 0.5, "100%": 1.0}[kind]
    return ops.random_layout(k_blocks, n_blocks, density, seed=int(rng.integers(1 << 30)))


def _check_products(plan, layout, bs, rows, rng, jit_outer=False):
    x = rng.standard_normal((rows, layout.shape[0] * bs)).astype(np.float32)
    w = rng.standard_normal((int(layout.sum()), bs, bs)).astype(np.float32)
    dy = rng.standard_normal((rows, layout.shape[1] * bs)).astype(np.float32)

    def run(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = plan(x, w)
        return (y, *tape.gradient(y, [x, w], output_gradients=dy))

    if jit_outer:
        run = tf.function(run, jit_compile=True)
    y, dx, dw = run(tf.constant(x), tf.constant(w))
    dense = _dense(layout, w, bs)
    dw_dense = x.astype(np.float64).T @ dy
    expected_dw = np.zeros(w.shape)
    for i, (r, c) in enumerate(np.argwhere(layout)):
        expected_dw[i] = dw_dense[r * bs : (r + 1) * bs, c * bs : (c + 1) * bs]
    _assert_close(y.numpy(), x @ dense)
    _assert_close(dx.numpy(), dy @ dense.T)
    _assert_close(dw.numpy(), expected_dw)


def _assert_close(actual, expected):
    """Relative error within float32 rounding of sums of a few hundred products."""
    scale = max(np.abs(expected).max(initial=0.0), 1.0)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("implementation", ["composition", "native"])
@pytest.mark.parametrize("block_size", [8, 16, 32, 64])
@pytest.mark.parametrize("kind", ["empty", "empty rows and columns", "5%", "50%", "100%"])
def test_forward_and_both_gradients_match_the_masked_dense_matmul(block_size, kind, implementation):
    rng = np.random.default_rng(block_size)
    layout = _layout(kind, 5, 4, rng)  # non-square: K = 5 bs, N = 4 bs
    # Graph-mode kernels: the XLA ones compile per shape (tested below on fewer shapes).
    plan = ops.BlockSparseMatMul(
        layout, block_size, chunk_rows=16, jit_compile=False, implementation=implementation
    )  # 37 rows: 3 chunks
    _check_products(plan, layout, block_size, 37, rng)


@pytest.mark.parametrize("shape", [(3, 7), (1, 1)])
def test_xla_kernels_in_one_chunk(shape):
    rng = np.random.default_rng(sum(shape))
    layout = rng.random(shape) < 0.4
    layout[0, 0] = True
    plan = ops.BlockSparseMatMul(layout, 8, jit_compile=True)  # the default chunk holds all 21 rows
    _check_products(plan, layout, 8, 21, rng)


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="the CPU defaults")
def test_cpu_default_is_plain_tensorflow_in_chunks_of_256_rows():
    layout = ops.random_layout(4, 4, 0.5, seed=5)
    plan = ops.BlockSparseMatMul(layout, 8, implementation="composition")
    assert (plan.jit_compile, plan.chunk_rows) == (False, 256)
    # Three chunks, the last one short.
    _check_products(plan, layout, 8, 600, np.random.default_rng(14))


def test_whole_step_compiles_under_an_outer_xla_function():
    rng = np.random.default_rng(11)
    layout = ops.random_layout(4, 6, 0.4, seed=3)
    plan = ops.BlockSparseMatMul(layout, 16, chunk_rows=8)
    _check_products(plan, layout, 16, 20, rng, jit_outer=True)


@pytest.mark.parametrize("implementation", ["composition", "native"])
def test_gates_scale_blocks_and_receive_gradients(implementation):
    rng = np.random.default_rng(12)
    layout = ops.random_layout(3, 3, 0.6, seed=1)
    plan = ops.BlockSparseMatMul(layout, 8, jit_compile=False, implementation=implementation)
    x = tf.constant(rng.standard_normal((5, 24)).astype(np.float32))
    w = rng.standard_normal(plan.weight_shape).astype(np.float32)
    gates = tf.Variable(rng.uniform(0.5, 2.0, plan.nnz_blocks).astype(np.float32))
    with tf.GradientTape() as tape:
        y = plan(x, w, gates)
        loss = tf.reduce_sum(y)
    _assert_close(y.numpy(), x.numpy() @ _dense(layout, w * gates.numpy()[:, None, None], 8))
    # d loss / d gate_i = sum over rows of x_r @ w_i summed over the block's outputs.
    expected = [
        (x.numpy()[:, r * 8 : (r + 1) * 8] @ w[i]).sum() for i, (r, c) in enumerate(np.argwhere(layout))
    ]
    _assert_close(tape.gradient(loss, gates).numpy(), np.array(expected))


def test_prune_drops_zero_gated_blocks_and_keeps_the_product():
    rng = np.random.default_rng(13)
    layout = ops.random_layout(4, 4, 0.5, seed=2)
    plan = ops.BlockSparseMatMul(layout, 8, jit_compile=False)
    w = rng.standard_normal(plan.weight_shape).astype(np.float32)
    gates = rng.uniform(0.5, 1.5, plan.nnz_blocks).astype(np.float32)
    gates[::3] = 0.0
    smaller, smaller_w = plan.prune(w, gates)
    assert smaller.nnz_blocks == int((gates != 0).sum())
    assert smaller_w.shape == smaller.weight_shape
    assert not (smaller.layout & ~layout).any()
    x = rng.standard_normal((6, 32)).astype(np.float32)
    _assert_close(smaller(x, smaller_w).numpy(), plan(x, w, gates).numpy())


def test_to_dense_and_from_dense_round_trip_at_argwhere_positions():
    rng = np.random.default_rng(14)
    layout = ops.random_layout(3, 5, 0.4, seed=4)
    plan = ops.BlockSparseMatMul(layout, 8)
    w = rng.standard_normal(plan.weight_shape).astype(np.float32)
    dense = plan.to_dense(w).numpy()
    np.testing.assert_array_equal(dense, _dense(layout, w, 8))
    np.testing.assert_array_equal(plan.from_dense(dense).numpy(), w)


def test_numpy_references_on_the_plan_agree_with_the_dense_products():
    rng = np.random.default_rng(15)
    layout = ops.random_layout(4, 3, 0.5, seed=5)
    plan = ops.BlockSparseMatMul(layout, 8)
    x = rng.standard_normal((7, 32))
    w = rng.standard_normal(plan.weight_shape)
    dy = rng.standard_normal((7, 24))
    dense = _dense(layout, w, 8)
    np.testing.assert_allclose(plan.reference_forward(x, w), x @ dense)
    np.testing.assert_allclose(plan.reference_grad_x(dy, w), dy @ dense.T)
    full = x.T @ dy
    expected = np.stack([full[r * 8 : (r + 1) * 8, c * 8 : (c + 1) * 8] for r, c in np.argwhere(layout)])
    np.testing.assert_allclose(plan.reference_grad_w(x, dy), expected)


def test_functional_form_equals_the_plan():
    rng = np.random.default_rng(16)
    layout = ops.banded_layout(4, 4, 1)
    w = rng.standard_normal((int(layout.sum()), 8, 8)).astype(np.float32)
    x = rng.standard_normal((3, 32)).astype(np.float32)
    _assert_close(ops.block_sparse_matmul(x, w, layout, 8).numpy(), x @ _dense(layout, w, 8))


def test_random_layout_has_the_exact_count_and_is_seeded():
    a = ops.random_layout(10, 20, 0.1, seed=3)
    assert a.shape == (10, 20) and a.dtype == bool and a.sum() == 20
    np.testing.assert_array_equal(a, ops.random_layout(10, 20, 0.1, seed=3))
    assert not np.array_equal(a, ops.random_layout(10, 20, 0.1, seed=4))


@pytest.mark.parametrize("shape", [(6, 6), (3, 8), (8, 3), (5, 7)])
@pytest.mark.parametrize("bandwidth", [0, 1])
def test_banded_layout_follows_the_diagonal_and_covers_every_row_and_column(shape, bandwidth):
    layout = ops.banded_layout(*shape, bandwidth)
    assert layout.any(axis=1).all() and layout.any(axis=0).all()
    if shape[0] == shape[1]:
        rows, cols = np.indices(shape)
        np.testing.assert_array_equal(layout, np.abs(rows - cols) <= bandwidth)
    wider = ops.banded_layout(*shape, bandwidth + 1)
    assert (wider | layout).sum() == wider.sum()  # a wider band contains the narrower one


def test_magnitude_layout_keeps_the_largest_blocks():
    rng = np.random.default_rng(17)
    dense = rng.standard_normal((16, 24)) * 0.01
    big = [(0, 1), (2, 5), (3, 0)]
    for r, c in big:
        dense[r * 4 : (r + 1) * 4, c * 4 : (c + 1) * 4] += 5.0
    layout = ops.magnitude_layout(dense, 4, 3 / 24)
    assert sorted(map(tuple, np.argwhere(layout))) == big


def test_bad_arguments_raise_value_error():
    plan = ops.BlockSparseMatMul(np.eye(2, dtype=bool), 8)
    with pytest.raises(ValueError, match="x must be"):
        plan(tf.ones([3, 15]), tf.ones(plan.weight_shape))
    with pytest.raises(ValueError, match="w must have shape"):
        plan(tf.ones([3, 16]), tf.ones([3, 8, 8]))
    with pytest.raises(ValueError, match="gates must be"):
        plan(tf.ones([3, 16]), tf.ones(plan.weight_shape), tf.ones([3]))
    with pytest.raises(ValueError, match="layout must be boolean"):
        ops.BlockSparseMatMul(np.full((2, 2), 0.5), 8)
    with pytest.raises(ValueError, match="non-empty 2-D"):
        ops.BlockSparseMatMul(np.ones(3, bool), 8)
    with pytest.raises(ValueError, match="block_size"):
        ops.BlockSparseMatMul(np.eye(2, dtype=bool), 0)
    with pytest.raises(ValueError, match="from_dense: expected shape"):
        plan.from_dense(tf.ones([16, 8]))
    with pytest.raises(ValueError, match="prune: expected"):
        plan.prune(np.ones(plan.weight_shape), np.ones(3))
    with pytest.raises(ValueError, match="density"):
        ops.random_layout(2, 2, 1.5)
    with pytest.raises(ValueError, match="multiple of block_size"):
        ops.magnitude_layout(np.ones((6, 8)), 4, 0.5)


def test_gemm_shapes_give_each_nonempty_column_and_row_one_stack_wide_enough():
    layout = ops.random_layout(6, 5, 0.4, seed=4)
    shapes = ops.BlockSparseMatMul(layout, 8).gemm_shapes()
    for key, counts in (("y", layout.sum(axis=0)), ("dx", layout.sum(axis=1))):
        stacks = shapes[key]
        assert sum(n for n, _ in stacks) == int((counts > 0).sum())
        assert max(w for _, w in stacks) == int(counts.max())
        assert sum(n * w for n, w in stacks) >= int(layout.sum())
