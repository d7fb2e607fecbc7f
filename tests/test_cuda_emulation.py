"""The CPU emulation of CUDA itself (ops/cuda/emulation/): its warp intrinsics, atomics, shared memory, WMMA
fragments, 16-bit conversions and CUB sort, through the probe kernels of tests/cuda_emulation_probes.cu, each
checked against CUDA's documented semantics computed here; the faults it reports for what a GPU forbids; and
the rewrite of launches that lets g++ compile the .cu files unchanged.

The kernels of ops/cuda/ themselves run in test_cuda_emulation_embedding_bag.py and
test_cuda_emulation_block_sparse.py.
"""

import ctypes

import numpy as np
import pytest

from benchmarks import kernel_references as ref
from benchmarks.cuda_build import rewrite_launches
from benchmarks.gpu_kernel_checks import Checks, check_block_sparse, check_embedding_bag
from tests._cuda_emulation import HostMemory, emulated_kernels, probes

LAUNCH_FAILURE, INVALID_CONFIGURATION, INVALID_VALUE = 719, 9, 1


def _a(array):
    return ctypes.c_void_p(array.ctypes.data)


def _aligned(array, alignment=256):
    """A copy of array at an address that is a multiple of alignment (WMMA wants 256-bit aligned tiles)."""
    raw = np.zeros(array.nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    copy = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


@pytest.mark.parametrize("descending", [False, True])
def test_warp_shuffles_votes_and_syncthreads_count_follow_cuda(descending):
    lib = probes()
    lib.cuda_on_cpu_set_order(int(descending))
    threads = 64
    out = np.full(8 * threads, -1, np.int32)
    assert lib.probe_warp_intrinsics(_a(out), threads) == 0
    t = np.arange(threads)
    lane, base = t % 32, 100 * (t // 32)
    down = np.where(lane + 3 < 32, lane + 3, lane)
    up = np.where(lane - 2 >= lane // 8 * 8, lane - 2, lane)
    want = [base + down, base + up, base + (lane ^ 5), base + lane // 16 * 16 + 7,
            np.full(threads, sum(1 << k for k in range(0, 32, 3))), np.ones(threads), np.zeros(threads),
            np.full(threads, threads // 4)]
    np.testing.assert_array_equal(out.reshape(8, threads), np.array(want))


def test_a_partial_last_warp_takes_part_through_its_mask():
    lib = probes()
    out = np.zeros(40, np.uint32)
    assert lib.probe_partial_warp(_a(out)) == 0
    lane = np.arange(40) % 32
    group_sums = 8 * (lane // 8 * 8) + 28  # lanes of an 8-lane group summed by xor 4, 2, 1
    ballots = np.where(np.arange(40) < 32, 0xFFFFFF00, 0xFF << 8)
    np.testing.assert_array_equal(out, (group_sums + ballots).astype(np.uint32))


def test_atomics_across_blocks():
    lib = probes()
    total, least, count = np.zeros(1, np.float32), np.full(1, 10**6, np.uint64), np.zeros(1, np.int32)
    assert lib.probe_atomics(_a(total), _a(least), _a(count), 3, 100) == 0
    assert (total[0], least[0], count[0]) == (150.0, 1000 - 299, 300)


@pytest.mark.parametrize("descending", [False, True])
def test_shared_memory_is_per_block_in_two_dimensional_grids_and_blocks(descending):
    lib = probes()
    lib.cuda_on_cpu_set_order(int(descending))
    values = np.arange(6 * 64, dtype=np.int32) * 3
    out = np.zeros_like(values)
    assert lib.probe_shared_reverse(_a(values), _a(out)) == 0
    np.testing.assert_array_equal(out.reshape(6, 64), values.reshape(6, 64)[:, ::-1])


def test_every_block_starts_with_its_shared_memory_poisoned():
    lib = probes()
    out = np.zeros(3 * 64, np.uint32)
    for _ in range(2):  # a second launch of the kernel sees no values left by the first either
        assert lib.probe_shared_half_written(_a(out), 3) == 0
        blocks = out.reshape(3, 64)
        np.testing.assert_array_equal(blocks[:, :32], np.repeat(np.arange(3, dtype=np.uint32)[:, None], 32, 1))
        assert (blocks[:, 32:] == 0xFFFFFFFF).all()


@pytest.mark.parametrize(("dtype", "layouts"), [(1, 0), (1, 1), (1, 2), (1, 7), (2, 0), (2, 4)])
def test_wmma_fragments_multiply_as_documented_for_each_layout(dtype, layouts):
    lib = probes()
    rng = np.random.default_rng(layouts)
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 16))
    c = rng.standard_normal((16, 16)).astype(np.float32)
    if dtype == 1:
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        av, bv = a16.astype(np.float64), b16.astype(np.float64)
    else:
        a16, b16 = ref.bf16_bits(a), ref.bf16_bits(b)
        av, bv = ref.bf16_values(a16).astype(np.float64), ref.bf16_values(b16).astype(np.float64)
    stored = [_aligned(m.T if layouts & bit else m) for m, bit in ((a16, 1), (b16, 2), (c, 4))]
    d = _aligned(np.full((16, 16), np.nan, np.float32))
    assert lib.probe_wmma(dtype, *(_a(m) for m in stored), _a(d), layouts) == 0, lib.cuda_on_cpu_fault()
    want = av @ bv + 2 * c.astype(np.float64)
    ref.check_close(d, want, np.abs(av) @ np.abs(bv) + 2 * np.abs(c), "float32", "d = a @ b + 2c")


def test_16_bit_conversions_round_to_nearest_even():
    lib = probes()
    values = np.array([1.0, -2.5, 1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65519.0, 65520.0, 1e9, -np.inf, np.nan,
                       -0.0, 2**-24, 2**-25, 3 * 2**-25, 1e-8, 6.1e-5, 2**-14 - 2**-25, 1 + 2**-8, 3.0e38],
                      np.float32)
    n = values.size
    half, bf16, back = np.zeros(n, np.uint16), np.zeros(n, np.uint16), np.zeros(n, np.float32)
    assert lib.probe_half_convert(_a(values), _a(half), _a(bf16), _a(back), n) == 0
    with np.errstate(over="ignore"):  # 65520 and up round to infinity, as they should
        want_half = values.astype(np.float16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(half[~nan], want_half.view(np.uint16)[~nan])
    np.testing.assert_array_equal(back, want_half.astype(np.float32))
    np.testing.assert_array_equal(bf16[~nan], ref.bf16_bits(values)[~nan])
    assert np.isnan(ref.bf16_values(bf16[nan])).all() and np.isnan(back[nan]).all()


@pytest.mark.parametrize(
    ("which", "status", "message"),
    [
        pytest.param(0, LAUNCH_FAILURE, "threads of the block skipped by returning", id="syncthreads after return"),
        pytest.param(1, LAUNCH_FAILURE, "reads lane 16, which does not take part", id="shuffle from a returned lane"),
        pytest.param(2, LAUNCH_FAILURE, "deadlock", id="warp waits while a lane is at the barrier"),
        pytest.param(3, LAUNCH_FAILURE, "the pointer is not 256-bit aligned", id="misaligned wmma load"),
        pytest.param(4, INVALID_CONFIGURATION, "", id="grid of 0 blocks"),
        pytest.param(5, INVALID_CONFIGURATION, "", id="block of 1025 threads"),
    ],
)
def test_what_a_gpu_forbids_stops_the_launch_with_a_fault(which, status, message):
    lib = probes()
    out, d = np.zeros(64, np.int32), np.zeros(32, np.float32)
    a = _aligned(np.zeros(512, np.float16))  # the probe loads from a + 1 element
    assert lib.probe_fault(which, _a(out), _a(a), _a(d)) == status
    fault = lib.cuda_on_cpu_fault().decode()
    assert message in fault if message else fault == ""
    values = np.arange(64, dtype=np.int32)
    if status == LAUNCH_FAILURE:  # sticky, like a GPU's context after a fault, until reset
        assert lib.probe_shared_reverse(_a(np.zeros(6 * 64, np.int32)), _a(values)) == LAUNCH_FAILURE
        lib.cuda_on_cpu_reset()
    assert lib.probe_shared_reverse(_a(np.zeros(6 * 64, np.int32)), _a(np.zeros(6 * 64, np.int32))) == 0


def _sort(lib, keys, begin_bit, end_bit, temp_bytes=0):
    n = keys.size
    values = np.arange(n, dtype=np.int64) * 10
    keys_out, values_out = np.zeros(n, np.uint64), np.zeros(n, np.int64)
    asked = ctypes.c_size_t(0)
    temp = np.zeros(1 << 16, np.uint8)
    lib.probe_sort_pairs.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 3 + [ctypes.c_void_p, ctypes.c_size_t,
                                                                                 ctypes.POINTER(ctypes.c_size_t)]
    status = lib.probe_sort_pairs(_a(keys), _a(keys_out), _a(values), _a(values_out), n, begin_bit, end_bit,
                                  _a(temp), temp_bytes, ctypes.byref(asked))
    return status, keys_out, values_out, asked.value


def test_radix_sort_is_stable_on_the_bits_asked_for():
    lib = probes()
    keys = np.random.default_rng(4).integers(0, 2**62, 1000, dtype=np.uint64)
    status, keys_out, values_out, _ = _sort(lib, keys, 4, 12)
    order = np.argsort((keys >> np.uint64(4)) & np.uint64(0xFF), kind="stable")
    assert status == 0
    np.testing.assert_array_equal(keys_out, keys[order])
    np.testing.assert_array_equal(values_out, order * 10)


def test_radix_sort_refuses_too_little_temporary_storage_and_bad_bits():
    lib = probes()
    keys = np.arange(100, dtype=np.uint64)
    status, _, _, asked = _sort(lib, keys, 0, 8)
    assert status == 0 and asked > 0
    assert _sort(lib, keys, 0, 8, temp_bytes=asked - 1)[0] == INVALID_VALUE
    assert _sort(lib, keys, 0, 65)[0] == INVALID_VALUE


def test_launches_are_rewritten_in_place_keeping_lines():
    source = "a();\nkernel<T, 4><<<grid,\n  256, 0, stream>>>(x,\n y);\nk2<<<1, 1>>>();\n"
    rewritten = rewrite_launches(source, "ops/cuda/x.cu")
    assert rewritten.splitlines()[0] == '#line 1 "ops/cuda/x.cu"'
    assert rewritten.splitlines()[1:] == [
        "a();",
        "::cuda_on_cpu::launch<&kernel<T, 4>>(grid,",
        "  256, 0, stream)(x,",
        " y);",
        "::cuda_on_cpu::launch<&k2>(1, 1)();",
    ]


def test_shared_variables_are_registered_and_dynamic_shared_memory_refused():
    source = "  __shared__ __align__(16) unsigned char smem[A > B ? A : B];\n  __shared__ float t[4][8 + 1];\n"
    assert rewrite_launches(source, "x.cu").splitlines()[1:] == [
        "  __shared__ __align__(16) unsigned char smem[A > B ? A : B];"
        " ::cuda_on_cpu::register_shared(smem, sizeof smem);",
        "  __shared__ float t[4][8 + 1]; ::cuda_on_cpu::register_shared(t, sizeof t);",
    ]
    with pytest.raises(RuntimeError, match=r"x\.cu:1: a __shared__"):
        rewrite_launches("extern __shared__ float dynamic[];\n", "x.cu")


def test_a_launch_the_rewrite_does_not_understand_is_refused():
    with pytest.raises(RuntimeError, match=r"x\.cu:2: a <<<"):
        rewrite_launches("a();\n(*table[i])<<<1, 1>>>();\n", "x.cu")


def test_the_gpu_harness_device_checks_pass_on_the_emulation():
    # benchmarks.gpu_kernels runs these on a GPU; here the same code meets the kernels before any GPU does.
    kernels, memory, checks = emulated_kernels(), HostMemory(), Checks()
    check_embedding_bag(kernels, memory, checks, np.random.default_rng(1))
    check_block_sparse(kernels, memory, checks, np.random.default_rng(2))
    assert checks.failed == 0, [row for row in checks.rows if not row["ok"]]
    assert {row["kernel"] for row in checks.rows} >= {"embedding_bag check", "block-sparse grad w"}
    assert {"product_mma<__nv_bfloat16, 64>", "weight_grad_simt<__half, 8>", "product_mma<float, 32>",
            "weight_grad_mma<float, 64>"} <= set(kernels.launched())
