"""Builds the CUDA kernels of `ops/cuda/` into a shared library (nvcc), their host logic (g++), or the kernels
themselves for the CPU emulation of `ops/cuda/emulation/` (g++), for ctypes.

The libraries go to a directory outside the repository (a fresh temporary
one unless given), keyed by the sources' hash and the target architecture,
so nothing is cached in the working tree.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

__all__ = [
    "CUDA_DIR",
    "CUDA_SOURCES",
    "HOST_SOURCES",
    "build_cuda_library",
    "build_emulated_library",
    "build_host_library",
    "find_nvcc",
    "rewrite_launches",
]

CUDA_DIR = pathlib.Path(__file__).resolve().parents[1] / "ops" / "cuda"
CUDA_SOURCES = ("embedding_bag.cu", "block_sparse.cu")
HOST_SOURCES = ("host_reference.cc",)
HEADERS = ("bag_logic.h", "block_plan.h", "sparseflow_kernels.h", "warp_mma.h", "mma_tiles.h")
EMULATION_DIR = CUDA_DIR / "emulation"
EMULATION_FILES = tuple(
    sorted(str(p.relative_to(CUDA_DIR)) for p in EMULATION_DIR.rglob("*") if p.suffix in (".h", ".cc", ".cuh"))
)
# `kernel<<<config>>>(`, the kernel a name with optional template arguments.
_LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;{}]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
# `__shared__ [__align__(n)] type name[dims];`: the variable is registered so each block starts with it poisoned.
_SHARED = re.compile(r"__shared__(\s+(?:__align__\(\d+\)\s+)?[\w:<>, ]+?\s+(\w+)\s*(?:\[[^\]\n]+\]\s*)*;)")


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
    for name in (*names, *HEADERS, *(EMULATION_FILES if "emulated" in extra else ())):
        h.update((CUDA_DIR / name).read_bytes())
    for item in extra:
        h.update(item.encode())
    return h.hexdigest()[:16]


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:  # the compiler named is not there
        raise RuntimeError(f"{what} failed: {error}") from error
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


def rewrite_launches(source: str, path: str) -> str:
    """A .cu source with each `kernel<<<grid, block, smem, stream>>>(args)` made a call of the emulated launcher,
    and each `__shared__` variable registered with the emulation (which fills it with 0xFF bytes, NaN as float,
    before every block, as a GPU leaves it undefined).

    The result starts with a `#line` naming `path`, and keeps the line count, so compiler messages point into the
    original file.

    Raises:
      RuntimeError: a `<<<`, `>>>` or `__shared__` is left that is not of the forms above (`extern __shared__`,
        dynamic shared memory, is not emulated).
    """
    rewritten = _LAUNCH.sub(lambda m: f"::cuda_on_cpu::launch<&{m.group(1)}>({m.group(2)})(", source)
    rewritten = _SHARED.sub(
        lambda m: f"__SHARED_VARIABLE__{m.group(1)} ::cuda_on_cpu::register_shared({m.group(2)}, sizeof {m.group(2)});",
        rewritten,
    )
    for marker, what in (("<<<", "launch"), (">>>", "launch"), ("__shared__", "shared variable")):
        if marker in rewritten:
            line = rewritten[: rewritten.index(marker)].count("\n") + 1
            raise RuntimeError(f"{path}:{line}: a {marker} the {what} rewrite does not understand")
    rewritten = rewritten.replace("__SHARED_VARIABLE__", "__shared__")
    return f'#line 1 "{path}"\n' + rewritten


def build_emulated_library(
    directory: str | os.PathLike | None = None, compiler: str | None = None, sources=None
) -> pathlib.Path:
    """Compiles the `.cu` kernels for the CPU emulation (`ops/cuda/emulation/cuda_on_cpu.h`) into a shared library.

    The library exports the C interface of `sparseflow_kernels.h` (host pointers stand in for device pointers)
    and the emulation's `cuda_on_cpu_*` controls. `sources` (paths of .cu files) replaces the kernels of
    `ops/cuda/` when given. Built once per directory and sources' hash.

    Raises:
      RuntimeError: no C++ compiler, a launch the rewrite does not understand, or the compiler's error output.
    """
    compiler = compiler or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler found (g++, c++ or $CXX)")
    directory = pathlib.Path(directory or tempfile.mkdtemp(prefix="sparseflow-emulated-"))
    directory.mkdir(parents=True, exist_ok=True)
    paths = [pathlib.Path(p).resolve() for p in sources] if sources else [CUDA_DIR / n for n in CUDA_SOURCES]
    digest = _digest((), "emulated", *(f"{p}\n{p.read_text()}" for p in paths))
    target = directory / f"libsparseflow_emulated-{digest}.so"
    if target.exists():
        return target
    compiled = []
    for path in paths:
        rewritten = directory / f"{digest}-{path.stem}.{os.getpid()}.cc"  # two builders never share a file
        rewritten.write_text(rewrite_launches(path.read_text(), str(path)))
        compiled.append(str(rewritten))
    partial = directory / f"{target.name}.{os.getpid()}.tmp"
    command = [compiler, "-std=c++20", "-O1", "-pthread", "-fPIC", "-shared", "-Wl,-Bsymbolic"]
    command += [f"-I{EMULATION_DIR / 'include'}", f"-I{CUDA_DIR}", "-include", str(EMULATION_DIR / "cuda_on_cpu.h")]
    command += ["-o", str(partial), *compiled, str(EMULATION_DIR / "cuda_on_cpu.cc")]
    try:
        _run(command, "C++ build of the emulated kernels")
        partial.replace(target)  # whole or absent, should two processes build at once
    finally:
        for name in compiled:
            pathlib.Path(name).unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return target
