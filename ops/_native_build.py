"""Builds the native CPU kernels (`ops/native/*.cc`) against the installed TensorFlow, once, and caches them.

The shared library lands in `$SPARSEFLOW_CACHE_DIR` (default: `$XDG_CACHE_HOME/sparseflow`, else
`~/.cache/sparseflow`), in a folder named by the TensorFlow version and a hash of the sources, the
compiler flags and the instruction-set level, so a TensorFlow upgrade, an edited source or another
CPU family builds afresh and nothing is ever written into the installed package. The compiler is
`$CXX` (default `g++`). A build writes a temporary file and renames it into place, so concurrent
builds (test workers) each leave a whole library.

`python ops/_native_build.py` builds (the README's `make demo` and `make test` run it first, as a
file, so that TensorFlow loads only once its log lines are silenced) this library and
`sparse_io.native_build`'s I/O helpers, and prints each library's path in a line; without a
working compiler it prints a warning line and exits 0: the ops then use their stock-op
compositions, and sparse_io its numpy encoders.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sparse_io import native_build as io_build
from sparse_io.native_build import BuildError, cache_dir, compile_library, compiler, instruction_flags, source_digest

SOURCES = Path(__file__).parent / "native"
LIBRARY_NAME = "sparseflow_native.so"


def _command(sources: list[Path], output: Path) -> list[str]:
    import tensorflow as tf

    return [
        compiler(),
        "-O3",
        # Fused multiply-adds in the inner loops; each output is still summed in one fixed order.
        "-ffp-contract=fast",
        *instruction_flags(),
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        *tf.sysconfig.get_compile_flags(),
        f"-I{SOURCES}",
        *map(str, sources),
        "-o",
        str(output),
        *tf.sysconfig.get_link_flags(),
    ]


def library_path() -> Path:
    """The cached library's path for this TensorFlow, these sources and these flags (it may not exist yet)."""
    import tensorflow as tf

    sources = [path for path in sorted(SOURCES.glob("*")) if path.suffix in (".cc", ".h")]
    command = [arg for arg in _command([], Path("out")) if not arg.startswith("-I" + str(SOURCES))]
    digest = source_digest(sources, command[1:])
    return cache_dir() / f"tf{tf.__version__}-{digest}" / LIBRARY_NAME


def build() -> Path:
    """Returns the path of the built library, compiling it first when the cache lacks it.

    Raises:
      BuildError: no compiler on PATH, or compilation failed (the message holds the compiler's last lines).
    """
    import tensorflow as tf

    sources = sorted(SOURCES.glob("*.cc"))
    announce = f"sparseflow's native kernels for TensorFlow {tf.__version__} (one time, about a minute)"
    return compile_library(library_path(), lambda output: _command(sources, output), announce=announce)


def _import_tensorflow_quietly() -> None:
    """Imports TensorFlow with stderr closed: its native libraries log to the descriptor while loading.

    A build step prints only its result; an import that fails still raises, after stderr is back.
    """
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Builds both libraries and prints their paths; returns the exit status (0 also when a build failed).

    The flags are checked before TensorFlow is imported: `--help` or a bad flag answers at once (exit 0 or 2).
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ops.build", description=__doc__.split("\n\n")[0])
    parser.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # and no lines from TensorFlow's later C++ calls
    _import_tensorflow_quietly()
    try:
        print(f"native CPU kernels: {build()}")
    except BuildError as error:
        print(f"warning: native kernels not built, the stock-op compositions will run: {error}", file=sys.stderr)
    try:
        print(f"native I/O helpers: {io_build.build()}")
    except BuildError as error:
        print(f"warning: native I/O helpers not built, numpy will encode: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
