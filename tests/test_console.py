"""What the trainer and the demo print: the task once, training only where they train, resume details with -v."""

import re

import pytest

from pipelines import train
from pipelines.ingest import run_ingest
from pipelines.synthetic import write_synthetic_criteo
from tests.test_train import DEMO_CONFIG

pytestmark = pytest.mark.slow

SMALL = ["--batch_size", "64", "--embedding_dim", "4", "--hidden_units", "16", "--block_size", "16", "--quiet",
         "--export", "none"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("console")
    log = write_synthetic_criteo(str(root / "train.tsv.gz"), 800, 1000)
    run_ingest(["--input", log, "--config", DEMO_CONFIG, "--output", str(root / "train"), "--no_report",
                "--progress_seconds", "0"])
    return root / "train"


def test_the_trainer_says_the_task_once_and_where_it_resumed_only_with_v(data, tmp_path, capsys):
    argv = ["--data", str(data), "--model_dir", str(tmp_path / "m"), *SMALL]
    runs = {}
    for name, extra in (("fresh", ["--steps", "2"]), ("resumed", ["--steps", "4", "--resume"]),
                        ("verbose", ["--steps", "6", "--resume", "-v"])):
        train.main([*argv, *extra])
        runs[name] = capsys.readouterr().err
    for name, err in runs.items():
        assert len(re.findall(r"\btask ctr: ", err)) == 1, (name, err[-3000:])
        assert err.count("training on ") == 1, (name, err[-3000:])
    assert "resumed from" not in runs["resumed"] and "resumes its input" not in runs["resumed"], runs["resumed"]
    assert re.search(r"resumed from \S+ckpt-\d+ at step 4", runs["verbose"]), runs["verbose"][-3000:]
    assert "worker 0 resumes its input at InputState(" in runs["verbose"]


# What the demo prints (the task once, training lines only in its rounds) is checked on the demo run of
# tests/test_quiet_logs.py, which also checks that it is quiet: one demo run for both.
