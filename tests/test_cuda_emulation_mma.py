"""The CPU emulation of ops/cuda/warp_mma.h's device functions (ldmatrix .x1/.x2/.x4 and .trans, mma.sync m16n8k16
f16/bf16 and m16n8k8 tf32, cvt.rna.tf32, cp.async groups), through the probe kernels of
tests/cuda_emulation_mma_probes.cu, against the fragment layouts of the PTX ISA written out here (groupID g = lane / 4,
threadID_in_group t = lane % 4)."""

import ctypes

import numpy as np
import pytest

from benchmarks import kernel_references as ref
from tests._cuda_emulation import mma_probes

LAUNCH_FAILURE = 719
LANES = np.arange(32)
G, T = LANES // 4, LANES % 4


def _a(array):
    return ctypes.c_void_p(array.ctypes.data)


def _pack(lo, hi):
    return lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True], ids=["plain", "trans"])
def test_ldmatrix_gives_each_lane_the_documented_elements(n, trans):
    lib = mma_probes()
    matrices = np.random.default_rng(n).integers(0, 2**16, (4, 8, 8), dtype=np.uint16)
    out = np.zeros((32, 4), np.uint32)
    assert lib.probe_ldmatrix(n, int(trans), _a(matrices), _a(out)) == 0, lib.cuda_on_cpu_fault()
    for i in range(n):
        m = matrices[i].T if trans else matrices[i]  # .trans: lane l holds column elements instead of row ones
        want = _pack(m[G, 2 * T], m[G, 2 * T + 1])
        np.testing.assert_array_equal(out[:, i], want, err_msg=f"matrix {i}")
    assert not out[:, n:].any()  # registers beyond N untouched


