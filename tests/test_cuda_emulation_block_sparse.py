"""The __global__ kernels of ops/cuda/block_sparse.cu, run on the CPU emulation, against the dense numpy products.

product_simt (float32, and 8-blocks of every type), product_mma (float16/bfloat16 on mma.sync fragments, blocks
16-64; float32 as "tf32" on TF32 fragments, blocks 16 and 32), weight_grad_simt (float32 and 8-blocks) and
weight_grad_mma (float16/bfloat16/tf32, blocks 16-64); each test's id names the kernel, and the launch log is
checked to hold it.
"""

import numpy as np
import pytest

from benchmarks import kernel_references as ref
from benchmarks._cuda_kernels import block_plan
from benchmarks.gpu_kernel_data import STORAGE, from_dtype, to_dtype
from tests._cuda_emulation import HostMemory, emulated_kernels

DTYPES = ("float32", "float16", "bfloat16", "tf32")


C_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "tf32": "float"}


def _product_kernel(dtype, block):
    tensor_cores = block != 8 and (dtype in ("float16", "bfloat16") or (dtype == "tf32" and block != 64))
    return f"{'product_mma' if tensor_cores else 'product_simt'}<{C_TYPES[dtype]}, {block}>"


def _id(kernel, dtype):
    return f"{kernel} (tf32)" if dtype == "tf32" else kernel


def _weight_grad_kernel(dtype, block):
    tensor_cores = block != 8 and dtype != "float32"
    return f"{'weight_grad_mma' if tensor_cores else 'weight_grad_simt'}<{C_TYPES[dtype]}, {block}>"


def _layout(rng, k_blocks, n_blocks):
    layout = rng.random((k_blocks, n_blocks)) < 0.5
    layout[:, 1] = False  # an output column with no blocks: its output is zeros
    layout[0, 0] = True
    return layout


PRODUCTS = [
    pytest.param(dtype, block, m, id=f"{_id(_product_kernel(dtype, block), dtype)}-m {m}")
    for dtype in DTYPES
    for block in (8, 16, 32, 64)
    for m in (1, 133)  # one row; a partial last row tile for every tile height (4096 / block, 128 or 64)
]


@pytest.mark.parametrize(("dtype", "block", "m"), PRODUCTS)
def test_products_over_the_plan_match_the_dense_matrix(dtype, block, m):
    emulated, memory = emulated_kernels(), HostMemory()
    rng = np.random.default_rng(block * 7 + m)
    layout = _layout(rng, 3, 4)
    nnz = int(layout.sum())
    x_raw, x = to_dtype(rng.standard_normal((m, 3 * block)), dtype)
    dy_raw, dy = to_dtype(rng.standard_normal((m, 4 * block)), dtype)
    w_raw, w = to_dtype(rng.standard_normal((nnz, block, block)), dtype)
    dense = ref.block_dense(layout, w)
    bw = memory.put(w_raw)
    for what, a_raw, by_column, a_blocks, outputs, want, bound in (
        ("y = x @ W", x_raw, True, 3, 4, x @ dense, np.abs(x) @ np.abs(dense)),
        ("dx = dy @ W^T", dy_raw, False, 4, 3, dy @ dense.T, np.abs(dy) @ np.abs(dense.T)),
    ):
        emulated.reset()
        plan = [memory.put(p) for p in block_plan(emulated.lib, layout, by_column)]
        out = memory.empty(np.dtype(STORAGE[dtype]).itemsize * m * outputs * block)
        emulated.product(dtype, memory.put(a_raw), m, a_blocks, outputs, block, bw, plan, not by_column, out)
        assert emulated.launched() == [_product_kernel(dtype, block)], what
        got = from_dtype(memory.get(out, STORAGE[dtype], (m, outputs * block)), dtype)
        ref.check_close(got, want, bound, dtype, what)
        if by_column:
            assert not got[:, block : 2 * block].any()  # the output column without blocks


@pytest.mark.parametrize(
    ("dtype", "block"),
    [
        pytest.param(dtype, block, id=_id(_product_kernel(dtype, block), dtype))
        for dtype in DTYPES[1:]
        for block in (16, 32, 64)
        if _product_kernel(dtype, block).startswith("product_mma")
    ],
)
def test_tensor_core_product_in_descending_thread_order(dtype, block):
    emulated, memory = emulated_kernels(), HostMemory()
    emulated.reset(descending=True)
    rng = np.random.default_rng(11)
    layout = _layout(rng, 2, 3)
    m, nnz = 130, int(layout.sum())
    x_raw, x = to_dtype(rng.standard_normal((m, 2 * block)), dtype)
    w_raw, w = to_dtype(rng.standard_normal((nnz, block, block)), dtype)
    dense = ref.block_dense(layout, w)
    plan = [memory.put(p) for p in block_plan(emulated.lib, layout, True)]
    out = memory.empty(np.dtype(STORAGE[dtype]).itemsize * m * 3 * block)
    emulated.product(dtype, memory.put(x_raw), m, 2, 3, block, memory.put(w_raw), plan, False, out)
    assert emulated.launched() == [_product_kernel(dtype, block)]
    got = from_dtype(memory.get(out, STORAGE[dtype], (m, 3 * block)), dtype)
    ref.check_close(got, x @ dense, np.abs(x) @ np.abs(dense), dtype, "y = x @ W")
    assert not got[:, block : 2 * block].any()  # the output column without blocks


