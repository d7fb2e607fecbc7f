"""The emulated kernel library (ops/cuda/*.cu on the CPU emulation), built once per test process."""

from __future__ import annotations

import functools
import tempfile

import pytest

from benchmarks._cuda_emulation import EmulatedKernels, HostMemory
from benchmarks.cuda_build import build_emulated_library

__all__ = ["HostMemory", "emulated_kernels"]


@functools.cache
def _library():
    try:
        return build_emulated_library(tempfile.mkdtemp(prefix="sparseflow-emulated-"))
    except RuntimeError as error:
        return error


def emulated_kernels() -> EmulatedKernels:
    """The emulated kernels, reset; skips the test (with the reason) when they cannot be built here."""
    library = _library()
    if isinstance(library, RuntimeError):
        pytest.skip(f"the CPU emulation of the CUDA kernels cannot be built: {str(library).splitlines()[0]}")
    kernels = EmulatedKernels(library)
    kernels.reset()
    return kernels
