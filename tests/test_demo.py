"""The demo: synthetic logs -> ingest -> train -> held-out AUC, and the same flow on the user's own logs."""

import os

import pytest

from pipelines import demo
from pipelines.synthetic import synthetic_criteo_lines, write_synthetic_criteo

SMALL = ["--rows", "3000", "--eval_rows", "1000", "--steps", "60", "--batch_size", "128"]


def test_demo_with_no_data_ingests_trains_and_beats_chance_on_held_out_rows(tmp_path, capsys):
    out = tmp_path / "demo"
    demo.main(["--output", str(out), *SMALL])
    printed = capsys.readouterr().out
    assert "sparseflow demo done" in printed and "held-out rows" in printed
    for part in ("train/schema.json", "train/stats.json", "train/report.html", "heldout/schema.json",
                 "model/checkpoints/checkpoint", "model/export/saved_model.pb", "raw/train.tsv.gz"):
        assert (out / part).exists(), part
    auc_line = next(line for line in printed.splitlines() if "AUC on held-out rows" in line)
    auc = float(auc_line.split("/")[-1])
    assert auc > 0.6, printed


def test_demo_runs_on_the_users_logs_and_says_where_its_auc_comes_from(tmp_path):
    logs = write_synthetic_criteo(str(tmp_path / "mine" / "day.tsv"), 1500, 7)
    result = demo.run_demo(["--input", logs, "--output", str(tmp_path / "out"), "--steps", "5",
                            "--batch_size", "128"])
    assert result["steps"] == 5 and result["eval_rows"] == 1500
    assert result["evaluated_on"].startswith("training rows")
    assert not os.path.exists(tmp_path / "out" / "raw")  # nothing synthetic was generated


@pytest.mark.parametrize("args, message", [
    (["--eval_input", "x.tsv"], "--eval_input needs --input"),
    (["--steps", "0"], "must be positive"),
    (["--format", "xml"], "invalid choice"),
])
def test_bad_demo_arguments_exit_with_the_problem(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.run_demo(args)
    assert exit_info.value.code != 0
    assert message in capsys.readouterr().err


def test_synthetic_logs_are_reproducible_for_a_seed_and_differ_across_seeds():
    assert synthetic_criteo_lines(50, seed=3) == synthetic_criteo_lines(50, seed=3)
    assert synthetic_criteo_lines(50, seed=3) != synthetic_criteo_lines(50, seed=4)
    fields = [line.split("\t") for line in synthetic_criteo_lines(2000, seed=3)]
    assert all(len(f) <= 40 for f in fields)
    labels = [int(f[0]) for f in fields]
    assert 0.05 < sum(labels) / len(labels) < 0.95
    # Zipf ids: the most common C1 value covers far more rows than a uniform draw would.
    c1 = [f[14] for f in fields if len(f) > 14 and f[14]]
    assert max(c1.count(v) for v in set(c1)) > 20 * len(c1) / len(set(c1))


def test_demo_runs_on_a_users_rating_history_with_its_config(tmp_path, capsys):
    from pipelines.synthetic import write_synthetic_events

    events = write_synthetic_events(str(tmp_path / "events.jsonl"), 2000, 3000)
    config = os.path.join(os.path.dirname(demo.__file__), "configs", "user_history.yaml")
    demo.main(["--input", events, "--format", "jsonl", "--config", config, "--output", str(tmp_path / "out"),
               "--steps", "5", "--batch_size", "64"])
    printed = capsys.readouterr().out
    assert "rmse on training rows" in printed and "sparseflow demo done" in printed