def _mma_16816(a16, b16, to_float):
    """Lane registers for A (16x16) and B (16x8) of 16-bit bit patterns, as the PTX ISA lays them out."""
    a_regs = np.stack([_pack(a16[G + 8 * (i % 2), 2 * T + 8 * (i // 2)], a16[G + 8 * (i % 2), 2 * T + 8 * (i // 2) + 1])
                       for i in range(4)], axis=1)
    b_regs = np.stack([_pack(b16[2 * T + 8 * i, G], b16[2 * T + 8 * i + 1, G]) for i in range(2)], axis=1)
    return a_regs, b_regs, to_float(a16).astype(np.float64), to_float(b16).astype(np.float64)


def _accumulators(c):
    """C/D (16x8) as lane registers: d[i] = D(g + 8 (i / 2), 2t + i % 2)."""
    return np.stack([c[G + 8 * (i // 2), 2 * T + i % 2] for i in range(4)], axis=1).astype(np.float32)


def _gather(d_regs):
    d = np.zeros((16, 8), np.float32)
    for i in range(4):
        d[G + 8 * (i // 2), 2 * T + i % 2] = d_regs[:, i]
    return d


@pytest.mark.parametrize("kind", [0, 1, 2], ids=["m16n8k16 f16", "m16n8k16 bf16", "m16n8k8 tf32"])
def test_mma_multiplies_the_documented_fragments(kind):
    lib = mma_probes()
    rng = np.random.default_rng(kind)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    if kind == 0:
        a16 = rng.standard_normal((16, 16)).astype(np.float16).view(np.uint16)
        b16 = rng.standard_normal((16, 8)).astype(np.float16).view(np.uint16)
        a_regs, b_regs, av, bv = _mma_16816(a16, b16, lambda bits: bits.view(np.float16))
    elif kind == 1:
        a16, b16 = ref.bf16_bits(rng.standard_normal((16, 16))), ref.bf16_bits(rng.standard_normal((16, 8)))
        a_regs, b_regs, av, bv = _mma_16816(a16, b16, ref.bf16_values)
    else:  # tf32 values: float32 with the low 13 mantissa bits clear
        a32 = (rng.standard_normal((16, 8)).astype(np.float32).view(np.uint32) & ~np.uint32(0x1FFF))
        b32 = (rng.standard_normal((8, 8)).astype(np.float32).view(np.uint32) & ~np.uint32(0x1FFF))
        a_regs = np.stack([a32[G + 8 * (i % 2), T + 4 * (i // 2)] for i in range(4)], axis=1)
        b_regs = np.stack([b32[T + 4 * i, G] for i in range(2)], axis=1)
        av, bv = a32.view(np.float32).astype(np.float64), b32.view(np.float32).astype(np.float64)
    a_regs, b_regs = np.ascontiguousarray(a_regs, np.uint32), np.ascontiguousarray(b_regs, np.uint32)
    d = np.ascontiguousarray(_accumulators(c))
    assert lib.probe_mma(kind, _a(a_regs), _a(b_regs), _a(d)) == 0, lib.cuda_on_cpu_fault()
    want = av @ bv + c
    ref.check_close(_gather(d), want, np.abs(av) @ np.abs(bv) + np.abs(c), "float32", "d = a @ b + c")


def test_tf32_operands_with_low_bits_set_fault():
    lib = mma_probes()
    a_regs = np.full((32, 4), np.float32(1 + 2**-20).view(np.uint32), np.uint32)  # below tf32's 10 mantissa bits
    b_regs, d = np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.float32)
    assert lib.probe_mma(2, _a(a_regs), _a(b_regs), _a(d)) == LAUNCH_FAILURE
    assert b"not a tf32 value" in lib.cuda_on_cpu_fault()


def _tf32_rna(values):
    """cvt.rna.tf32.f32 worked out on the magnitude: keep 10 mantissa bits, round half away from zero."""
    out = []
    for v in values.astype(np.float32):
        if not np.isfinite(v):
            out.append(np.float32(v))
            continue
        mantissa, exponent = np.frexp(abs(float(v)))  # v = mantissa * 2**exponent, mantissa in [0.5, 1)
        scaled = mantissa * 2**11  # 11 significant bits: the implicit one and 10 stored
        rounded = np.floor(scaled + 0.5)
        out.append(np.float32(np.copysign(rounded * 2.0 ** (exponent - 11), v)))
    return np.array(out, np.float32)


def test_tf32_conversion_rounds_half_away_from_zero():
    lib = mma_probes()
    values = np.array([1.0, 1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1 + 2**-12, 1 - 2**-24, 3.14159265, -2.7182818,
                       1e-30, 6.5e4, np.inf, -np.inf, 0.0, -0.0, 3.4e38], np.float32)
    out = np.zeros(values.size, np.uint32)
    assert lib.probe_tf32(_a(values), _a(out), values.size) == 0, lib.cuda_on_cpu_fault()
    with np.errstate(over="ignore"):
        want = _tf32_rna(values)
    np.testing.assert_array_equal(out.view(np.float32), want)
    assert not (out & 0x1FFF).any()
    nan = np.zeros(1, np.uint32)
    assert lib.probe_tf32(_a(np.array([np.nan], np.float32)), _a(nan), 1) == 0
    assert np.isnan(nan.view(np.float32)).all()


@pytest.mark.parametrize("bytes_", [16, 8, 0])
def test_cp_async_lands_when_its_group_is_waited_for_and_zero_fills(bytes_):
    lib = mma_probes()
    src = np.arange(64 * 4, dtype=np.uint32) + 1
    out = np.zeros((3, 32, 4), np.uint32)
    assert lib.probe_cp_async(_a(src), bytes_, _a(out)) == 0, lib.cuda_on_cpu_fault()
    np.testing.assert_array_equal(out[0], src[:128].reshape(32, 4))  # group 0 after wait<1>
    # Group 1 may still be in flight after wait<1>: the emulation holds it back, so a kernel reading it too early
    # reads shared memory's poison (0xFF bytes) instead of passing by luck.
    assert (out[1] == 0xFFFFFFFF).all()
    second = src[128:].reshape(32, 4).copy()
    second[:, bytes_ // 4 :] = 0  # the bytes past the source size are zeros
    np.testing.assert_array_equal(out[2], second)  # group 1 after wait<0>


def test_ldmatrix_on_a_misaligned_row_faults():
    lib = mma_probes()
    out = np.zeros(32, np.uint32)
    assert lib.probe_ldmatrix_misaligned(_a(out)) == LAUNCH_FAILURE
    assert b"not 16-byte aligned" in lib.cuda_on_cpu_fault()
