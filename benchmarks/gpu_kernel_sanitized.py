"""The CPU emulation tests' embedding-bag cases, and the block-sparse checks, on a GPU: the run compute-sanitizer wraps.

    python -m benchmarks.gpu_kernel_sanitized [--part all|embedding|block-sparse] [--build-dir DIR]
    python -m benchmarks.gpu_kernel_sanitized --build-only --arch sm_90 --build-dir DIR   # nvcc only, no GPU needed
    python -m benchmarks.gpu_kernel_sanitized --list-cases                                # no GPU needed
    python -m benchmarks.gpu_kernel_sanitized --probe      # exit 0 when a CUDA GPU is visible, else 2 saying so

No TensorFlow: the real `.cu` kernels are built with nvcc into a shared library (`cuda_build.build_cuda_library`)
and called through ctypes on device memory from PyTorch or CuPy (`_cuda_device`). The embedding-bag cases are those
of `benchmarks.gpu_kernel_cases`, the module the emulation tests (tests/test_cuda_emulation_embedding_bag.py) take
theirs from, run the same way and compared with the same numpy references, plus what only a GPU shows: the
deterministic paths repeat bit for bit and equal the sorted kernel's bits on sorted rows, and the gradient repeats
bit for bit. `--part block-sparse` runs `gpu_kernel_checks.check_block_sparse` (every block size and dtype).

benchmarks/gpu_kernels_run.sh runs this under `compute-sanitizer` (memcheck on every part, racecheck and synccheck
on the kernels that use shared memory or barriers); PYTORCH_NO_CUDA_MEMORY_CACHING=1 (set here when not set) and
CuPy without its pool give every buffer its own allocation, so memcheck sees an access past a buffer's end.

Exit status: 0 every case passes; 1 a case failed (each failure printed); 2 refused (no GPU, no nvcc, bad usage).

Example (on the emulation, as tests/test_gpu_kernel_sanitized.py does):
    checks = Checks()
    run_embedding_cases(EmulatedKernels(build_emulated_library()), HostMemory(), checks)
    checks.failed  # 0
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import numpy as np

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
from benchmarks.gpu_kernel_checks import Checks

__all__ = ["NO_GPU_MESSAGE", "case_ids", "main", "run_embedding_cases"]

NO_GPU_MESSAGE = "error: no CUDA GPU visible (torch or CuPy): nothing checked, nothing timed"


def case_ids() -> list[str]:
    """The embedding-bag cases this run takes, one id each: the emulation tests' parametrisations, in their words."""
    return (
        [f"forward: {case}; rows_sorted={mode}" for case in FORWARD_CASES for mode in forward_modes(case)]
        + [f"entry check: {case}" for case in CHECK_CASES]
        + [f"gradient rows: {case}" for case in GRAD_CASES]
        + [f"gains gradient: {case}" for case in GRAD_CASES]
        + [f"hot id chunks: {case}" for case in HOT_IDS]
    )


def _sorted_rows(bag) -> bool:
    return bool(np.all(np.diff(bag.rows) >= 0))


def _forward(kernels, memory, bag, mode: int, deterministic: bool) -> np.ndarray:
    s, d = bag.sample_count, bag.dim
    out = memory.empty(4 * s * d)
    scratch = memory.empty(kernels.forward_scratch_bytes(s))
    kernels.bag_forward(memory.put(bag.table), bag.vocab, d, memory.put(bag.rows), memory.put(bag.cols),
                        memory.put(bag.gains), bag.n, s, mode, scratch, out, deterministic=deterministic)
    memory.synchronize()
    return memory.get(out, np.float32, (s, d))


def _check_forward(kernels, memory, case: str, mode: int) -> float:
    bag = bag_case(case)
    want, bound = ref.embedding_bag(bag.table, bag.rows, bag.cols, bag.gains, bag.sample_count)
    worst = ref.check_close(_forward(kernels, memory, bag, mode, False), want, bound, "float32", "forward")
    first, second = (_forward(kernels, memory, bag, mode, True) for _ in range(2))
    if first.tobytes() != second.tobytes():
        raise AssertionError("the deterministic forward gave other bits the second time")
    ref.check_close(first, want, bound, "float32", "deterministic forward")
    if _sorted_rows(bag) and first.tobytes() != _forward(kernels, memory, bag, 1, False).tobytes():
        raise AssertionError("the deterministic forward's bits differ from the sorted kernel's on sorted rows")
    return worst


def _check_entries(kernels, memory, case: str) -> float:
    rows, cols, samples, vocab = check_case(case)
    first = memory.empty(16)
    kernels.bag_check(memory.put(rows), memory.put(cols), rows.size, samples, vocab, first)
    memory.synchronize()
    got = tuple(int(v) for v in memory.get(first, np.int64, (2,)))
    want = ref.first_bad_entries(rows, cols, samples, vocab)
    if got != want:
        raise AssertionError(f"first bad (id, row) positions {got}, expected {want}")
    return 0.0


def _gradient(kernels, memory, bag, out_grad) -> tuple[np.ndarray, np.ndarray]:
    s, v, d, n = bag.sample_count, bag.vocab, bag.dim, bag.n
    rows, gains = memory.put(bag.rows), memory.put(bag.gains)
    workspace = memory.empty(kernels.grad_workspace_bytes(n, v))
    ids, count, d_rows = memory.empty(8 * max(n, 1)), memory.empty(8), memory.empty(4 * max(n, 1) * d)
    kernels.grad_ids(rows, memory.put(bag.cols), n, s, v, workspace, ids, count)
    kernels.grad_rows(memory.put(out_grad), d, rows, gains, n, workspace, count, n, d_rows)
    memory.synchronize()
    unique = int(memory.get(count, np.int64, (1,))[0])
    return (memory.get(ids, np.int64, (max(n, 1),))[:unique].copy(),
            memory.get(d_rows, np.float32, (max(n, 1), d))[:unique].copy())


