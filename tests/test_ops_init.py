"""`import ops` loads TensorFlow only when an exported name is first used, and every exported name resolves."""

import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_importing_ops_defers_tensorflow_to_the_first_exported_name():
    code = (
        "import sys, ops\n"
        "print('tensorflow' in sys.modules)\n"
        "ops.embedding_bag\n"
        "print('tensorflow' in sys.modules)\n"
    )
    assert _run(code) == ["False", "True"]


def test_importing_a_submodule_named_like_its_function_leaves_the_function_on_the_package():
    # The import system binds `ops.to_coo` (the module) on the package; the package keeps the function.
    code = (
        "import types\n"
        "import ops.to_coo, ops.convert_to_coo, ops.embedding_bag, ops.pad_coo\n"
        "import ops\n"
        "for name in ('to_coo', 'convert_to_coo', 'embedding_bag', 'pad_coo'):\n"
        "    print(name, type(getattr(ops, name)).__name__)\n"
    )
    assert _run(code) == ["to_coo", "function", "convert_to_coo", "function", "embedding_bag", "function",
                          "pad_coo", "function"]


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"})
    return done.stdout.split()


def test_every_exported_name_is_its_home_modules_object():
    import importlib

    import ops

    homes = {"BlockSparseMatMul": "ops.block_sparse", "Coo": "ops.coo", "banded_layout": "ops.block_layouts",
             "block_sparse_matmul": "ops.block_sparse", "convert_to_coo": "ops.convert_to_coo",
             "embedding_bag": "ops.embedding_bag", "magnitude_layout": "ops.block_layouts", "pad_coo": "ops.pad_coo",
             "random_layout": "ops.block_layouts", "stock_ops_only": "ops._native", "to_coo": "ops.to_coo"}
    assert sorted(ops.__all__) == sorted([*homes, "layers"])
    for name, home in homes.items():
        assert getattr(ops, name) is getattr(importlib.import_module(home), name), name
    assert ops.layers is importlib.import_module("ops.layers")
    assert set(ops.__all__) <= set(dir(ops))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        ops.nothing_here  # noqa: B018
