"""The __global__ kernels of ops/cuda/embedding_bag.cu, run on the CPU emulation, against the numpy references.

Each test's id names the kernels it runs, and the test checks from the emulation's launch log that exactly
those ran. Every case runs with the block's threads (and the blocks) in ascending and in descending order.
"""

import numpy as np
import pytest

from benchmarks import kernel_references as ref
from benchmarks.gpu_kernel_cases import (
    CHECK_CASES,
    FORWARD_CASES,
    GRAD_CASES,
    HOT_IDS,
    bag_case,
    check_case,
    forward_modes,
)
from tests._cuda_emulation import HostMemory, emulated_kernels

ORDERS = [pytest.param(False, id="ascending"), pytest.param(True, id="descending")]
_bag = bag_case

FORWARD = [
    pytest.param(case, mode, kernels, id=f"{'+'.join(kernels) or 'no kernel'}-{case}-rows_sorted={mode}")
    for case in FORWARD_CASES
    for mode in forward_modes(case)
    for kernels in [
        (["find_unsorted"] if mode == -1 and _bag(case).n > 1 else [])
        + (["bag_offsets", f"bag_forward_sorted<{1 if _bag(case).dim % 4 else 4}>"] if mode != 0 else [])
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
                         memory.put(bag.gains), bag.n, bag.sample_count, mode,
                         memory.empty(emulated.forward_scratch_bytes(bag.sample_count)), out)
    assert emulated.launched() == kernels
    want, bound = ref.embedding_bag(bag.table, bag.rows, bag.cols, bag.gains, bag.sample_count)
    got = memory.get(out, np.float32, (bag.sample_count, bag.dim))
    ref.check_close(got, want, bound, "float32", f"forward, {case}")
    assert not got[bag.lengths == 0].any() or case == "bad ids and rows"
    if mode == 1:  # the documented order: entry by entry, whatever the read-ahead (float32 adds as g++ emits them)
        assert got.tobytes() == _forward_in_entry_order(bag).tobytes()


def _forward_in_entry_order(bag):
    """The sorted forward as bag_logic.h documents it: per bag, acc = 0, acc += gain * row, entry by entry."""
    out = np.zeros((bag.sample_count, bag.dim), np.float32)
    for k in range(bag.n):
        row, col = bag.rows[k], bag.cols[k]
        if 0 <= row < bag.sample_count and 0 <= col < bag.vocab:
            out[row] = out[row] + bag.gains[k] * bag.table[col]
    return out


@pytest.mark.parametrize("descending", ORDERS)
@pytest.mark.parametrize("case", CHECK_CASES)
def test_check_entries_and_fill_first_bad_report_the_first_bad_positions(case, descending):
    _check(*check_case(case), descending)


def _check(rows, cols, samples, vocab, descending):
    emulated, memory = emulated_kernels(), HostMemory()
    emulated.reset(descending)
    first = memory.empty(16)
    emulated.bag_check(memory.put(rows), memory.put(cols), rows.size, samples, vocab, first)
    assert emulated.launched() == ["fill_first_bad"] + (["check_entries"] if rows.size else [])
    got = tuple(int(v) for v in memory.get(first, np.int64, (2,)))
    assert got == ref.first_bad_entries(rows, cols, samples, vocab)


CUB = ["cub::DeviceRadixSort::SortPairs", "cub::DeviceRunLengthEncode::Encode"]


def _grad_kernels(case):
    bag = _bag(case)
    if bag.n == 0:
        return []
    v = 1 if bag.dim % 4 else 4
    chunks = [f"grad_chunk_partials<{v}>"] if bag.n > max(256, bag.dim) else []  # only then can an id be long
    return ["make_keys", *CUB, "segment_starts", "count_unique", *chunks, f"grad_rows_kernel<{v}>"]


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


def _grad_in_documented_order(out_grad, bag):
    """The table gradient's rows in the order sparseflow_kernels.h documents, in float32 as g++ emits the adds:
    entries sorted stably by id; an id of at most max(256, dim) entries summed entry by entry; a longer one summed
    per chunk of max(256, dim) positions of the sorted order, then the chunks' sums added in chunk order."""
    s, v, d = bag.sample_count, bag.vocab, bag.dim
    counts = (bag.rows >= 0) & (bag.rows < s) & (bag.cols >= 0) & (bag.cols < v)
    keys = np.where(counts, bag.cols, v)
    order = np.argsort(keys, kind="stable")
    chunk = max(256, d)
    ids = np.unique(keys[counts])
    rows = np.zeros((ids.size, d), np.float32)
    for u, col in enumerate(ids):
        positions = np.flatnonzero(keys[order] == col)  # consecutive positions of the sorted order
        parts = [positions] if positions.size <= chunk else np.split(
            positions, np.flatnonzero(np.diff(positions // chunk)) + 1)
        total = np.zeros(d, np.float32)
        for part in parts:
            acc = np.zeros(d, np.float32)
            for j in part:
                k = order[j]
                acc = acc + bag.gains[k] * out_grad[bag.rows[k]]
            total = total + acc
        rows[u] = total
    return ids, rows


@pytest.mark.parametrize(
    "case", [pytest.param(case, id=f"{_kernel_names(_grad_kernels(case))}-{case}") for case in HOT_IDS]
)
def test_a_very_hot_id_is_summed_in_chunks_in_a_fixed_order(case):
    emulated, memory, bag = emulated_kernels(), HostMemory(), _bag(case)
    s, v, d, n = bag.sample_count, bag.vocab, bag.dim, bag.n
    dim, hot = HOT_IDS[case]
    assert d == dim and max(hot.values()) > 3 * max(256, d)  # several chunks long
    out_grad = np.random.default_rng(10).standard_normal((s, d)).astype(np.float32)
    results = []
    for descending in (False, True):
        emulated.reset(descending)
        rows, gains = memory.put(bag.rows), memory.put(bag.gains)
        workspace = memory.empty(emulated.grad_workspace_bytes(n, v))
        ids, count, d_rows = memory.empty(8 * n), memory.empty(8), memory.empty(4 * n * d)
        emulated.grad_ids(rows, memory.put(bag.cols), n, s, v, workspace, ids, count)
        emulated.grad_rows(memory.put(out_grad), d, rows, gains, n, workspace, count, n, d_rows)
        assert f"grad_chunk_partials<{1 if d % 4 else 4}>" in emulated.launched()
        unique = int(memory.get(count, np.int64, (1,))[0])
        results.append((memory.get(ids, np.int64, (n,))[:unique], memory.get(d_rows, np.float32, (n, d))[:unique]))
    (got_ids, got), (_, got_descending) = results
    assert got.tobytes() == got_descending.tobytes()  # whatever order the threads run in
    want_ids, want = _grad_in_documented_order(out_grad, bag)
    np.testing.assert_array_equal(got_ids, want_ids)
    for col, count in hot.items():
        assert (bag.cols[bag.rows < s] == col).sum() == count
    assert got.tobytes() == want.tobytes()
    _, summed, bound = ref.embedding_bag_grad(out_grad, bag.rows, bag.cols, bag.gains, s, v)
    ref.check_close(got, summed, bound, "float32", f"table gradient, {case}")


@pytest.mark.parametrize("rows_sorted", [1, -1])
def test_the_sorted_forward_refuses_a_missing_scratch_for_its_offsets(rows_sorted):
    emulated, memory, bag = emulated_kernels(), HostMemory(), _bag("dim 3")
    out = memory.empty(4 * bag.sample_count * bag.dim)
    status = emulated.lib.sparseflow_embedding_bag_forward(
        memory.put(bag.table).ptr, bag.vocab, bag.dim, memory.put(bag.rows).ptr, memory.put(bag.cols).ptr,
        memory.put(bag.gains).ptr, bag.n, bag.sample_count, rows_sorted, 0, None, out.ptr, None)
    assert status == -1 and emulated.launched() == []  # SPARSEFLOW_E_ARGUMENT, nothing launched
