"""A native build is never silent: one line before the compiler starts, one when it is done."""

import subprocess
import sys

import pytest

from sparse_io import native_build


def _trivial_library(tmp_path):
    source = tmp_path / "one.cc"
    source.write_text('extern "C" int sparseflow_one() { return 1; }\n')
    return lambda output: [native_build.compiler(), "-shared", "-fPIC", str(source), "-o", str(output)]


def test_a_build_says_what_it_compiles_before_and_when_it_is_done(tmp_path, capsys):
    target = tmp_path / "cache" / "libone.so"
    native_build.compile_library(target, _trivial_library(tmp_path), announce="the test kernels (one time)")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("sparseflow: compiling the test kernels (one time)")
    assert "python -m ops.build" in lines[0]
    assert lines[1].startswith("sparseflow: built libone.so in ") and lines[1].endswith(str(target))
    assert target.exists()


def test_a_cached_library_is_returned_without_a_word(tmp_path, capsys):
    target = tmp_path / "cache" / "libone.so"
    native_build.compile_library(target, _trivial_library(tmp_path))
    capsys.readouterr()
    assert native_build.compile_library(target, _trivial_library(tmp_path), announce="again") == target
    assert capsys.readouterr().err == ""


def test_a_failed_build_says_so_and_raises(tmp_path, capsys):
    bad = tmp_path / "bad.cc"
    bad.write_text("this is not C++\n")
    command = lambda output: [native_build.compiler(), "-shared", str(bad), "-o", str(output)]  # noqa: E731
    with pytest.raises(native_build.BuildError):
        native_build.compile_library(tmp_path / "libbad.so", command, announce="bad kernels")
    err = capsys.readouterr().err
    assert "compiling bad kernels" in err and "failed" in err
    assert not (tmp_path / "libbad.so").exists()


def test_the_tensorflow_kernels_announce_the_tensorflow_version_and_the_time(monkeypatch, tmp_path):
    import tensorflow as tf

    from ops import _native_build

    seen = {}
    monkeypatch.setattr(_native_build, "compile_library", lambda target, command, *, announce: seen.update(a=announce))
    _native_build.build()
    assert seen["a"] == f"sparseflow's native kernels for TensorFlow {tf.__version__} (one time, about a minute)"


def test_python_m_ops_build_builds_ahead_of_time_and_prints_the_paths(tmp_path):
    import os

    env = {**os.environ, "SPARSEFLOW_CACHE_DIR": str(tmp_path / "cache"), "CXX": "no-such-compiler-here"}
    done = subprocess.run([sys.executable, "-m", "ops.build"], capture_output=True, text=True, env=env, timeout=300)
    # Without a compiler it warns for both libraries and still exits 0: the compositions run instead.
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: native")]
    assert len(warnings) == 2, done.stderr[-2000:]
    assert "no C++ compiler 'no-such-compiler-here'" in warnings[0]