def _check_gradient(kernels, memory, case: str, hot: bool) -> float:
    bag = bag_case(case)
    out_grad = np.random.default_rng(8).standard_normal((bag.sample_count, bag.dim)).astype(np.float32)
    got_ids, got = _gradient(kernels, memory, bag, out_grad)
    want_ids, want, bound = ref.embedding_bag_grad(out_grad, bag.rows, bag.cols, bag.gains, bag.sample_count,
                                                   bag.vocab)
    if not np.array_equal(got_ids, want_ids):
        raise AssertionError(f"gradient ids {got_ids[:8]}... ({got_ids.size}) vs {want_ids[:8]}... ({want_ids.size})")
    worst = ref.check_close(got, want, bound, "float32", "table gradient rows")
    if hot:
        for col, count in HOT_IDS[case][1].items():
            if int((bag.cols[bag.rows < bag.sample_count] == col).sum()) != count:
                raise AssertionError(f"case {case!r}: id {col} should have {count} entries")
    if got.tobytes() != _gradient(kernels, memory, bag, out_grad)[1].tobytes():
        raise AssertionError("the gradient gave other bits the second time")
    return worst


def _check_gains(kernels, memory, case: str) -> float:
    bag = bag_case(case)
    s, n = bag.sample_count, bag.n
    out_grad = np.random.default_rng(9).standard_normal((s, bag.dim)).astype(np.float32)
    d_gains = memory.empty(4 * max(n, 1))
    kernels.grad_gains(memory.put(out_grad), memory.put(bag.table), bag.vocab, bag.dim, memory.put(bag.rows),
                       memory.put(bag.cols), n, s, d_gains)
    memory.synchronize()
    want, bound = ref.embedding_bag_gains_grad(out_grad, bag.table, bag.rows, bag.cols, s)
    return ref.check_close(memory.get(d_gains, np.float32, (max(n, 1),))[:n], want, bound, "float32", "gains gradient")


def run_embedding_cases(kernels, memory, checks: Checks) -> None:
    """Runs every case of `case_ids()` in that order, recording one row per case in `checks` (kernel = its id).

    `kernels` is `Kernels` (or `EmulatedKernels`), `memory` a `_cuda_device.Device` (or `HostMemory`).
    """
    runs = {}
    for case in FORWARD_CASES:
        for mode in forward_modes(case):
            run = functools.partial(_check_forward, kernels, memory, case, mode)
            runs[f"forward: {case}; rows_sorted={mode}"] = run
    for case in CHECK_CASES:
        runs[f"entry check: {case}"] = functools.partial(_check_entries, kernels, memory, case)
    for case in GRAD_CASES:
        runs[f"gradient rows: {case}"] = functools.partial(_check_gradient, kernels, memory, case, False)
    for case in GRAD_CASES:
        runs[f"gains gradient: {case}"] = functools.partial(_check_gains, kernels, memory, case)
    for case in HOT_IDS:
        runs[f"hot id chunks: {case}"] = functools.partial(_check_gradient, kernels, memory, case, True)
    if list(runs) != case_ids():
        raise RuntimeError("the cases run differ from case_ids()")
    for name, run in runs.items():
        kind, _, case = name.partition(": ")
        checks.record(f"embedding_bag {kind}", case, "float32", run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "embedding", "block-sparse"), default="all")
    parser.add_argument("--build-dir", default=None, help="where the kernels are compiled (cached there by hash)")
    parser.add_argument("--build-only", action="store_true", help="compile the kernels and stop (no GPU needed)")
    parser.add_argument("--arch", default=None, help="with --build-only: the target, e.g. sm_90 (default: the GPU's)")
    parser.add_argument("--list-cases", action="store_true", help="print the embedding-bag case ids and stop")
    parser.add_argument("--probe", action="store_true", help="exit 0 when a CUDA GPU is visible, else 2")
    args = parser.parse_args(argv)
    if args.list_cases:
        print("\n".join(case_ids()))
        return 0
    os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")  # one allocation per buffer: memcheck sees overruns
    from benchmarks._cuda_device import find_device
    from benchmarks._cuda_kernels import Kernels
    from benchmarks.cuda_build import build_cuda_library, find_nvcc

    device = None if args.build_only and args.arch else find_device()
    if device is None and not (args.build_only and args.arch):
        print(NO_GPU_MESSAGE, file=sys.stderr)
        return 2
    if args.probe:
        print(f"GPU: {device.name} ({device.arch})")
        return 0
    nvcc = find_nvcc()
    if nvcc is None:
        print("error: nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda): the kernels cannot be built", file=sys.stderr)
        return 2
    arch = args.arch or device.arch
    try:
        library = build_cuda_library(arch, args.build_dir, nvcc)
    except RuntimeError as error:
        print(f"error: building the kernels for {arch} failed: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"built {library}", flush=True)
    if args.build_only:
        return 0
    if device.library == "cupy":
        import cupy

        cupy.cuda.set_allocator(None)  # one allocation per buffer, as for torch above
    kernels, checks = Kernels(library), Checks()
    print(f"GPU: {device.name} ({device.arch}), {device.runtime}", flush=True)
    if args.part in ("all", "embedding"):
        run_embedding_cases(kernels, device, checks)
    if args.part in ("all", "block-sparse"):
        from benchmarks.gpu_kernel_checks import check_block_sparse

        check_block_sparse(kernels, device, checks, np.random.default_rng(0))
    print(f"{len(checks.rows) - checks.failed} of {len(checks.rows)} cases pass", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
