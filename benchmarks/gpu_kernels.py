"""The CUDA kernels of `ops/cuda/` on a GPU, without TensorFlow: checked against numpy, timed against torch.

    python -m benchmarks.gpu_kernels [--quick] [--reps N] [--output-dir DIR]

Needs a CUDA GPU, `nvcc`, and PyTorch or CuPy (for device memory and CUDA
events; the peers are torch's, so with CuPy alone only ours is timed). It
builds the kernels for the GPU's architecture (into a temporary directory),
then:

1. checks every kernel against the numpy references of
   `benchmarks.kernel_references` on random shapes: duplicate ids, padding
   entries, empty bags, unsorted rows, widths not a multiple of 4, the
   check kernel's first offending positions; block sizes 8, 16, 32 and 64
   in float32, float16 and bfloat16, with partial row tiles and empty block
   columns (tolerances in that module's docstring);
2. times, ours against the peer on the same device data, alternating, with
   CUDA events around each call, medians over repetitions, the L2 cache
   flushed (a 256 MiB write) before each call:
   - embedding bag (4096 bags of 1-19 ids, dim 64, 1M-row float32 table;
     uniform and Zipf(1.2) ids) against `torch.nn.functional.embedding_bag`
     (mode "sum", per_sample_weights; backward: sparse gradient and the
     weights' gradient), and the bytes-moved bound at the measured
     device-copy bandwidth;
   - block-sparse x[8192, 4096] @ W[4096, 4096], 32-blocks, densities 0.1,
     0.5 and 1.0, float32 and bfloat16, against dense `torch.matmul`
     (cuBLAS; torch's default: no TF32 for float32) and torch's BSR matmul
     where it runs; forward and forward+backward (dx and dw).
3. writes GPU_RESULTS.md (GPU, driver, CUDA, every check, every timing row
   with ours / peer / speed-up / bound / target), GPU_RESULTS.json and a
   plot, into benchmarks/ and into --output-dir.

Without a visible GPU it says so and exits 0. Exits 1 when a check fails
(the timings still run and the failures are listed in the results).

The parts: `gpu_kernel_data` (dtypes, bags), `gpu_kernel_checks` (against the
references), `gpu_kernel_timing` (against torch), `gpu_kernel_report`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

from benchmarks._cuda_device import find_device
from benchmarks._cuda_kernels import Kernels
from benchmarks.cuda_build import build_cuda_library, find_nvcc
from benchmarks.gpu_kernel_checks import Checks, check_block_sparse, check_embedding_bag
from benchmarks.gpu_kernel_data import BLOCK_SIZES, DTYPES, STORAGE, Bag, from_dtype, to_dtype
from benchmarks.gpu_kernel_report import nvcc_version, plot, write_report
from benchmarks.gpu_kernel_timing import (
    BLOCK_SPARSE_SHAPES,
    EMBEDDING_SHAPES,
    Timer,
    copy_bandwidth,
    time_block_sparse,
    time_embedding_bag,
    timing_row,
)

__all__ = ["main", "NO_GPU_MESSAGE", "Bag", "Checks", "Timer", "STORAGE", "BLOCK_SIZES", "DTYPES", "EMBEDDING_SHAPES",
           "BLOCK_SPARSE_SHAPES", "check_block_sparse", "check_embedding_bag", "from_dtype", "to_dtype", "timing_row",
           "write_report", "plot"]

NO_GPU_MESSAGE = "no CUDA GPU visible (torch or CuPy): skipping the CUDA kernel checks and timings"
BENCH_DIR = pathlib.Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer repetitions (a smoke run)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per contender (default 20, quick 5)")
    parser.add_argument("--output-dir", default=None, help="also write the results here")
    parser.add_argument("--build-dir", default=None, help="where the kernels are compiled (default: a temporary dir)")
    parser.add_argument("--no-timings", action="store_true", help="run the checks only")
    args = parser.parse_args(argv)
    device = find_device()
    if device is None:
        print(NO_GPU_MESSAGE)
        return 0
    nvcc = find_nvcc()
    if nvcc is None:
        print("error: a GPU is visible but nvcc was not found (PATH, $CUDA_HOME, /usr/local/cuda)", file=sys.stderr)
        return 1
    began = time.perf_counter()
    print(f"GPU: {device.name} ({device.arch}), driver {device.driver}, {device.runtime}", flush=True)
    library = build_cuda_library(device.arch, args.build_dir, nvcc)
    print(f"built {library.name} in {time.perf_counter() - began:.0f} s", flush=True)
    kernels = Kernels(library)
    rng = np.random.default_rng(0)
    checks = Checks()
    check_embedding_bag(kernels, device, checks, rng)
    check_block_sparse(kernels, device, checks, rng)
    try:
        import torch

        torch = torch if device.library == "torch" or torch.cuda.is_available() else None
    except ImportError:
        torch = None
    timings, notes = [], []
    bandwidth = None
    if not args.no_timings:
        timer = Timer(device, args.reps or (5 if args.quick else 20))
        bandwidth = copy_bandwidth(device, timer)
        print(f"device-copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + write)", flush=True)
        parts = (
            ("embedding bag", lambda: time_embedding_bag(kernels, device, timer, torch, bandwidth, args.quick, checks)),
            ("block-sparse", lambda: time_block_sparse(kernels, device, timer, torch, args.quick, checks)),
        )
        for what, fn in parts:
            try:
                timings += fn()
            except Exception as error:  # the report says which part failed and why
                notes.append(f"{what} timings failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
                print(notes[-1], flush=True)
    if torch is None:
        notes.append("torch not importable with CUDA: no peers timed")
    elif not args.no_timings:
        notes.append(f"torch.backends.cuda.matmul.allow_tf32 = {torch.backends.cuda.matmul.allow_tf32}")
    machine = {
        "GPU": f"{device.name} (compute capability {device.capability[0]}.{device.capability[1]})",
        "driver": device.driver,
        "CUDA runtime": device.runtime,
        "nvcc": nvcc_version(nvcc),
        "device-copy bandwidth": f"{bandwidth / 1e9:.0f} GB/s (1 GiB device-to-device copy, read + write)"
        if bandwidth else "not measured",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.gpu_kernels" + (" --quick" if args.quick else ""),
        "run time": f"{time.perf_counter() - began:.0f} s",
    }
    targets = [BENCH_DIR]
    if args.output_dir:
        targets.append(pathlib.Path(args.output_dir))
    for directory in targets:
        directory.mkdir(parents=True, exist_ok=True)
        write_report(directory / "GPU_RESULTS.md", machine, checks, timings, notes)
        (directory / "GPU_RESULTS.json").write_text(
            json.dumps({"machine": machine, "checks": checks.rows, "timings": timings, "notes": notes}, indent=1,
                       default=str))
        plot((directory / "plots" if directory == BENCH_DIR else directory) / "gpu_kernels.png", timings)
        print(f"wrote {directory / 'GPU_RESULTS.md'}", flush=True)
    print(f"{len(checks.rows) - checks.failed} of {len(checks.rows)} checks pass; {len(timings)} timing rows; "
          f"{time.perf_counter() - began:.0f} s", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
