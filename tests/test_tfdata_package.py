"""The tf.data stage's public names, and `import transforms` staying free of TensorFlow and Beam."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_importing_transforms_loads_neither_tensorflow_nor_beam():
    code = "import sys, transforms; print(sorted(m for m in ('tensorflow', 'apache_beam') if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_tfdata_names_are_exported_lazily_from_transforms():
    import transforms
    import transforms.tfdata as tfdata

    for name in ("make_dataset", "make_log_dataset", "to_coo", "pad_to_capacity", "hash_ids", "truncate"):
        assert getattr(transforms, name) is getattr(tfdata, name)
        assert name in dir(transforms)


def test_the_docstring_examples_run():
    import doctest
    import importlib

    import numpy as np
    import pyarrow as pa
    import tensorflow as tf

    for name in (
        "core.sharding", "core.state", "ids", "coo", "columnar.numpy_coo", "columnar.native_batch", "logs.rebatch",
        "dataset", "log_dataset",
    ):
        module = importlib.import_module(f"transforms.tfdata.{name}")
        results = doctest.testmod(module, extraglobs={"tf": tf, "np": np, "pa": pa}, optionflags=doctest.ELLIPSIS)
        assert results.failed == 0, name
