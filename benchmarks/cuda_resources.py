"""What nvcc makes of the CUDA kernels of `ops/cuda/`, read without a GPU: each `__global__` kernel's registers,
shared memory and spill bytes (`ptxas -v`) and its SASS (`cuobjdump -sass`), per target architecture.

`compile_cubin` compiles one `.cu` file for one architecture into a cubin (cached outside the repository by the
sources' hash), `kernel_resources` parses the ptxas report into one `KernelResources` per kernel, keyed by its
demangled name without namespaces (`product_simt<float, 32>`), and `kernel_sass` splits the cubin's SASS the same
way. Kernels outside namespace `sparseflow` (CUB's) are left out. `OCCUPANCY` states each kernel's intended
occupancy; `budget` turns it into the register and shared-memory limits of an architecture.

Example:
    >>> b = budget("product_simt", "sm_80")
    >>> (b.threads, b.blocks_per_sm, b.max_registers)
    (256, 3, 80)
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

from benchmarks.cuda_build import CUDA_DIR, HEADERS, find_nvcc

__all__ = [
    "OCCUPANCY",
    "Budget",
    "KernelResources",
    "budget",
    "compile_cubin",
    "find_cuda_tool",
    "kernel_label",
    "kernel_ptx",
    "kernel_resources",
    "kernel_sass",
    "ptx_path",
]

# Per SM, the same on sm_80 and sm_90: 64K 32-bit registers, 2048 resident threads; registers are allocated per
# warp in units of 256 (8 per thread). Shared memory per SM (what the carve-out can give) and per block: sm_80
# 164 KiB and 163 KiB, sm_90 228 KiB and 227 KiB, each resident block also holding 1 KiB reserved by the system.
_REGISTERS_PER_SM = 65536
_THREADS_PER_SM = 2048
_SHARED_PER_SM = {"sm_80": 164 * 1024, "sm_90": 228 * 1024}
_SHARED_RESERVED_PER_BLOCK = 1024
_STATIC_SHARED_LIMIT = 48 * 1024  # static __shared__ arrays beyond this do not compile

# The intended occupancy of each kernel: (threads per block, resident blocks per SM). The kernels' launch bounds
# say the same (`__launch_bounds__(threads, blocks)`), so ptxas keeps to the registers that allow it.
#   block-sparse products and weight gradient: 256 threads holding a 4x4 (CUDA cores) or 16xBS (tensor cores)
#     accumulator tile; 3 blocks (24 warps) hide the shared-memory and tensor-core latency while leaving the
#     registers the tiles need; the tensor-core kernels double-buffer their tiles, 2 blocks (16 warps).
#   embedding-bag kernels: streaming loads with little state: full occupancy (8 blocks of 256 threads), except
#     the forward and gradient row kernels (8 rows in flight per lane: 4 blocks) and the single-thread
#     bookkeeping kernels (1 thread, any occupancy: 32 blocks).
OCCUPANCY: dict[str, tuple[int, int]] = {
    "product_simt": (256, 3),
    "product_mma": (256, 2),
    "weight_grad_simt": (256, 3),
    "weight_grad_mma": (256, 2),
    "find_unsorted": (256, 8),
    "bag_offsets": (256, 8),
    "bag_forward_sorted": (256, 4),
    "bag_forward_atomic": (256, 8),
    "bag_forward_rows_scan": (256, 4),
    "zero_if_unsorted": (256, 8),
    "check_entries": (256, 8),
    "fill_first_bad": (1, 32),
    "make_keys": (256, 8),
    "segment_starts": (256, 8),
    "count_unique": (1, 32),
    "grad_chunk_partials": (256, 3),
    "grad_rows_kernel": (256, 4),
    "grad_gains_kernel": (256, 8),
}


@dataclasses.dataclass(frozen=True)
class Budget:
    """The limits that let `blocks_per_sm` blocks of `threads` threads reside on one SM of an architecture."""

    kernel: str
    threads: int
    blocks_per_sm: int
    max_registers: int  # per thread, a multiple of the allocation unit (8), at most 255
    max_shared_bytes: int  # static shared memory per block


def budget(kernel: str, arch: str) -> Budget:
    """The budget of `kernel` (its name without template arguments) on `arch` ("sm_80" or "sm_90").

    Raises:
      KeyError: a kernel without an entry in OCCUPANCY, or an architecture without shared-memory figures.
    """
    threads, blocks = OCCUPANCY[kernel]
    if threads * blocks > _THREADS_PER_SM:
        raise ValueError(f"{kernel}: {blocks} blocks of {threads} threads exceed {_THREADS_PER_SM} threads per SM")
    per_warp = _REGISTERS_PER_SM // (blocks * -(-threads // 32))
    registers = min(255, per_warp // 32 // 8 * 8)
    shared = min(_STATIC_SHARED_LIMIT, _SHARED_PER_SM[arch] // blocks - _SHARED_RESERVED_PER_BLOCK)
    return Budget(kernel, threads, blocks, registers, shared)


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """One kernel's use of the SM as ptxas reports it for one architecture."""

    name: str  # e.g. "product_simt<float, 32>"
    arch: str
    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def base(self) -> str:
        """The name without template arguments: the key of OCCUPANCY."""
        return self.name.split("<", 1)[0]


