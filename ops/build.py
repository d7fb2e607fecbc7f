"""Builds sparseflow's native kernels ahead of time: `python -m ops.build` (what `make native` runs).

Without it the first call that needs them (an `ops.embedding_bag`, a columnar read, an ingest's
encoder) compiles them, after one line on stderr saying so; a failed build warns once and the
stock-op compositions and numpy encoders run instead. Prints each library's path.
"""

from ops._native_build import main

if __name__ == "__main__":
    raise SystemExit(main())
