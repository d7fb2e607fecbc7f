"""The programs are quiet by default: progress and results, no TensorFlow, absl, CUDA or Beam log lines on
stderr; -v brings those back. Each phase that takes a while says what it is doing."""

import os
import re
import subprocess
import sys

import pytest

from pipelines.synthetic import write_synthetic_criteo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "pipelines", "configs", "demo.yaml")

# Lines that come from the libraries, not from us: absl/glog C++ lines (I0000 12:34:56...), absl's pre-init
# notice, TensorFlow's and absl's Python loggers, CUDA/oneDNN notices, Beam's loggers.
LIBRARY_LINE = re.compile(
    r"^[IWEF]\d{4} \d\d:\d\d:\d\d|All log messages before absl|\babsl\b|\btensorflow\b|cuInit|CUDA|oneDNN"
    r"|cpu_feature_guard|apache_beam",
    re.M,
)


def _run(*args, cwd, with_stdout=False):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "SPARSEFLOW_DEBUG")}
    env["PYTHONPATH"] = REPO
    done = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    if with_stdout:
        return done.stdout, done.stderr.replace("\r", "\n")
    return done.stderr.replace("\r", "\n")


def _library_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if LIBRARY_LINE.search(line)]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet")
    write_synthetic_criteo(str(root / "logs" / "train.tsv"), 400, 3)
    write_synthetic_criteo(str(root / "logs" / "heldout.tsv"), 200, 4)
    return root


@pytest.fixture(scope="module")
def ingested(work):
    quiet = _run("pipelines.ingest", "--input", "logs/train.tsv", "--config", CONFIG, "--output", "out/train",
                 cwd=work)
    loud = _run("pipelines.ingest", "--input", "logs/heldout.tsv", "--config", CONFIG, "--output", "out/heldout",
                "-v", cwd=work)
    return quiet, loud


def test_ingest_is_quiet_by_default_and_verbose_with_v(ingested):
    quiet, loud = ingested
    assert _library_lines(quiet) == [], quiet
    assert "ingesting logs/train.tsv (1 file) into out/train" in quiet
    assert any("apache_beam" in line for line in _library_lines(loud)), loud[-2000:]


@pytest.mark.slow
def test_train_is_quiet_by_default_and_says_what_each_phase_does(work, ingested):
    err = _run("pipelines.train", "--data", "out/train", "--eval_data", "out/heldout", "--model_dir", "out/model",
               "--steps", "3", "--batch_size", "64", "--hidden_units", "32", cwd=work)
    assert _library_lines(err) == [], err
    phases = ["training on out/train", "3/3", "evaluating on every row of out/heldout", "exporting the SavedModel"]
    at = [err.find(p) for p in phases]
    assert -1 not in at and at == sorted(at), err


@pytest.mark.slow
def test_train_with_v_shows_the_tensorflow_lines(work, ingested):
    err = _run("pipelines.train", "--data", "out/train", "--model_dir", "out/model_v", "--steps", "1",
               "--batch_size", "64", "--hidden_units", "32", "--export", "none", "-v", cwd=work)
    # TensorFlow's C++ libraries log while loading on every machine (CPU features, oneDNN, CUDA lookup).
    assert _library_lines(err), err[-2000:]


@pytest.mark.slow
def test_the_demo_is_quiet_by_default_says_the_task_once_and_trains_only_in_its_rounds(work):
    out, err = _run("pipelines.demo", "--output", "demo", "--rows", "800", "--eval_rows", "300", "--steps", "16",
                    "--batch_size", "64", cwd=work, with_stdout=True)
    assert _library_lines(err) == [], err
    assert "evaluating on" in err and "exporting the SavedModel" in err
    rounds = re.findall(r"step +\d+: training loss", out)  # early stopping: one line per round
    assert rounds and "sparseflow demo done" in out
    assert len(re.findall(r"\btask ctr: ", err)) == 1, err[-3000:]
    # The last run restores the best round and exports it: it trains nothing and says nothing of training.
    assert err.count("training on ") == len(rounds), err[-3000:]
    assert err.rindex("training on ") < err.index("exporting the SavedModel")
    assert "resumed from" not in err and "resumes its input" not in err, err[-3000:]
