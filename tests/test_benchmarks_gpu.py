"""benchmarks.gpu on a machine without a GPU: it says it skips the GPU timings, checks on the CPU, exits 0."""

import os
import pathlib
import subprocess
import sys

import numpy as np

from benchmarks.gpu import SKIP_MESSAGE, embedding_costs, matmul_costs

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_without_a_gpu_it_skips_the_timings_after_the_cpu_reference_check():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--small", "--reps", "2"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert SKIP_MESSAGE in done.stdout
    assert done.stdout.count("CPU reference:") == 2  # embedding bag and one block-sparse density, both checked
    assert done.stdout.index("CPU reference:") < done.stdout.index(SKIP_MESSAGE)


def test_costs_follow_the_stated_formulas():
    # Embedding bag: 3 distinct rows of 4 floats gathered, 5 ids of 16 bytes, 2 output rows written.
    assert embedding_costs(batch=2, dim=4, nnz=5, distinct=3) == {"bytes": 4 * 3 * 4 + 16 * 5 + 4 * 2 * 4, "flops": 40}
    # A full layout costs what the dense product costs.
    m, k, n, s = 8, 64, 32, 16
    full = (k // s) * (n // s)
    assert matmul_costs(m, k, n, full, s) == matmul_costs(m, k, n)
    assert matmul_costs(m, k, n)["flops"] == 2 * int(np.prod([m, k, n]))
