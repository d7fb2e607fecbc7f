"""What the trainer and the demo print: the task once, training only where they train, resume details with -v."""

import re

import pytest

from pipelines import demo, train
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


def test_the_demo_says_the_task_once_and_trains_only_in_its_training_rounds(tmp_path, capsys):
    demo.main(["--rows", "800", "--eval_rows", "300", "--steps", "16", "--batch_size", "64",
               "--output", str(tmp_path / "demo")])
    printed = capsys.readouterr()
    rounds = re.findall(r"step +\d+: training loss", printed.out)  # early stopping: one line per round
    assert rounds and "sparseflow demo done" in printed.out
    assert len(re.findall(r"\btask ctr: ", printed.err)) == 1, printed.err[-3000:]
    # The last run restores the best round and exports it: it trains nothing and says nothing of training.
    assert printed.err.count("training on ") == len(rounds), printed.err[-3000:]
    assert printed.err.rindex("training on ") < printed.err.index("exporting the SavedModel")
    assert "resumed from" not in printed.err and "resumes its input" not in printed.err, printed.err[-3000:]
