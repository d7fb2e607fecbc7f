"""`make gpu-ops` builds with the nvcc of TensorFlow's CUDA release, or refuses naming both versions.

TensorFlow and nvcc are stood in for by small fakes, so these tests run on any machine: a
`tensorflow` package that reports a CUDA version, and `nvcc` scripts that report a release.
"""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "ops" / "cuda" / "build_tf_ops.py"


def _fake_tensorflow(root: pathlib.Path, cuda_version: str = "12.5.1", with_cuda: bool = True) -> None:
    (root / "tensorflow").mkdir(parents=True)
    (root / "tensorflow" / "__init__.py").write_text(
        "class test:\n"
        "    @staticmethod\n"
        f"    def is_built_with_cuda():\n        return {with_cuda}\n"
        "class sysconfig:\n"
        "    @staticmethod\n"
        f"    def get_build_info():\n        return {{'cuda_version': {cuda_version!r}}}\n"
    )


def _fake_nvcc(folder: pathlib.Path, release: str) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    nvcc = folder / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return nvcc


def _run(tmp_path, *args, **env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NVCC", "CUDA_HOME", "CUDA_PATH")}
    env.update(PYTHONPATH=str(tmp_path / "py"), PATH=f"{tmp_path / 'path'}:/usr/bin:/bin", **env_extra)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


@pytest.fixture
def tf_12_5(tmp_path):
    _fake_tensorflow(tmp_path / "py")
    return tmp_path


def test_an_nvcc_of_another_release_is_refused_naming_both_versions(tf_12_5):
    nvcc = _fake_nvcc(tf_12_5 / "path", "13.0")
    done = _run(tf_12_5, "--print_nvcc")
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: gpu-ops needs nvcc 12.5 (TensorFlow was built with CUDA 12.5.1); ")
    assert f"{nvcc} is nvcc 13.0" in line


def test_the_matching_release_is_found_under_cuda_home_behind_another_on_path(tf_12_5):
    _fake_nvcc(tf_12_5 / "path", "13.0")
    wanted = _fake_nvcc(tf_12_5 / "cuda-12.5" / "bin", "12.5")
    done = _run(tf_12_5, "--print_nvcc", CUDA_HOME=str(tf_12_5 / "cuda-12.5"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(wanted)


def test_nvcc_named_by_the_user_must_match_too(tf_12_5):
    _fake_nvcc(tf_12_5 / "cuda-12.5" / "bin", "12.5")
    named = _fake_nvcc(tf_12_5 / "other", "12.4")
    done = _run(tf_12_5, "--print_nvcc", NVCC=str(named), CUDA_HOME=str(tf_12_5 / "cuda-12.5"))
    assert done.returncode == 1
    assert f"NVCC={named} is nvcc 12.4" in done.stderr


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import build_tf_ops
    finally:
        sys.path.pop(0)
    return build_tf_ops


def test_no_nvcc_at_all_says_how_to_name_one(tmp_path, monkeypatch):
    module = _module()
    monkeypatch.setattr(module, "SYSTEM_CUDA_ROOTS", (str(tmp_path / "none"),))
    refusal = r"needs nvcc 12\.5 .*no nvcc found \(set NVCC=/path/to/nvcc or CUDA_HOME\)$"
    with pytest.raises(module.BuildRefused, match=refusal):
        module.select_nvcc("12.5.1", {"PATH": str(tmp_path)})


def test_a_tensorflow_without_cuda_is_refused_first(tmp_path):
    _fake_tensorflow(tmp_path / "py", with_cuda=False)
    _fake_nvcc(tmp_path / "path", "12.5")
    done = _run(tmp_path, "--print_nvcc")
    assert done.returncode == 1
    assert done.stderr.strip() == "error: gpu-ops needs TensorFlow built with CUDA; this TensorFlow has no CUDA support"


def test_the_fat_binary_has_sass_for_each_arch_and_ptx_for_the_newest():
    assert _module().gencode_flags(["sm_90", "sm_80"]) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]


def test_any_nvcc_takes_the_first_release_found_for_a_compile_check(tf_12_5):
    first = _fake_nvcc(tf_12_5 / "path", "13.0")
    done = _run(tf_12_5, "--print_nvcc", "--any_nvcc")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(first)
