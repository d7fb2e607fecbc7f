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
