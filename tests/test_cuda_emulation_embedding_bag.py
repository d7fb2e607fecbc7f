"""The __global__ kernels of ops/cuda/embedding_bag.cu, run on the CPU emulation, against the numpy references.

Each test's id names the kernels it runs, and the test checks from the emulation's launch log that exactly
those ran. Every case runs with the block's threads (and the blocks) in ascending and in descending order.
"""

import zlib

import numpy as np
import pytest

from benchmarks import kernel_references as ref
from benchmarks.gpu_kernel_data import Bag
from tests._cuda_emulation import HostMemory, emulated_kernels

ORDERS = [pytest.param(False, id="ascending"), pytest.param(True, id="descending")]


def _bag(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if name == "odd sizes, empty bags, padding":
        return Bag(rng, 37, 50, 12, 6, padding=5)
    if name == "dim 3":
        return Bag(rng, 29, 20, 3, 4, padding=2)
    if name == "wide odd rows":  # more values than a warp has lanes: every lane strides, all 32 shares count
        return Bag(rng, 13, 25, 67, 4, padding=2)
    if name == "wide rows":
        return Bag(rng, 7, 25, 200, 4)
    if name == "hot id":
        bag = Bag(rng, 9, 40, 8, 120)
        bag.cols[: bag.n * 2 // 3] = 17  # one id in most entries, across blocks of the grid
        return bag
    if name == "bad ids and rows":
        bag = Bag(rng, 11, 30, 8, 5, padding=3)
        bag.cols[[1, 4]] = [30, -2]  # ids outside [0, vocab): skipped, never read
        bag.rows[0] = -1  # a row before the first sample: skipped
        return bag
    if name == "unsorted rows, padding":
        return Bag(rng, 33, 30, 16, 5, padding=7, shuffle=True)
    if name == "no entries":
        return Bag(rng, 4, 10, 8, 0)
    if name == "only padding":
        return Bag(rng, 3, 10, 4, 0, padding=6)
    raise KeyError(name)


SORTED_CASES = [
    "odd sizes, empty bags, padding", "dim 3", "wide odd rows", "wide rows", "hot id", "bad ids and rows",
    "no entries", "only padding",
]
FORWARD = [
    pytest.param(case, mode, kernels, id=f"{'+'.join(kernels) or 'no kernel'}-{case}-rows_sorted={mode}")
    for case in [*SORTED_CASES, "unsorted rows, padding"]
    for mode in ((1, 0, -1) if case != "unsorted rows, padding" else (0, -1))
    for kernels in [
        (["find_unsorted"] if mode == -1 and _bag(case).n > 1 else [])
        + ([f"bag_forward_sorted<{1 if _bag(case).dim % 4 else 4}>"] if mode != 0 else [])
        + (["zero_if_unsorted"] if mode != 1 else [])
        + (["bag_forward_atomic"] if mode != 1 and _bag(case).n > 0 else [])
    ]
]


@pytest.mark.parametrize("descending", ORDERS)
@pytest.mark.parametrize(("case", "mode", "kernels"), FORWARD)
def test_forward_kernels_match_the_numpy_sums(case, mode, kernels, descending):
    emulated, memory, bag = emulated_kernels(), HostMemory(), _bag(case)
    emulated.reset(descending)
    out = memory.empty(4 * bag.sample_count * bag.dim)  # NaN until written: empty bags must be written too
    emulated.bag_forward(memory.put(bag.table), bag.vocab, bag.dim, memory.put(bag.rows), memory.put(bag.cols),
                         memory.put(bag.gains), bag.n, bag.sample_count, mode, memory.empty(4), out)
    assert emulated.launched() == kernels
    want, bound = ref.embedding_bag(bag.table, bag.rows, bag.cols, bag.gains, bag.sample_count)
    got = memory.get(out, np.float32, (bag.sample_count, bag.dim))
    ref.check_close(got, want, bound, "float32", f"forward, {case}")
    assert not got[bag.lengths == 0].any() or case == "bad ids and rows"


CHECKS = {
    "no bad entries": ([0, 0, 1, 2, 3], [1, 4, 2, 0, 4], 3, 5),
    "bad id, negative row, row past padding": ([0, 0, 1, -1, 2, 9, 3, 3], [1, 4, 2, 3, 0, 1, 2, 7], 3, 5),
    "one entry, bad id": ([0], [5], 1, 5),
    "no entries": ([], [], 2, 5),
}


@pytest.mark.parametrize("descending", ORDERS)
@pytest.mark.parametrize("case", list(CHECKS))
def test_check_entries_and_fill_first_bad_report_the_first_bad_positions(case, descending):
    rows, cols, samples, vocab = CHECKS[case]
    rows, cols = np.array(rows, np.int32), np.array(cols, np.int64)
    _check(rows, cols, samples, vocab, descending)


@pytest.mark.parametrize("descending", ORDERS)
def test_check_entries_over_several_blocks_keeps_the_first(descending):
    # 700 entries: three blocks of 256 threads, bad entries in the second and third (atomicMin across blocks).
    rng = np.random.default_rng(3)
    rows = np.sort(rng.integers(0, 50, 700)).astype(np.int32)
    cols = rng.integers(0, 90, 700).astype(np.int64)
    cols[[650, 300, 301]] = [90, -1, 1000]
    rows[[699, 520]] = [51, -3]
    _check(rows, cols, 50, 90, descending)


def _check(rows, cols, samples, vocab, descending):
    emulated, memory = emulated_kernels(), HostMemory()
    emulated.reset(descending)
    first = memory.empty(16)
    emulated.bag_check(memory.put(rows), memory.put(cols), rows.size, samples, vocab, first)
    assert emulated.launched() == ["fill_first_bad"] + (["check_entries"] if rows.size else [])
    got = tuple(int(v) for v in memory.get(first, np.int64, (2,)))
    assert got == ref.first_bad_entries(rows, cols, samples, vocab)


GRAD_CASES = [*SORTED_CASES, "unsorted rows, padding"]
CUB = ["cub::DeviceRadixSort::SortPairs", "cub::DeviceRunLengthEncode::Encode"]


def _grad_kernels(case):
    bag = _bag(case)
    if bag.n == 0:
        return []
    return ["make_keys", *CUB, "segment_starts", "count_unique", f"grad_rows_kernel<{1 if bag.dim % 4 else 4}>"]


def _kernel_names(launched):
    """The test id's part naming our __global__ kernels (CUB's calls left out)."""
    return "+".join(name for name in launched if not name.startswith("cub::")) or "no kernel"


@pytest.mark.parametrize("descending", ORDERS)
@pytest.mark.parametrize(
    "case", [pytest.param(case, id=f"{_kernel_names(_grad_kernels(case))}-{case}") for case in GRAD_CASES]
)
def test_gradient_kernels_sum_each_distinct_ids_rows(case, descending):
    emulated, memory, bag = emulated_kernels(), HostMemory(), _bag(case)
    emulated.reset(descending)
    s, v, d, n = bag.sample_count, bag.vocab, bag.dim, bag.n
    out_grad = np.random.default_rng(8).standard_normal((s, d)).astype(np.float32)
    rows, gains = memory.put(bag.rows), memory.put(bag.gains)
    workspace = memory.empty(emulated.grad_workspace_bytes(n, v))
    ids, count, d_rows = memory.empty(8 * max(n, 1)), memory.empty(8), memory.empty(4 * max(n, 1) * d)
    emulated.grad_ids(rows, memory.put(bag.cols), n, s, v, workspace, ids, count)
    emulated.grad_rows(memory.put(out_grad), d, rows, gains, n, workspace, count, n, d_rows)
    assert emulated.launched() == _grad_kernels(case)
    want_ids, want_rows, bound = ref.embedding_bag_grad(out_grad, bag.rows, bag.cols, bag.gains, s, v)
    unique = int(memory.get(count, np.int64, (1,))[0])
    np.testing.assert_array_equal(memory.get(ids, np.int64, (max(n, 1),))[:unique], want_ids)
    got = memory.get(d_rows, np.float32, (max(n, 1), d))[:unique]
    ref.check_close(got, want_rows, bound, "float32", f"table gradient, {case}")
    if case == "hot id":
        assert (bag.cols == 17).sum() > 256 and 17 in want_ids


@pytest.mark.parametrize("descending", ORDERS)
@pytest.mark.parametrize(
    "case", [pytest.param(c, id=f"{'grad_gains_kernel' if _bag(c).n else 'no kernel'}-{c}") for c in GRAD_CASES]
)
def test_gains_gradient_kernel_reduces_each_entry_over_a_warp(case, descending):
    emulated, memory, bag = emulated_kernels(), HostMemory(), _bag(case)
    emulated.reset(descending)
    s, n = bag.sample_count, bag.n
    out_grad = np.random.default_rng(9).standard_normal((s, bag.dim)).astype(np.float32)
    d_gains = memory.empty(4 * max(n, 1))
    emulated.grad_gains(memory.put(out_grad), memory.put(bag.table), bag.vocab, bag.dim, memory.put(bag.rows),
                        memory.put(bag.cols), n, s, d_gains)
    assert emulated.launched() == (["grad_gains_kernel"] if n else [])
    want, bound = ref.embedding_bag_gains_grad(out_grad, bag.table, bag.rows, bag.cols, s)
    got = memory.get(d_gains, np.float32, (max(n, 1),))[:n]
    ref.check_close(got, want, bound, "float32", f"gains gradient, {case}")
