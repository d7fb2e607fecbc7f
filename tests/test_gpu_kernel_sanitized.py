"""The GPU's sanitizer run (benchmarks/gpu_kernels_run.sh, benchmarks.gpu_kernel_sanitized) where no GPU is present:
it takes exactly the emulation tests' embedding-bag cases, its checks pass on the emulation and fail on wrong
kernels, its kernels build with nvcc, and the script is valid bash that runs its steps in order and fails on a
sanitizer error (its refusal without a GPU: tests/test_gpu_kernels.py).
"""

import os
import pathlib
import stat
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.cuda_build import find_nvcc
from benchmarks.gpu_kernel_checks import Checks
from benchmarks.gpu_kernel_sanitized import case_ids, run_embedding_cases
from tests import test_cuda_emulation_embedding_bag as emulation_tests
from tests._cuda_emulation import HostMemory, emulated_kernels

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "benchmarks" / "gpu_kernels_run.sh"


def _env(**extra):
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _parameters(test, name):
    """The values of parameter `name` of an emulation test, as pytest collects them."""
    for mark in test.pytestmark:
        if mark.name != "parametrize":
            continue
        names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else list(mark.args[0])
        if name in names:
            at = names.index(name)
            return [(p.values if hasattr(p, "values") else (p,) * len(names))[at] for p in mark.args[1]]
    raise KeyError(name)


def _emulation_test_case_ids():
    forward = emulation_tests.test_forward_kernels_match_the_numpy_sums
    cases = zip(_parameters(forward, "case"), _parameters(forward, "mode"))
    return (
        [f"forward: {case}; rows_sorted={mode}" for case, mode in cases]
        + [f"entry check: {case}" for case in _parameters(
            emulation_tests.test_check_entries_and_fill_first_bad_report_the_first_bad_positions, "case")]
        + [f"gradient rows: {case}" for case in _parameters(
            emulation_tests.test_gradient_kernels_sum_each_distinct_ids_rows, "case")]
        + [f"gains gradient: {case}" for case in _parameters(
            emulation_tests.test_gains_gradient_kernel_reduces_each_entry_over_a_warp, "case")]
        + [f"hot id chunks: {case}" for case in _parameters(
            emulation_tests.test_a_very_hot_id_is_summed_in_chunks_in_a_fixed_order, "case")]
    )


def test_the_gpu_run_lists_exactly_the_emulation_tests_cases():
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_kernel_sanitized", "--list-cases"], cwd=REPO_ROOT,
                          env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    listed = done.stdout.splitlines()
    assert listed == case_ids() == _emulation_test_case_ids()
    assert len(listed) == len(set(listed)) > 60 and "hot id chunks: very hot id" in listed


def test_the_gpu_runs_checks_pass_on_the_emulated_kernels():
    checks = Checks()
    run_embedding_cases(emulated_kernels(), HostMemory(), checks)
    assert [row["kernel"] + ": " + row["case"] for row in checks.rows] == [
        "embedding_bag " + case for case in case_ids()]
    assert checks.failed == 0, [row for row in checks.rows if not row["ok"]]


class _SecondRunDiffers:
    """The emulated kernels, except that every second forward and gradient leaves its first value one ulp off."""

    def __init__(self, kernels):
        self._kernels, self._calls = kernels, 0

    def __getattr__(self, name):
        return getattr(self._kernels, name)

    def _nudge(self, buffer):
        self._calls += 1
        if self._calls % 2 == 0:
            value = buffer.handle[:4].view(np.float32)
            value[0] = np.nextafter(value[0], np.float32(np.inf))

    def bag_forward(self, *args, **kwargs):
        self._kernels.bag_forward(*args, **kwargs)
        self._nudge(args[10])

    def grad_rows(self, *args):
        self._kernels.grad_rows(*args)
        self._nudge(args[8])


def test_the_gpu_runs_checks_fail_on_results_that_do_not_repeat():
    checks = Checks()
    run_embedding_cases(_SecondRunDiffers(emulated_kernels()), HostMemory(), checks)
    failed = {row["kernel"] + ": " + row["case"]: row["error"] for row in checks.rows if not row["ok"]}
    assert "embedding_bag hot id chunks: very hot id" in failed
    assert "embedding_bag forward: dim 3; rows_sorted=1" in failed
    assert any("other bits the second time" in error for error in failed.values())


@pytest.mark.slow
def test_the_gpu_runs_kernels_build_with_nvcc_without_a_gpu(tmp_path):
    if find_nvcc() is None:
        pytest.skip("nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda): the CUDA sources cannot be compiled here")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_kernel_sanitized", "--build-only", "--arch", "sm_80", "--build-dir",
         str(tmp_path)], cwd=REPO_ROOT, env=_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True,
        timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(tmp_path.glob("libsparseflow_cuda-sm_80-*.so"))


def test_the_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def _fake(path, body):
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.parametrize(("fails", "status"), [("", 0), ("memcheck", 86), ("checks", 1)])
def test_the_script_sanitizes_every_part_before_timing_and_fails_on_an_error(tmp_path, fails, status):
    # A stand-in python answers every harness call (a GPU "visible") and logs it; a stand-in compute-sanitizer logs
    # its tool and runs the command, exiting 86 (its --error-exitcode) where the case asks.
    log = tmp_path / "calls.log"
    python = _fake(tmp_path / "python", f'echo "python $*" >> {log}\n'
                   + ('case "$*" in "-m benchmarks.gpu_kernels "*) exit 1;; esac\n' if fails == "checks" else "")
                   + "exit 0\n")
    sanitizer = _fake(tmp_path / "compute-sanitizer", f'echo "sanitizer $2" >> {log}\n'
                      + 'tool=$2; shift 6; "$@" || exit $?\n'
                      + ('[ "$tool" != memcheck ] || exit 86\n' if fails == "memcheck" else ""))
    done = subprocess.run(["bash", str(SCRIPT), "--quick"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          env=_env(OUT=str(tmp_path / "out"), PYTHON=python, COMPUTE_SANITIZER=sanitizer,
                                   SANITIZER_FLAGS="", NVCC="/bin/true", PATH=f"{tmp_path}:{os.environ['PATH']}"),
                          check=False)
    assert done.returncode == status, done.stdout[-2000:] + done.stderr[-2000:]
    build = str(tmp_path / "out" / "build")
    calls = [line for line in log.read_text().splitlines() if not line.startswith("python -c")]
    harness = "python -m benchmarks.gpu_kernel_sanitized"
    assert calls == [
        f"{harness} --probe",
        f"{harness} --build-only --build-dir {build}",
        "sanitizer memcheck", f"{harness} --part all --build-dir {build}",
        "sanitizer racecheck", f"{harness} --part block-sparse --build-dir {build}",
        "sanitizer synccheck", f"{harness} --part all --build-dir {build}",
        f"python -m benchmarks.gpu_kernels --output-dir {tmp_path / 'out'} --build-dir {build} --quick",
    ]
