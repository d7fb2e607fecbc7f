"""The Makefile's interpreter probe: the first Python >= 3.11 on PATH, found without a word on stderr."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_missing_candidate_is_skipped_in_silence(tmp_path):
    shim = tmp_path / "python3.12"  # what a version manager's shim does for a version it does not have
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    (tmp_path / "python3.11").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHON", None)
    done = subprocess.run(["make", "-s", "-f", str(REPO / "Makefile"), "--eval", "probe: ; @echo $(PYTHON)", "probe"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.strip() == "python3.11"
