"""Builds the TensorFlow GPU ops (`make gpu-ops`) with the nvcc of the CUDA release TensorFlow was built with.

A custom op's CUDA calls resolve to the CUDA runtime TensorFlow ships (the
pinned TensorFlow: CUDA 12.5.1), so kernels compiled by another major or minor
release (nvcc 13.0 is on this machine's PATH) would run on a runtime that does
not support them. This script therefore reads
`tf.sysconfig.get_build_info()["cuda_version"]`, takes the first nvcc of that
major.minor among `$NVCC`, `nvcc` on PATH, `$CUDA_HOME/bin/nvcc`,
`/usr/local/cuda-X.Y/bin/nvcc` and `/usr/local/cuda/bin/nvcc`, and refuses
with one line naming both versions when none matches. The fat binary carries
SASS for every listed architecture and PTX for the newest, so a newer GPU
JIT-compiles the kernels instead of finding no image.

    python ops/cuda/build_tf_ops.py --out build/gpu_ops [--archs sm_80,sm_90] [--print_nvcc]

Run as a file (not `-m`): `import ops` would load the CPU kernels' library
first. Exit status 0 when built (or, with --print_nvcc, when an nvcc fits),
1 with one `error: ...` line otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

CUDA_DIR = Path(__file__).resolve().parent
KERNELS = ("embedding_bag.cu", "block_sparse.cu")
BINDING = ("tf/op_defs.cc", "tf/gpu_kernels.cc")
DEFAULT_ARCHS = ("sm_80", "sm_90")
SYSTEM_CUDA_ROOTS = ("/usr/local/cuda-{wanted}", "/usr/local/cuda")


class BuildRefused(Exception):
    """The build cannot run here; the message is the one line to print."""


def release_of(nvcc: str) -> str | None:
    """The "X.Y" release an nvcc reports (`nvcc --version`: "... release 12.5, V12.5.82"), or None."""
    try:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return None
    match = re.search(r"release (\d+)\.(\d+)", done.stdout)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def major_minor(version: str) -> str:
    """"12.5.1" -> "12.5"."""
    parts = version.split(".")
    return ".".join(parts[:2])


def nvcc_candidates(wanted: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The nvcc paths to try, in order, without duplicates (see the module docstring)."""
    env = os.environ if environ is None else environ
    candidates = [env.get("NVCC"), shutil.which("nvcc", path=env.get("PATH"))]
    for root in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), *(r.format(wanted=wanted) for r in SYSTEM_CUDA_ROOTS)):
        if root:
            candidates.append(os.path.join(root, "bin", "nvcc"))
    seen: list[str] = []
    for path in candidates:
        if path and os.access(path, os.X_OK) and all(not os.path.samefile(path, other) for other in seen):
            seen.append(path)
    return seen


def select_nvcc(tf_cuda_version: str, environ: Mapping[str, str] | None = None, *, any_release: bool = False) -> str:
    """The first nvcc of `tf_cuda_version`'s major.minor.

    With `any_release`, the first nvcc found is taken whatever its release: a
    compile check of the sources and the binding, whose library must not be
    run on a GPU.

    Raises:
      BuildRefused: none matches (naming what was found and what is needed), or no nvcc at all.
    """
    wanted = major_minor(tf_cuda_version)
    env = os.environ if environ is None else environ
    found = [(path, release_of(path)) for path in nvcc_candidates(wanted, env)]
    if any_release and found:
        return found[0][0]
    if env.get("NVCC") and found and found[0][0] == env["NVCC"] and found[0][1] != wanted:
        path, release = found[0]
        raise BuildRefused(f"gpu-ops needs nvcc {wanted} (TensorFlow was built with CUDA {tf_cuda_version}); "
                           f"NVCC={path} is nvcc {release}")
    for path, release in found:
        if release == wanted:
            return path
    if not found:
        raise BuildRefused(f"gpu-ops needs nvcc {wanted} (TensorFlow was built with CUDA {tf_cuda_version}); "
                           "no nvcc found (set NVCC=/path/to/nvcc or CUDA_HOME)")
    others = ", ".join(f"{path} is nvcc {release or 'of unknown release'}" for path, release in found)
    raise BuildRefused(f"gpu-ops needs nvcc {wanted} (TensorFlow was built with CUDA {tf_cuda_version}); {others}: "
                       f"install CUDA {wanted} and set NVCC= or CUDA_HOME=")


