"""Robustness of the CUDA kernels' C entry points, run on the CPU emulation: CUB's status is returned,
scans read only what was written, malformed block-sparse plans are refused, the forward honours the
determinism switch."""

import ctypes

import numpy as np
import pytest

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

