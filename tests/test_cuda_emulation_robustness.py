"""Robustness of the CUDA kernels' C entry points, run on the CPU emulation: CUB's status is returned,
scans read only what was written, malformed block-sparse plans are refused, a failed device query is a
CUDA error, the forward honours the determinism switch."""

import ctypes

import numpy as np
import pytest

from benchmarks import kernel_references as ref
from benchmarks._cuda_kernels import DTYPE_CODES, block_plan
from benchmarks.gpu_kernel_data import Bag
from tests._cuda_emulation import HostMemory, emulated_kernels

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_MEMORY_ALLOCATION = 2


def _fail_cub_call(emulated, calls_before, error):
    emulated.lib.cuda_on_cpu_fail_cub_call.argtypes = [ctypes.c_int, ctypes.c_int]
    emulated.lib.cuda_on_cpu_fail_cub_call(calls_before, error)


def _status(emulated, name, *args):
    return getattr(emulated.lib, name)(*args)


def _statuses_with_each_cub_call_failing(emulated, call, error):
    """The status of `call()` with the k-th CUB call (queries included) failing, for k = 0, 1, ... 11."""
    statuses = []
    for k in range(12):
        emulated.reset()
        _fail_cub_call(emulated, k, error)
        statuses.append(call())
    return statuses


def _failed_then_succeeded(statuses, error):
    """How many leading calls failed with `error`, checking that every later one succeeded."""
    failed = next((i for i, status in enumerate(statuses) if status != error), len(statuses))
    assert statuses[failed:] == [0] * (len(statuses) - failed), statuses
    return failed


def test_a_failed_temp_storage_query_is_the_workspace_functions_error():
    emulated = emulated_kernels()
    size = ctypes.c_size_t(0)

    def call():
        return _status(emulated, "sparseflow_embedding_bag_grad_workspace", 50, 30, ctypes.byref(size))

    statuses = _statuses_with_each_cub_call_failing(emulated, call, CUDA_ERROR_INVALID_VALUE)
    assert _failed_then_succeeded(statuses, CUDA_ERROR_INVALID_VALUE) >= 2  # the sort's and the encode's queries
    assert not emulated.launched()


def test_every_failed_cub_call_is_the_gradient_ids_error():
    emulated, memory = emulated_kernels(), HostMemory()
    bag = Bag(np.random.default_rng(4), 9, 30, 8, 6)
    workspace = memory.empty(emulated.grad_workspace_bytes(bag.n, bag.vocab))
    ids, count = memory.empty(8 * bag.n), memory.empty(8)
    rows, cols = memory.put(bag.rows), memory.put(bag.cols)

    def call():
        return _status(emulated, "sparseflow_embedding_bag_grad_ids", rows.ptr, cols.ptr, bag.n, bag.sample_count,
                       bag.vocab, workspace.ptr, workspace.nbytes, ids.ptr, count.ptr, None)

    statuses = _statuses_with_each_cub_call_failing(emulated, call, CUDA_ERROR_MEMORY_ALLOCATION)
    failed = _failed_then_succeeded(statuses, CUDA_ERROR_MEMORY_ALLOCATION)
    launched = [name for name in emulated.launched() if name.startswith("cub::")]
    assert failed >= len(launched) >= 2  # every launch's failure (and any query's) came back


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
def test_the_segment_starts_read_only_the_counts_the_encode_wrote(descending):
    # Entries over 9 ids and padding: the encode writes at most 10 runs (the padding's sentinel run included)
    # into a counts array of n slots; nothing after it may read the slots past the runs (0xFF bytes here).
    emulated, memory = emulated_kernels(), HostMemory()
    bag = Bag(np.random.default_rng(6), 12, 9, 8, 10, padding=4)
    n, v, s = bag.n, bag.vocab, bag.sample_count
    workspace = memory.empty(emulated.grad_workspace_bytes(n, v))
    ids, count = memory.empty(8 * n), memory.empty(8)
    emulated.reset(descending)
    emulated.grad_ids(memory.put(bag.rows), memory.put(bag.cols), n, s, v, workspace, ids, count)
    keys = np.where((bag.rows >= 0) & (bag.rows < s) & (bag.cols >= 0) & (bag.cols < v), bag.cols, v)
    runs = len(np.unique(keys))
    assert runs < n
    log = emulated.launches()
    encode = [name for name, _, _ in log].index("cub::DeviceRunLengthEncode::Encode")
    for name, grid, _ in log[encode + 1:]:
        if name.startswith("cub::"):
            assert grid[0] <= runs, f"{name} ran over {grid[0]} counts, {runs} written"
    # The starts the rows' gradient reads: the first sorted position of each distinct id.
    unique = int(memory.get(count, np.int64, (1,))[0])
    want = np.searchsorted(np.sort(keys), np.unique(keys))[:unique]
    got = _starts(memory, workspace, n)[:unique]
    np.testing.assert_array_equal(got, want)


