"""Every command and code block of the README runs, so the README cannot drift from the code."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from pipelines.ingest import run_ingest
from pipelines.synthetic import write_synthetic_criteo

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)


def _commands(language: str) -> list[str]:
    commands = []
    for lang, body in BLOCKS:
        if lang == language:
            joined = body.replace("\\\n", " ")
            commands += [line.split("#")[0].strip() for line in joined.splitlines() if line.split("#")[0].strip()]
    return commands


def _env():
    return dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")


def test_the_readme_shows_exactly_the_two_commands_a_fresh_clone_needs():
    make = [c for c in _commands("bash") if c.startswith("make ")]
    assert make == ["make demo", "make test"]
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci


def test_make_test_is_the_suite_and_make_demo_runs_the_demo():
    # `make test` cannot run inside the suite it starts; its recipe is checked instead.
    plan = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0 and "-m pytest" in plan.stdout and "ruff check" in plan.stdout


@pytest.mark.slow
def test_make_demo_as_the_readme_gives_it(tmp_path):
    small = f"--output {tmp_path}/demo --rows 2000 --eval_rows 500 --steps 10 --batch_size 128"
    done = subprocess.run(["make", "demo", f"ARGS={small}"], cwd=REPO, capture_output=True, text=True,
                          env=_env(), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "sparseflow demo done" in done.stdout


def test_the_dataflow_command_builds_a_graph_that_serialises():
    (command,) = [c for c in _commands("bash") if "DataflowRunner" in c]
    assert command.startswith("python -m pipelines.ingest ")
    args = command.split()[3:]
    args = [a.strip("'") for a in args]
    done = subprocess.run([sys.executable, "-m", "pipelines.ingest", *args, "--validate_only"], cwd=REPO,
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pipeline valid for DataflowRunner" in done.stdout


def test_the_python_example_runs_on_freshly_ingested_shards(tmp_path):
    log = write_synthetic_criteo(str(tmp_path / "logs" / "day.tsv"), 1200, 3)
    run_ingest(["--input", log, "--config", str(REPO / "pipelines" / "configs" / "demo.yaml"),
                "--output", str(tmp_path / "out" / "train"), "--no_report"])
    (code,) = [body for lang, body in BLOCKS if lang == "python" and "def test_" not in body]
    assert len(code.strip().splitlines()) <= 22
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].endswith("(256, 16) (256, 64) True")


# Run beside the README's pytest examples: Prism and the network are refused and every attempt is
# recorded with the test that made it.
_GUARD_CONFTEST = """
import os, socket
from apache_beam.runners.portability import prism_runner

def _record(what):
    with open(os.environ["ATTEMPTS_FILE"], "a") as f:
        f.write(os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0] + " " + what + "\\n")

def _refuse_prism(self, *args, **kwargs):
    _record("prism")
    raise RuntimeError("Prism refused in this test")

def _refuse_download(url, *args, **kwargs):
    _record("download " + str(url))
    raise RuntimeError("no network in this test")

prism_runner.PrismRunner.run_pipeline = _refuse_prism
prism_runner.PrismJobServer._download_to_local_path = staticmethod(_refuse_download)
_getaddrinfo = socket.getaddrinfo

def _local_only(host, *args, **kwargs):
    if host not in ("localhost", "127.0.0.1", "::1", None):
        _record("network " + str(host))
        raise OSError("no network in this test: " + str(host))
    return _getaddrinfo(host, *args, **kwargs)

socket.getaddrinfo = _local_only
"""

# Shows that the guard sees an attempt: Beam's plain DirectRunner tries Prism first.
_GUARD_CONTROL = """
import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline

def test_plain_direct_runner_control():
    with TestPipeline(runner="DirectRunner") as p:
        _ = p | beam.Create([1])
"""


def test_the_pytest_examples_pass_offline_on_the_direct_runner_without_prism(tmp_path):
    examples = [body for lang, body in BLOCKS if lang == "python" and "def test_" in body]
    assert examples, "the README has no pytest example"
    for i, body in enumerate(examples):
        (tmp_path / f"test_readme_example_{i}.py").write_text(body)
    (tmp_path / "conftest.py").write_text(_GUARD_CONFTEST)
    (tmp_path / "test_guard_control.py").write_text(_GUARD_CONTROL)
    attempts = tmp_path / "attempts.txt"
    attempts.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, env=dict(_env(), ATTEMPTS_FILE=str(attempts)), timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"{len(examples) + 1} passed" in done.stdout, done.stdout[-2000:]
    seen = attempts.read_text().splitlines()
    assert [line for line in seen if "test_readme_example" in line] == []
    assert any(line.startswith("test_guard_control.py") and line.endswith(" prism") for line in seen), seen


def test_the_benchmark_rows_in_the_readme_are_those_of_results_md():
    results = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8").splitlines()
    section = README[README.index("## Benchmarks"):]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    assert len(rows) > 10
    missing = [row for row in rows if row not in results]
    assert not missing, missing


@pytest.mark.slow
def test_the_held_out_commands_ingest_into_one_id_space_and_train(tmp_path):
    commands = [c for c in _commands("bash") if "out/heldout" in c or "out/train" in c]
    assert len(commands) == 3 and "--vocab_from out/train" in commands[1] and "--eval_data" in commands[2]
    write_synthetic_criteo(str(tmp_path / "logs" / "day_1.tsv.gz"), 1200, 1000)
    write_synthetic_criteo(str(tmp_path / "logs" / "day_2.tsv.gz"), 400, 1001)
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")  # the commands name the config from the repo root
    # `python` is this environment's interpreter, as in an activated virtual environment.
    env = dict(_env(), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, env=env,
                              timeout=600)
        assert done.returncode == 0, command + "\n" + done.stderr[-3000:]
    result = (tmp_path / "out" / "model" / "train_result.json").read_text()
    assert '"eval_rows": 400' in result and '"steps": 50' in result
