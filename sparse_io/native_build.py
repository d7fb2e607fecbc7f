"""Builds sparse_io's native helpers (`sparse_io/native/*.cc`: no TensorFlow, no Python API) once and caches them.

The library is plain C++ called through ctypes, so the Beam workers that
write shards need a C++ compiler at most, never TensorFlow. It lands in the
same cache as the TensorFlow kernels (`ops/_native_build.py`): `$SPARSEFLOW_CACHE_DIR`,
else `$XDG_CACHE_HOME/sparseflow`, else `~/.cache/sparseflow`, in a folder named by a hash of
the sources, the compiler and its flags (the instruction-set level included), written to a
temporary file and renamed into place so concurrent builds each leave a whole library.

`load()` returns the loaded `ctypes.CDLL` (building it on first use), or None
where no compiler works: the callers then run their numpy references, after
one warning line.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "BuildError",
    "build",
    "cache_dir",
    "compile_library",
    "compiler",
    "function",
    "instruction_flags",
    "load",
    "unavailable_reason",
]

SOURCES = Path(__file__).parent / "native"
LIBRARY_NAME = "sparseflow_io.so"
_log = logging.getLogger("sparseflow.sparse_io")
_failure: list[str] = []


class BuildError(RuntimeError):
    """A native library could not be built (no compiler, or the compiler failed)."""


def cache_dir() -> Path:
    """Where built libraries are kept (`$SPARSEFLOW_CACHE_DIR`, else the user cache dir)."""
    explicit = os.environ.get("SPARSEFLOW_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sparseflow"


def compiler() -> str:
    """The C++ compiler builds use: `$CXX`, else g++."""
    return os.environ.get("CXX") or "g++"


def instruction_flags() -> list[str]:
    """The x86-64 level this CPU supports (never -march=native: the level is part of the cache key)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        flags = []
    if {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx2", "fma", "bmi2", "movbe"} <= set(flags):
        return ["-march=x86-64-v4"]
    if {"avx2", "fma", "bmi2", "movbe"} <= set(flags):
        return ["-march=x86-64-v3"]
    if {"sse4_2", "popcnt", "ssse3"} <= set(flags):
        return ["-march=x86-64-v2"]
    return []


def _flags() -> list[str]:
    return ["-O3", "-std=c++17", *instruction_flags(), "-shared", "-fPIC", "-fvisibility=hidden"]


def source_digest(sources: Sequence[Path], flags: Sequence[str]) -> str:
    """16 hex digits naming a build: the sources' names and bytes, the flags and the compiler's name.

    Sources are keyed by content, not by path: a moved checkout reuses its build.
    """
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update(" ".join(flags).encode())
    digest.update(Path(compiler()).name.encode())
    return digest.hexdigest()[:16]


def library_path() -> Path:
    """The cached library's path for these sources and flags (it may not exist yet)."""
    return cache_dir() / f"io-{source_digest(sorted(SOURCES.glob('*.cc')), _flags())}" / LIBRARY_NAME


def build() -> Path:
    """Returns the path of the built library, compiling it first when the cache lacks it.

    Raises:
      BuildError: no compiler on PATH, or compilation failed (the message holds the compiler's last lines).
    """
    sources = sorted(SOURCES.glob("*.cc"))
    return compile_library(
        library_path(),
        lambda output: [compiler(), *_flags(), *map(str, sources), "-o", str(output)],
        announce="sparseflow's native I/O helpers (one time, a few seconds)",
    )


def compile_library(target: Path, command: Callable[[Path], list[str]], *, announce: str | None = None) -> Path:
    """Runs `command(partial)` to compile a shared library unless `target` exists; returns `target`.

    The compiler writes into a temporary folder beside `target`, and the
    library is renamed into place, so concurrent builds each leave a whole one.
    A build is never silent: with `announce` (what is built, and how long it
    takes), one line goes to stderr before the compiler starts and one when it
    is done, so a first call that compiles does not look hung.

    Example:
      compile_library(path, command, announce="my kernels (one time, about a minute)")
      # stderr: "sparseflow: compiling my kernels ..." then "sparseflow: built ... in 41 s: <path>"

    Raises:
      BuildError: no compiler on PATH, or it failed (the message holds its last lines).
    """
    if target.exists():
        return target
    if shutil.which(compiler()) is None:
        raise BuildError(f"no C++ compiler {compiler()!r} found (set CXX)")
    target.parent.mkdir(parents=True, exist_ok=True)
    what = announce or target.name
    print(f"sparseflow: compiling {what}; `python -m ops.build` does it ahead of time", file=sys.stderr, flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        partial = Path(scratch) / target.name
        result = subprocess.run(command(partial), capture_output=True, text=True)
        if result.returncode != 0:
            tail = " | ".join(result.stderr.strip().splitlines()[-3:])
            print(f"sparseflow: compiling {target.name} failed", file=sys.stderr, flush=True)
            raise BuildError(f"{compiler()} failed with exit code {result.returncode}: {tail}")
        os.replace(partial, target)
    print(f"sparseflow: built {target.name} in {time.monotonic() - started:.0f} s: {target}", file=sys.stderr,
          flush=True)
    return target


@functools.cache
def load() -> ctypes.CDLL | None:
    """The loaded library, or None (see `unavailable_reason`); logs one warning the first time it fails."""
    try:
        return ctypes.CDLL(str(build()))
    except (BuildError, OSError) as error:
        _failure.append(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
        _log.warning("sparseflow: native I/O helpers unavailable, using numpy: %s", _failure[0])
        return None


def function(name: str, argtypes: Sequence, restype):
    """The library's function `name` with its ctypes signature set, or None where the library did not load.

    Example:
      count = function("sparseflow_count_frames", [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64], ctypes.c_int64)
    """
    library = load()
    if library is None:
        return None
    bound = getattr(library, name)
    bound.argtypes, bound.restype = list(argtypes), restype
    return bound


def unavailable_reason() -> str | None:
    """Why `load()` is None, or None when it loaded."""
    return None if load() is not None else _failure[0]
