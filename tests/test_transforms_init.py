"""`import transforms` stays light: Beam only on first use of a Beam name, never TensorFlow."""

import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )
    return done.stdout.strip()


def test_importing_transforms_and_a_beam_transform_does_not_import_tensorflow():
    out = _run(
        "import sys, transforms\n"
        "print('apache_beam' in sys.modules, 'tensorflow' in sys.modules)\n"
        "transforms.HashIds, transforms.WriteShards, transforms.hash_ids_arrow\n"
        "print('apache_beam' in sys.modules, 'tensorflow' in sys.modules)\n"
        "print(sorted(set(transforms.__all__) - set(dir(transforms))))"
    )
    assert out.splitlines() == ["False False", "True False", "[]"]