WEIGHT_GRADS = [
    pytest.param(dtype, block, m, id=f"{_id(_weight_grad_kernel(dtype, block), dtype)}-m {m}")
    for dtype in DTYPES
    for block in (8, 16, 32, 64)
    # one row; a partial last chunk of rows for every chunk height (4096 / block; 32-128 on tensor cores), and
    # several chunks, so both stages of the tensor-core kernels' pipeline are used
    for m in (1, 75, 301)
]


@pytest.mark.parametrize(("dtype", "block", "m"), WEIGHT_GRADS)
def test_weight_gradient_per_block_matches_x_transposed_dy(dtype, block, m):
    emulated, memory = emulated_kernels(), HostMemory()
    rng = np.random.default_rng(block * 5 + m)
    layout = _layout(rng, 3, 2)
    nnz = int(layout.sum())
    x_raw, x = to_dtype(rng.standard_normal((m, 3 * block)), dtype)
    dy_raw, dy = to_dtype(rng.standard_normal((m, 2 * block)), dtype)
    blocks = memory.put(np.argwhere(layout).astype(np.int32))
    dw = memory.empty(np.dtype(STORAGE[dtype]).itemsize * nnz * block * block)
    emulated.weight_grad(dtype, memory.put(x_raw), memory.put(dy_raw), m, 3, 2, block, blocks, nnz, dw)
    assert emulated.launched() == [_weight_grad_kernel(dtype, block)]
    got = from_dtype(memory.get(dw, STORAGE[dtype], (nnz, block, block)), dtype)
    full, bound = x.T @ dy, np.abs(x.T) @ np.abs(dy)
    pick = [(slice(r * block, (r + 1) * block), slice(c * block, (c + 1) * block)) for r, c in np.argwhere(layout)]
    want, bounds = np.stack([full[p] for p in pick]), np.stack([bound[p] for p in pick])
    ref.check_close(got, want, bounds, dtype, "dw = x^T @ dy")


def test_no_rows_or_no_blocks_launch_nothing():
    emulated, memory = emulated_kernels(), HostMemory()
    layout = np.zeros((2, 2), bool)
    plan = [memory.put(p) for p in block_plan(emulated.lib, layout, True)]
    nothing = memory.empty(16)
    emulated.product("float32", nothing, 0, 2, 2, 8, nothing, plan, False, nothing)
    emulated.weight_grad("float32", nothing, nothing, 4, 2, 2, 8, nothing, 0, nothing)
    assert emulated.launched() == []


def test_an_all_empty_layout_writes_zero_outputs():
    emulated, memory = emulated_kernels(), HostMemory()
    layout = np.zeros((2, 3), bool)
    plan = [memory.put(p) for p in block_plan(emulated.lib, layout, True)]
    out = memory.empty(4 * 5 * 3 * 16)
    x = memory.put(np.ones((5, 2 * 16), np.float32))
    emulated.product("float32", x, 5, 2, 3, 16, memory.empty(16), plan, False, out)
    assert emulated.launched() == ["product_simt<float, 16>"]
    assert not memory.get(out, np.float32, (5, 3 * 16)).any()


@pytest.mark.parametrize("block", [12, 128])
def test_block_sizes_the_kernels_lack_are_refused(block):
    emulated, memory = emulated_kernels(), HostMemory()
    plan = [memory.put(p) for p in block_plan(emulated.lib, np.ones((1, 1), bool), True)]
    buffer = memory.empty(4 * block * block)
    with pytest.raises(RuntimeError, match="status -1"):
        emulated.product("float32", buffer, 1, 1, 1, block, buffer, plan, False, buffer)
    assert emulated.launched() == []


def test_tf32_is_opt_in_and_rounds_the_products_inputs():
    emulated, memory = emulated_kernels(), HostMemory()
    rng = np.random.default_rng(3)
    layout = _layout(rng, 3, 4)
    m, block, nnz = 70, 32, int(layout.sum())
    x = rng.standard_normal((m, 3 * block)).astype(np.float32)
    w = rng.standard_normal((nnz, block, block)).astype(np.float32)
    dense = ref.block_dense(layout, w.astype(np.float64))
    want = x.astype(np.float64) @ dense
    plan = [memory.put(p) for p in block_plan(emulated.lib, layout, True)]
    got = {}
    for dtype in ("float32", "tf32"):
        emulated.reset()
        out = memory.empty(4 * m * 4 * block)
        emulated.product(dtype, memory.put(x), m, 3, 4, block, memory.put(w), plan, False, out)
        assert emulated.launched() == [_product_kernel(dtype, block)]
        got[dtype] = memory.get(out, np.float32, (m, 4 * block)).astype(np.float64)
    ref.check_close(got["float32"], want, np.abs(x) @ np.abs(dense), "float32", "float32 stays on CUDA cores")
    normwise = np.abs(got["tf32"] - want).max() / np.abs(want).max()
    # TF32 keeps 10 mantissa bits of each input: its error is far above float32's and below 2^-10 of the scale.
    assert 2.0**-16 < normwise < 2.0**-10
