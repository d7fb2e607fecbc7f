"""Every command-line program answers `--help` and a bad argument without importing Beam or TensorFlow.

Each case runs a program as users do (`python -m ...`, or a script as a file) in a fresh process and reports
which of the heavy packages were imported by the time it exited; the exit status is the program's own (0 for
help, 2 for a usage, flag or config error). Beam and TensorFlow come only after the arguments and config are checked.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
HEAVY = ("apache_beam", "tensorflow")

# Runs each case (a module and its argv) as `python -m` would, in a process forked from one that has imported only
# the light shared modules, and prints each case's exit status and the heavy packages it imported.
_PROBE = """
import json, os, runpy, sys
import numpy, pyarrow, yaml  # noqa: F401  (shared by every case; forking after them saves their import)
import pipelines.cli, pipelines.config  # noqa: F401
HEAVY = ("apache_beam", "tensorflow")
assert not [m for m in HEAVY if m in sys.modules]
results = []
for module, argv in json.loads(sys.argv[1]):
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        sys.argv = [module, *argv]
        code = 0
        try:
            if module.endswith(".py"):  # a script run as a file, as the Makefile runs it
                runpy.run_path(module, run_name="__main__")
            else:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            code = "raised"
        os.write(write, json.dumps({"code": code, "heavy": [m for m in HEAVY if m in sys.modules]}).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        results.append(json.loads(pipe.read() or '{"code": "died", "heavy": []}'))
    os.waitpid(child, 0)
print(json.dumps(results))
"""

# program -> argument vectors that must fail with exit status 2 before any heavy import.
BAD_ARGUMENTS = {
    "pipelines.ingest": [["--output", "out"], ["--input", "x.tsv", "--output", "out", "--format", "critio"],
                         ["--input", "x.tsv", "--output", "out", "--progress_seconds", "-1"],
                         ["--input", "x.tsv", "--output", "out", "--config", "{tmp}/missing.yaml"],
                         ["--input", "x.tsv", "--output", "out", "--config", "{tmp}/bad.yaml"],
                         ["--input", "x.tsv", "--output", "out", "--format", "csv"]],
    "pipelines.train": [["--bogus"], ["--data", "d"], ["--data", "{tmp}/missing", "--model_dir", "{tmp}/m"]],
    "pipelines.convert": [["--bogus"], ["src"], ["src", "dst", "--format", "csv"],
                          ["{tmp}/missing", "{tmp}/dst", "--format", "arrow"]],
    "pipelines.verify": [["--bogus"], ["{tmp}/missing"]],
    "pipelines.validate": [["--bogus"], ["{tmp}/missing"]],
    "pipelines.demo": [["--bogus"], ["--rows", "many"]],
    "benchmarks": [["--bogus"], ["--only", "no_such_benchmark"]],
    "benchmarks.beam_ingest": [["--bogus"]],
    "benchmarks.io_formats": [["--bogus"]],
    "benchmarks.ingest_memory": [["--bogus"]],
    "benchmarks.reader_memory": [["--bogus"]],
    "benchmarks.long_line_memory": [["--bogus"]],
    "benchmarks.tfdata_input": [["--bogus"]],
    "benchmarks.vocabulary": [["--bogus"]],
    "benchmarks.reliability": [["--bogus"]],
    "benchmarks.gpu_kernels": [["--bogus"]],
    "benchmarks.convert_to_coo": [["--bogus"]],
    "benchmarks.gpu": [["--reps", "many"]],
    "benchmarks.embedding_bag_and_block_sparse": [["--bogus"]],
    "benchmarks.embedding_bag_targets": [["--bogus"]],
    "benchmarks.demo_training_throughput": [["--bogus"]],
    "benchmarks.service_sharding": [["--files", "many"]],
    "benchmarks.feature_transforms": [["--bogus"]],
    "benchmarks.validation_cost": [["--bogus"]],
    "ops.build": [["--bogus"]],
    "ops/_native_build.py": [["--bogus"]],
    "ops/cuda/build_tf_ops.py": [["--bogus"]],
    "notebooks/regenerate.py": [["--bogus"], ["no_such.ipynb"]],
}


def _probe(cases: list[tuple[str, list[str]]]) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(cases)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "bad.yaml").write_text("input:\n  format: bogus\n")
    cases = [(module, ["--help"], 0) for module in BAD_ARGUMENTS]
    cases += [(module, [a.format(tmp=tmp) for a in argv], 2) for module, argvs in BAD_ARGUMENTS.items()
              for argv in argvs]
    results = _probe([(module, argv) for module, argv, _ in cases])
    return [(module, argv, code, result) for (module, argv, code), result in zip(cases, results)]


def test_help_and_bad_arguments_import_neither_beam_nor_tensorflow(probes):
    heavy = [(module, argv, result["heavy"]) for module, argv, _, result in probes if result["heavy"]]
    assert not heavy, heavy


def test_help_exits_0_and_a_bad_argument_exits_2(probes):
    wrong = [(module, argv, result["code"]) for module, argv, code, result in probes if result["code"] != code]
    assert not wrong, wrong


def test_the_probe_sees_a_heavy_import(tmp_path):
    """The control: an ingest given a flag only Beam can judge does import Beam, and the probe says so."""
    (result,) = _probe([("pipelines.ingest", ["--input", "x.tsv", "--output", str(tmp_path / "o"), "--frobnicate"])])
    assert result == {"code": 2, "heavy": ["apache_beam"]}