def _starts(memory, workspace, n):
    """The segment starts in the gradient's workspace (the sixth of its 256-byte aligned arrays of n int64)."""
    array = (n * 8 + 255) // 256 * 256
    return memory.get(workspace, np.int64, (6 * array // 8,))[5 * array // 8 : 5 * array // 8 + n]


SPARSEFLOW_E_PLAN = -4
LAYOUT = np.array([[1, 0, 1, 1], [0, 0, 1, 0], [1, 0, 0, 1]], bool)  # 3 x 4 blocks, 6 of them, column 1 empty


def _check_plan(emulated, offsets, partners, slots, outputs, a_blocks, w_blocks):
    offsets, partners, slots = (np.ascontiguousarray(v, np.int32) for v in (offsets, partners, slots))
    function = emulated.lib.sparseflow_block_sparse_check_plan
    function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int32] * 4
    return function(offsets.ctypes.data, partners.ctypes.data, slots.ctypes.data, len(partners), outputs, a_blocks,
                    w_blocks)


def _well_formed(emulated, by_column):
    offsets, partners, slots = block_plan(emulated.lib, LAYOUT, by_column)
    return [offsets.copy(), partners.copy(), slots.copy()]


MALFORMED_PLANS = {
    "offsets not starting at 0": lambda p: p[0].__setitem__(0, 1),
    "offsets decreasing": lambda p: p[0].__setitem__(2, p[0][1] - 1),
    "offsets past the members": lambda p: p[0].__setitem__(-1, len(p[1]) + 1),
    "fewer members than blocks": lambda p: p[0].__setitem__(-1, len(p[1]) - 1),
    "negative partner": lambda p: p[1].__setitem__(2, -1),
    "partner past a's blocks": lambda p: p[1].__setitem__(0, 3),
    "slot past w's blocks": lambda p: p[2].__setitem__(1, 6),
    "negative slot": lambda p: p[2].__setitem__(5, -7),
}


@pytest.mark.parametrize("by_column", [True, False], ids=["by column", "by row"])
@pytest.mark.parametrize("case", list(MALFORMED_PLANS))
def test_a_malformed_plan_is_refused_before_any_launch(case, by_column):
    emulated = emulated_kernels()
    plan = _well_formed(emulated, by_column)
    outputs, a_blocks = (4, 3) if by_column else (3, 4)
    assert _check_plan(emulated, *plan, outputs, a_blocks, 6) == 0
    if case == "partner past a's blocks":
        plan[1][0] = a_blocks
    else:
        MALFORMED_PLANS[case](plan)
    assert _check_plan(emulated, *plan, outputs, a_blocks, 6) == SPARSEFLOW_E_PLAN
    assert emulated.launched() == []


def test_a_plan_for_other_shapes_is_refused():
    emulated = emulated_kernels()
    plan = _well_formed(emulated, True)
    assert _check_plan(emulated, *plan, 4, 3, 6) == 0
    assert _check_plan(emulated, *plan, 4, 3, 7) == SPARSEFLOW_E_PLAN  # w holds another number of blocks
    assert _check_plan(emulated, *plan, 4, 2, 6) == SPARSEFLOW_E_PLAN  # a has fewer block columns than partners
    assert _check_plan(emulated, *plan[:1], plan[1][:5], plan[2][:5], 4, 3, 6) == SPARSEFLOW_E_PLAN  # short arrays


BLOCK_LISTS = {
    "well formed": ([[0, 0], [0, 2], [2, 3]], 0),
    "row past x's blocks": ([[0, 0], [3, 2]], SPARSEFLOW_E_PLAN),
    "column past dy's blocks": ([[0, 4]], SPARSEFLOW_E_PLAN),
    "negative row": ([[-1, 0]], SPARSEFLOW_E_PLAN),
    "negative column": ([[1, 1], [0, -3]], SPARSEFLOW_E_PLAN),
}


@pytest.mark.parametrize("case", list(BLOCK_LISTS))
def test_weight_gradient_blocks_outside_the_shapes_are_refused(case):
    emulated = emulated_kernels()
    blocks, want = BLOCK_LISTS[case]
    blocks = np.ascontiguousarray(blocks, np.int32)
    function = emulated.lib.sparseflow_block_sparse_check_blocks
    function.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
    assert function(blocks.ctypes.data, len(blocks), 3, 4) == want
    assert emulated.launched() == []


CUDA_ERROR_NO_DEVICE = 100


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_failed_device_query_on_the_tensor_core_path_is_a_cuda_error(dtype):
    emulated, memory = emulated_kernels(), HostMemory()
    plan = [memory.put(p) for p in block_plan(emulated.lib, LAYOUT, True)]
    a, w, out = memory.empty(2 * 4 * 3 * 16), memory.empty(2 * 6 * 16 * 16), memory.empty(2 * 4 * 4 * 16)
    emulated.lib.cuda_on_cpu_fail_device_query.argtypes = [ctypes.c_int]
    emulated.lib.cuda_on_cpu_fail_device_query(CUDA_ERROR_NO_DEVICE)
    status = emulated.lib.sparseflow_block_sparse_product(DTYPE_CODES[dtype], a.ptr, 4, 3, 4, 16, w.ptr, plan[0].ptr,
                                                          plan[1].ptr, plan[2].ptr, 0, out.ptr, None)
    assert status == CUDA_ERROR_NO_DEVICE  # the runtime's error, not SPARSEFLOW_E_ARGUMENT ("bad argument")
    assert emulated.launched() == []


def _forward(emulated, memory, bag, rows_sorted, deterministic, descending):
    emulated.reset(descending)
    out = memory.empty(4 * bag.sample_count * bag.dim)
    emulated.bag_forward(memory.put(bag.table), bag.vocab, bag.dim, memory.put(bag.rows), memory.put(bag.cols),
                         memory.put(bag.gains), bag.n, bag.sample_count, rows_sorted,
                         memory.empty(emulated.forward_scratch_bytes(bag.sample_count)), out,
                         deterministic=deterministic)
    return memory.get(out, np.float32, (bag.sample_count, bag.dim)), emulated.launched()


@pytest.mark.parametrize(
    ("shuffle", "rows_sorted"),
    [  # rows_sorted=1 promises sorted rows
        pytest.param(shuffle, mode, id=f"{'unsorted' if shuffle else 'sorted'} rows-rows_sorted={mode}")
        for shuffle, mode in [(False, 1), (False, 0), (False, -1), (True, 0), (True, -1)]
    ],
)
def test_the_deterministic_forward_never_adds_atomically_and_repeats_bit_for_bit(shuffle, rows_sorted):
    emulated, memory = emulated_kernels(), HostMemory()
    # Up to 90 entries per bag with gains over two decades: summed in another order, float32 sums differ.
    bag = Bag(np.random.default_rng(12), 7, 40, 6, 90, padding=5, shuffle=shuffle, gain_range=(0.1, 10.0))
    ascending, launched = _forward(emulated, memory, bag, rows_sorted, True, descending=False)
    descending, launched_descending = _forward(emulated, memory, bag, rows_sorted, True, descending=True)
    assert "bag_forward_atomic" not in launched and launched == launched_descending
    assert ascending.tobytes() == descending.tobytes()
    want, bound = ref.embedding_bag(bag.table, bag.rows, bag.cols, bag.gains, bag.sample_count)
    ref.check_close(ascending, want, bound, "float32", "deterministic forward")
    # The atomic path on the same data does depend on the order: the comparison above can see it.
    atomic_ascending, launched_atomic = _forward(emulated, memory, bag, 0, False, descending=False)
    atomic_descending, _ = _forward(emulated, memory, bag, 0, False, descending=True)
    assert "bag_forward_atomic" in launched_atomic and atomic_ascending.tobytes() != atomic_descending.tobytes()
    if not shuffle:  # the same sums, in the same (entry) order, as the sorted kernel's
        sorted_out, _ = _forward(emulated, memory, bag, 1, False, descending=False)
        assert ascending.tobytes() == sorted_out.tobytes()
