"""Builds the CUDA kernels of `ops/cuda/` into a shared library (nvcc), or their host logic (g++), for ctypes.

The libraries go to a directory outside the repository (a fresh temporary
one unless given), keyed by the sources' hash and the target architecture,
so nothing is cached in the working tree.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

__all__ = ["CUDA_DIR", "CUDA_SOURCES", "HOST_SOURCES", "find_nvcc", "build_cuda_library", "build_host_library"]

CUDA_DIR = pathlib.Path(__file__).resolve().parents[1] / "ops" / "cuda"
CUDA_SOURCES = ("embedding_bag.cu", "block_sparse.cu")
HOST_SOURCES = ("host_reference.cc",)
HEADERS = ("bag_logic.h", "block_plan.h", "sparseflow_kernels.h")


def find_nvcc() -> str | None:
    """nvcc on PATH, else under $CUDA_HOME or /usr/local/cuda; None when there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return os.path.join(root, "bin", "nvcc")
    return None


def _digest(names, *extra: str) -> str:
    h = hashlib.sha256()
    for name in (*names, *HEADERS):
        h.update((CUDA_DIR / name).read_bytes())
    for item in extra:
        h.update(item.encode())
    return h.hexdigest()[:16]


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(command[:3])} ...):\n{done.stderr[-4000:]}")


def build_cuda_library(arch: str, directory: str | os.PathLike | None = None, nvcc: str | None = None) -> pathlib.Path:
    """Compiles the kernels for `arch` (e.g. "sm_90") into a shared library; returns its path.

    Raises:
      RuntimeError: no nvcc, or the compiler's error output.
    """
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda)")
    directory = pathlib.Path(directory or tempfile.mkdtemp(prefix="sparseflow-cuda-"))
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"libsparseflow_cuda-{arch}-{_digest(CUDA_SOURCES, arch)}.so"
    if target.exists():
        return target
    compute = arch.replace("sm_", "compute_")
    command = [nvcc, "-std=c++17", "-O3", f"-gencode=arch={compute},code={arch}", "-Xcompiler", "-fPIC"]
    command += ["-shared", "-o", str(target), *(str(CUDA_DIR / name) for name in CUDA_SOURCES)]
    _run(command, "nvcc")
    return target


def build_host_library(directory: str | os.PathLike | None = None, compiler: str | None = None) -> pathlib.Path:
    """Compiles the host build of the kernels' logic (host_reference.cc) with the C++ compiler.

    Raises:
      RuntimeError: no C++ compiler, or its error output.
    """
    compiler = compiler or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler found (g++, c++ or $CXX)")
    directory = pathlib.Path(directory or tempfile.mkdtemp(prefix="sparseflow-host-"))
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"libsparseflow_host-{_digest(HOST_SOURCES)}.so"
    if not target.exists():
        _run([compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-o", str(target),
              *(str(CUDA_DIR / name) for name in HOST_SOURCES)], "C++ build")
    return target
