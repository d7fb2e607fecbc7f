"""Runs the notebooks top to bottom and saves each with its outputs: `make notebooks`.

Each notebook runs in a fresh python3 kernel started from notebooks/, with the repository first on
PYTHONPATH (as a user of a clone opening it would, and as tests/test_notebooks.py runs it), and a
cell error stops the run with the cell named, leaving the committed file as it was. Timing metadata
is not recorded, so a rerun changes only what the cells print.

    python notebooks/regenerate.py                      # every notebook
    python notebooks/regenerate.py quickstart.ipynb     # one
"""

from __future__ import annotations

import os
import pathlib
import sys

import nbclient
import nbformat

NOTEBOOKS = pathlib.Path(__file__).resolve().parent
REPO = NOTEBOOKS.parent
NAMES = ["quickstart.ipynb", "sparse_ops.ipynb"]
CELL_TIMEOUT_S = 240


def execute(name: str) -> nbformat.NotebookNode:
    """The notebook `name` (in notebooks/) after running every cell in a fresh kernel; raises CellExecutionError."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S, record_timing=False,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute(env=env)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
    return nb


def main(argv: list[str]) -> int:
    """Runs and saves the notebooks named in `argv` (all of them when empty); returns the exit status.

    A name that is not one of `NAMES` is a usage error (exit 2) before any kernel starts.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python notebooks/regenerate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NOTEBOOK",
                        help=f"notebooks to run (default: all of {', '.join(NAMES)})")
    names = parser.parse_args(argv).names
    unknown = [name for name in names if name not in NAMES]
    if unknown:
        parser.error(f"no notebook {unknown[0]!r} (choose from {', '.join(NAMES)})")
    for name in names or NAMES:
        nb = execute(name)
        nbformat.validate(nb)
        nbformat.write(nb, NOTEBOOKS / name)
        print(f"notebooks/{name}: {sum(c.cell_type == 'code' for c in nb.cells)} cells run, outputs saved")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
