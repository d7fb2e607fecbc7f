"""The native block-sparse kernels: selection, the XLA path, float64, gates and thread-count independence.

Their products against the masked dense matmul, for every block size, are in
tests/test_block_sparse.py (parametrised over both implementations).
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import ops
from ops import _native

pytestmark = pytest.mark.skipif(
    not _native.available(), reason=f"native kernels unavailable here: {_native.unavailable_reason()}"
)


def _op_types(fn, *args) -> set[str]:
    return {op.type for op in tf.function(fn).get_concrete_function(*args).graph.get_operations()}


def _operands(plan, rows, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, plan.in_features)).astype(dtype)
    w = rng.standard_normal(plan.weight_shape).astype(dtype)
    dy = rng.standard_normal((rows, plan.out_features)).astype(dtype)
    return x, w, dy


def _products(plan, x, w, dy):
    x, w = tf.constant(x), tf.constant(w)
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        y = plan(x, w)
    return (y, *tape.gradient(y, [x, w], output_gradients=tf.constant(dy)))


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="the CPU default")
def test_auto_picks_the_native_kernels_on_cpu():
    plan = ops.BlockSparseMatMul(ops.random_layout(4, 3, 0.5, seed=1), 8)
    x, w, _ = _operands(plan, 5, np.float32, 0)
    assert "SparseflowBlockSparseProduct" in _op_types(lambda: plan(x, w))
    composed = ops.BlockSparseMatMul(plan.layout, 8, implementation="composition")
    assert "SparseflowBlockSparseProduct" not in _op_types(lambda: composed(x, w))


def test_xla_compiled_functions_run_the_composition():
    plan = ops.BlockSparseMatMul(ops.random_layout(4, 3, 0.5, seed=2), 16, implementation="native")
    x, w, _ = _operands(plan, 6, np.float32, 1)
    step = tf.function(lambda: plan(x, w), jit_compile=True)
    assert "SparseflowBlockSparseProduct" not in {op.type for op in step.get_concrete_function().graph.get_operations()}
    np.testing.assert_allclose(step().numpy(), plan.reference_forward(x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("block_size", [8, 32])
def test_float64_products_match_the_numpy_references(block_size):
    plan = ops.BlockSparseMatMul(ops.random_layout(3, 4, 0.5, seed=3), block_size, implementation="native")
    x, w, dy = _operands(plan, 11, np.float64, 2)
    y, dx, dw = _products(plan, x, w, dy)
    assert y.dtype == tf.float64
    np.testing.assert_allclose(y.numpy(), plan.reference_forward(x, w), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx.numpy(), plan.reference_grad_x(dy, w), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw.numpy(), plan.reference_grad_w(x, dy), rtol=1e-12, atol=1e-12)


def test_native_and_composition_agree_with_gates_and_their_gradient():
    layout = ops.random_layout(4, 4, 0.5, seed=4)
    native = ops.BlockSparseMatMul(layout, 8, implementation="native")
    composed = ops.BlockSparseMatMul(layout, 8, implementation="composition")
    x, w, dy = _operands(native, 9, np.float32, 3)
    gates = tf.Variable(np.linspace(0.0, 1.5, native.nnz_blocks).astype(np.float32))
    results = []
    for plan in (native, composed):
        with tf.GradientTape() as tape:
            y = plan(x, w, gates)
        results.append((y.numpy(), tape.gradient(y, gates, output_gradients=tf.constant(dy)).numpy()))
    for ours, reference in zip(*results):
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4)


_THREADED = textwrap.dedent(
    """
    import hashlib, sys
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
    import ops
    plan = ops.BlockSparseMatMul(ops.random_layout(8, 6, 0.4, seed=5), 16, implementation="native")
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((300, plan.in_features)).astype(np.float32))
    w = tf.constant(rng.standard_normal(plan.weight_shape).astype(np.float32))
    dy = tf.constant(rng.standard_normal((300, plan.out_features)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        y = plan(x, w)
    dx, dw = tape.gradient(y, [x, w], output_gradients=dy)
    print(hashlib.sha256(b"".join(t.numpy().tobytes() for t in (y, dx, dw))).hexdigest())
    """
)


def test_results_are_bitwise_the_same_for_any_thread_count():
    # Each output tile is summed by one thread over its blocks in the plan's order.
    digests = {
        threads: subprocess.run(
            [sys.executable, "-c", _THREADED, str(threads)], capture_output=True, text=True, check=True, timeout=300
        ).stdout.split()[-1]
        for threads in (1, 4)
    }
    assert digests[1] == digests[4]


def test_unknown_implementation_is_rejected():
    with pytest.raises(ValueError, match="implementation must be one of"):
        ops.BlockSparseMatMul(np.ones((1, 1), bool), 8, implementation="fast")