def find_cuda_tool(name: str, nvcc: str | None = None) -> str | None:
    """A CUDA binary (`cuobjdump`, `nvdisasm`): on PATH, next to the real nvcc, under $CUDA_HOME/bin, or from the
    package registry's CUDA tool wheels (`nvidia-cuda-cuobjdump`, `nvidia-cuda-nvdisasm`, in the `test` extra:
    `nvidia/cu<N>/bin`)."""
    found = shutil.which(name)
    if found:
        return found
    nvcc = nvcc or find_nvcc()
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    if nvcc:
        roots.append(str(pathlib.Path(os.path.realpath(nvcc)).parent.parent))
    try:
        import nvidia  # a namespace package: the CUDA wheels' files

        roots += [str(path) for base in nvidia.__path__ for path in sorted(pathlib.Path(base).glob("cu*"))]
    except ImportError:
        pass
    for root in roots:
        if root and os.access(os.path.join(root, "bin", name), os.X_OK):
            return os.path.join(root, "bin", name)
    return None


def compile_cubin(source: str, arch: str, directory: os.PathLike | str, nvcc: str | None = None) -> tuple[
        pathlib.Path, str]:
    """Compiles `ops/cuda/<source>` for `arch` (e.g. "sm_90") into a cubin with `-Xptxas -v`.

    Returns the cubin and ptxas's report; the PTX the cubin was assembled from is kept next to it (`ptx_path`).
    All are cached in `directory` by the sources' hash, so a second call (another test, another process) reads them
    back.

    Raises:
      RuntimeError: no nvcc, or the compiler's error output.
    """
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda)")
    h = hashlib.sha256(arch.encode())
    for name in (source, *HEADERS, *_extra_headers()):
        h.update((CUDA_DIR / name).read_bytes())
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{pathlib.Path(source).stem}-{arch}-{h.hexdigest()[:16]}"
    cubin, report = directory / f"{stem}.cubin", directory / f"{stem}.ptxas.txt"
    if cubin.exists() and report.exists() and ptx_path(cubin).exists():
        return cubin, report.read_text()
    partial = directory / f"{stem}.{os.getpid()}.tmp"
    keep = pathlib.Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=directory))  # nvcc's intermediate files
    compute = arch.replace("sm_", "compute_")
    command = [nvcc, "-std=c++17", "-O3", f"-gencode=arch={compute},code={arch}", "-cubin", "-Xptxas", "-v",
               "-keep", "-keep-dir", str(keep), "-o", str(partial), str(CUDA_DIR / source)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed for {source} ({arch}):\n{done.stderr[-4000:]}")
        ptx = sorted(keep.glob("*.ptx"))
        if len(ptx) != 1:
            raise RuntimeError(f"nvcc kept {len(ptx)} PTX files for {source} ({arch}), expected 1")
        ptx[0].replace(ptx_path(cubin))
        report.write_text(done.stderr + done.stdout)
        partial.replace(cubin)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(keep, ignore_errors=True)
    return cubin, report.read_text()


def ptx_path(cubin: os.PathLike | str) -> pathlib.Path:
    """Where compile_cubin keeps the PTX of `cubin`."""
    return pathlib.Path(cubin).with_suffix(".ptx")


def kernel_ptx(ptx: str) -> dict[str, str]:
    """The PTX of each kernel (`.entry`) of a module, keyed by `kernel_label`; CUB's kernels left out."""
    parts = re.split(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+(\w+)\(", ptx, flags=re.M)
    names, bodies = parts[1::2], parts[2::2]
    return {label: body for label, body in zip(_demangle(names), bodies, strict=True) if label is not None}


def _extra_headers() -> list[str]:
    return sorted(p.name for p in CUDA_DIR.glob("*.h") if p.name not in HEADERS)


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def kernel_resources(report: str) -> dict[str, KernelResources]:
    """ptxas's `-v` report parsed into each entry function's resources, keyed by `kernel_label`.

    Raises:
      ValueError: an entry function whose register count the report does not give.
    """
    entries: list[tuple[str, str, list[str]]] = []
    for line in report.splitlines():
        match = _ENTRY.search(line)
        if match:
            entries.append((match.group(1), match.group(2), []))
        elif entries:
            entries[-1][2].append(line)
    labels = _demangle([mangled for mangled, _, _ in entries])
    found = {}
    for (mangled, arch, lines), label in zip(entries, labels, strict=True):
        if label is None:
            continue
        text = "\n".join(lines)
        used, stack, smem = _USED.search(text), _STACK.search(text), _SMEM.search(text)
        if used is None:
            raise ValueError(f"ptxas reported no register count for {mangled}")
        stack_values = [int(v) for v in stack.groups()] if stack else [0, 0, 0]
        found[label] = KernelResources(label, arch, int(used.group(1)), int(smem.group(1)) if smem else 0,
                                       *stack_values)
    return found


def kernel_sass(cubin: os.PathLike | str, cuobjdump: str) -> dict[str, str]:
    """The SASS of each kernel in `cubin` (`cuobjdump -sass`), keyed by `kernel_label`.

    Raises:
      RuntimeError: cuobjdump's error output.
    """
    env = dict(os.environ)
    if "NVDISASM_PATH" not in env and not shutil.which("nvdisasm"):
        # cuobjdump runs nvdisasm for -sass; the wheels install it beside cuobjdump, off PATH.
        beside = pathlib.Path(cuobjdump).parent / "nvdisasm"
        env["NVDISASM_PATH"] = str(beside.parent if beside.exists() else find_cuda_tool("nvdisasm") or "")
    done = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"cuobjdump failed for {cubin}:\n{done.stderr[-2000:]}")
    parts = re.split(r"^\s*Function : (\w+)\s*$", done.stdout, flags=re.M)
    names, bodies = parts[1::2], parts[2::2]
    return {label: body for label, body in zip(_demangle(names), bodies, strict=True) if label is not None}


def kernel_label(demangled: str) -> str:
    """`void sparseflow::(anonymous namespace)::product_simt<float, 32>(const float*, ...)` -> `product_simt<float,
    32>`: the name with its template arguments, without namespaces, return type or parameters."""
    name = demangled
    if name.startswith("void "):
        name = name[5:]
    depth, end = 0, len(name)
    for i, ch in enumerate(name):  # the parameter list is the first "(" outside template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous", i):
            end = i
            break
    name = name[:end]
    head = name.split("<", 1)
    qualified = head[0].rsplit("::", 1)[-1]
    return qualified if len(head) == 1 else f"{qualified}<{head[1]}"


def _demangle(names: list[str]) -> list[str | None]:
    """Each name's kernel_label; None for kernels outside namespace sparseflow (CUB's, instantiated by its calls)."""
    if not names:
        return []
    filt = shutil.which("c++filt")
    if filt is None:
        raise RuntimeError("c++filt not found: the kernels' names cannot be demangled")
    done = subprocess.run([filt], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    labels: list[str | None] = []
    for mangled, line in zip(names, done.stdout.splitlines(), strict=True):
        if line == mangled and "sparseflow" in mangled:  # c++filt echoes what it cannot read
            raise ValueError(f"cannot demangle the kernel name {mangled}")
        labels.append(kernel_label(line) if "sparseflow::" in line else None)
    return labels
