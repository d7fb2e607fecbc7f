"""Every `>>>` example in the packages' docstrings runs and prints what it says.

Docstrings are where a user reads how to call a function; an example that no longer runs teaches
the wrong call. Each module with an example is one test, named for the module.
"""

import doctest
import importlib
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("sparse_io", "ops", "transforms", "pipelines")


def _modules_with_examples() -> list[str]:
    found = ["sparseflow"]
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if ">>>" not in path.read_text(encoding="utf-8"):
                continue
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found.append(".".join(parts))
    return found


MODULES = _modules_with_examples()


def test_the_examples_are_found():
    assert len(MODULES) > 70 and "sparse_io.example_encoding" in MODULES and "ops.embedding_bag" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_run(name, tmp_path, monkeypatch):
    import numpy as np
    import pyarrow as pa

    monkeypatch.chdir(tmp_path)  # an example that writes a relative path writes it here
    extraglobs = {"np": np, "pa": pa}
    if not name.startswith("sparse_io") and not name.startswith("transforms.beam"):
        import tensorflow as tf

        extraglobs["tf"] = tf
    module = importlib.import_module(name)
    results = doctest.testmod(module, extraglobs=extraglobs, report=True,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert results.attempted > 0, f"{name} has no example that doctest finds"
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples of {name} failed (see stdout)"
    assert os.getcwd() == str(tmp_path)
