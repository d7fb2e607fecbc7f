"""Without TensorFlow (an install without the `tf` extra) every TensorFlow-side entry says how to install it."""

import doctest
import os
import subprocess
import sys

import pytest

import sparse_io.extras

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HINT = "pip install 'sparseflow[tf]'"
# Runs the rest of the command line as `python -m ...` in a process where `import tensorflow` fails as it does
# where TensorFlow is not installed.
_WITHOUT_TF = (
    "import runpy, sys\n"
    "sys.modules['tensorflow'] = None\n"
    "code = sys.argv[1]\n"
    "sys.argv = sys.argv[1:]\n"
    "exec(code) if not code.startswith('-m ') else runpy.run_module(code[3:], run_name='__main__', alter_sys=True)\n"
)


def _run_without_tensorflow(code, *args):
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-c", _WITHOUT_TF, code, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


@pytest.mark.parametrize("module", ["ops", "transforms.tfdata", "ops.embedding_bag", "transforms.tfdata.dataset"])
def test_importing_a_tensorflow_module_names_the_install(module):
    done = _run_without_tensorflow(
        f"try:\n import {module}\nexcept ModuleNotFoundError as e:\n print(type(e).__name__, '|', e)"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        f"MissingExtraError | {module.split('.')[0] if module.startswith('ops') else 'transforms.tfdata'} "
        f"needs tensorflow, which is not installed: {HINT}"
    )


def test_the_trainer_without_tensorflow_exits_2_with_the_install_hint(tmp_path):
    done = _run_without_tensorflow("-m pipelines.train", "--data", str(tmp_path), "--model_dir", str(tmp_path / "m"))
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("pipelines.train: error: ") and line.endswith(HINT), line


def test_the_beam_side_imports_without_tensorflow():
    done = _run_without_tensorflow("import transforms, transforms.beam, sparse_io, pipelines.ingest; print('ok')")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_another_missing_module_is_not_taken_for_an_extra():
    assert sparse_io.extras.missing_extra(ModuleNotFoundError("x", name="yaml")) is None
    assert sparse_io.extras.missing_extra(ValueError("tensorflow")) is None
    assert sparse_io.extras.missing_extra(ModuleNotFoundError("x", name="tensorflow.python")) == (
        f"tensorflow is not installed: {HINT}")


def test_the_docstring_examples_run():
    assert doctest.testmod(sparse_io.extras).failed == 0
