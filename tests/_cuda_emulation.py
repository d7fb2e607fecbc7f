"""The emulated kernel library (ops/cuda/*.cu on the CPU emulation), and the emulation's probe kernels
(tests/cuda_emulation_probes.cu), each built once per test process."""

from __future__ import annotations

import ctypes
import functools
import os
import pathlib
import tempfile

import pytest

from benchmarks._cuda_emulation import EmulatedKernels, HostMemory
from benchmarks.cuda_build import build_emulated_library

__all__ = ["HostMemory", "emulated_kernels", "mma_probes", "probes"]

PROBES = pathlib.Path(__file__).with_name("cuda_emulation_probes.cu")
MMA_PROBES = pathlib.Path(__file__).with_name("cuda_emulation_mma_probes.cu")
# Outside the repository, keyed by the sources' hash inside: test workers and later runs share one build.
CACHE = pathlib.Path(tempfile.gettempdir()) / f"sparseflow-emulated-{os.getuid()}"


@functools.cache
def _library(sources: tuple[str, ...] | None = None):
    try:
        return build_emulated_library(CACHE, sources=sources)
    except RuntimeError as error:
        return error


def _built(sources: tuple[str, ...] | None = None) -> pathlib.Path:
    library = _library(sources)
    if isinstance(library, RuntimeError):
        pytest.skip(f"the CPU emulation of the CUDA kernels cannot be built: {str(library).splitlines()[0]}")
    return library


def emulated_kernels() -> EmulatedKernels:
    """The emulated kernels, reset; skips the test (with the reason) when they cannot be built here."""
    kernels = EmulatedKernels(_built())
    kernels.reset()
    return kernels


def probes() -> ctypes.CDLL:
    """The probe kernels' library (its `probe_*` functions and the `cuda_on_cpu_*` controls), reset."""
    lib = ctypes.CDLL(str(_built((str(PROBES),))))
    lib.cuda_on_cpu_fault.restype = ctypes.c_char_p
    lib.cuda_on_cpu_set_order.argtypes = [ctypes.c_int]
    lib.cuda_on_cpu_reset()
    lib.cuda_on_cpu_set_order(0)
    return lib


def mma_probes() -> ctypes.CDLL:
    """The probe kernels of ops/cuda/warp_mma.h's device functions (tests/cuda_emulation_mma_probes.cu), reset."""
    lib = ctypes.CDLL(str(_built((str(MMA_PROBES),))))
    lib.cuda_on_cpu_fault.restype = ctypes.c_char_p
    lib.cuda_on_cpu_reset()
    return lib