def cuda_home_of(nvcc: str, environ: Mapping[str, str] | None = None) -> Path:
    """The CUDA installation holding `nvcc`'s headers.

    `$CUDA_HOME`, else the folder above nvcc's `bin/`, else /usr/local/cuda: an nvcc on PATH may be a
    wrapper script outside its installation.
    """
    env = os.environ if environ is None else environ
    candidates = [env.get("CUDA_HOME"), str(Path(nvcc).resolve().parent.parent), "/usr/local/cuda"]
    for root in candidates:
        if root and (Path(root) / "include" / "cuda_runtime_api.h").is_file():
            return Path(root)
    raise BuildRefused(f"gpu-ops: no CUDA headers (include/cuda_runtime_api.h) beside {nvcc}; set CUDA_HOME")


def gencode_flags(archs: list[str]) -> list[str]:
    """SASS for every arch, and PTX for the newest (so later GPUs JIT-compile it)."""
    numbers = sorted({int(a.removeprefix("sm_")) for a in archs})
    if not numbers:
        raise BuildRefused("gpu-ops needs at least one architecture (--archs sm_80,sm_90)")
    flags = [f"-gencode=arch=compute_{n},code=sm_{n}" for n in numbers]
    return [*flags, f"-gencode=arch=compute_{numbers[-1]},code=compute_{numbers[-1]}"]


def _tensorflow_cuda_version() -> tuple[object, str]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # the build prints its own lines, not TensorFlow's
    import tensorflow as tf

    if not tf.test.is_built_with_cuda():
        raise BuildRefused("gpu-ops needs TensorFlow built with CUDA; this TensorFlow has no CUDA support")
    version = tf.sysconfig.get_build_info().get("cuda_version")
    if not version:
        raise BuildRefused("gpu-ops: this TensorFlow does not say which CUDA it was built with")
    return tf, str(version)


def _run(command: list[str]) -> None:
    print(shlex.join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise BuildRefused(f"gpu-ops: {Path(command[0]).name} failed with exit code {done.returncode}")


def build(out: Path, archs: list[str], nvcc: str, tf) -> Path:
    """Compiles the kernels and the binding into `out/libsparseflow_gpu_ops.so`; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    cuda_home = cuda_home_of(nvcc)
    objects = []
    for source in KERNELS:
        obj = out / (Path(source).stem + ".o")
        _run([nvcc, "-std=c++17", "-O3", *gencode_flags(archs), "-Xcompiler", "-fPIC", "-c",
              str(CUDA_DIR / source), "-o", str(obj)])
        objects.append(str(obj))
    library = out / "libsparseflow_gpu_ops.so"
    _run([os.environ.get("CXX", "g++"), "-std=c++17", "-O2", "-shared", "-fPIC", "-DGOOGLE_CUDA=1",
          "-Wno-deprecated-declarations", "-Wno-interference-size", f"-I{cuda_home / 'include'}",
          *tf.sysconfig.get_compile_flags(), *(str(CUDA_DIR / s) for s in BINDING), *objects, "-o", str(library),
          *tf.sysconfig.get_link_flags(), f"-L{cuda_home / 'lib64'}", "-lcudart"])
    return library


def main(argv: list[str] | None = None) -> int:
    """Runs the build (or --print_nvcc) with `argv`; returns the exit status."""
    parser = argparse.ArgumentParser(prog="build_tf_ops.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="build/gpu_ops", help="the folder for the objects and the library")
    parser.add_argument("--archs", default=",".join(DEFAULT_ARCHS), help="comma-separated, e.g. sm_80,sm_90")
    parser.add_argument("--print_nvcc", action="store_true", help="print the nvcc that fits and exit")
    parser.add_argument("--any_nvcc", action="store_true",
                        help="compile check only: take any nvcc release (the library must not run on a GPU)")
    args = parser.parse_args(argv)
    try:
        tf, version = _tensorflow_cuda_version()
        nvcc = select_nvcc(version, any_release=args.any_nvcc)
        if args.print_nvcc:
            print(nvcc)
            return 0
        library = build(Path(args.out), [a.strip() for a in args.archs.split(",") if a.strip()], nvcc, tf)
    except BuildRefused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    print(f"built {library} (nvcc {release_of(nvcc)}, TensorFlow's CUDA {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
