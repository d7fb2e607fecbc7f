"""The demo: synthetic logs -> ingest -> train -> held-out AUC, and the same flow on the user's own logs."""

import json
import math
import os
import re

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


def _labels(path):
    with open(path) as f:
        return [int(line.split("\t")[0]) for line in f if line.strip()]


def test_a_small_log_trains_with_the_batch_cut_to_its_rows_and_beside_the_base_rate(tmp_path, capsys):
    train_log = write_synthetic_criteo(str(tmp_path / "logs" / "train.tsv"), 300, 4000)
    held_log = write_synthetic_criteo(str(tmp_path / "logs" / "held.tsv"), 200, 4001)
    out = str(tmp_path / "out")
    demo.main(["--input", train_log, "--eval_input", held_log, "--output", out, "--steps", "10"])
    printed = capsys.readouterr().out
    assert printed.count("--batch_size 512 is more than the 300 training rows: using batches of 300") == 1
    assert "held-out loss" in printed and "nan" not in printed.lower()
    # The baseline, from the logs themselves: always predict the training click rate on the held-out rows.
    train_labels, held_labels = _labels(train_log), _labels(held_log)
    rate = sum(train_labels) / len(train_labels)
    loss = -sum(math.log(rate) if y else math.log(1 - rate) for y in held_labels) / len(held_labels)
    (line,) = [line for line in printed.splitlines() if "always predicted" in line]
    assert f"base rate {rate:.3f}" in line and f"{loss:.4f} / 0.500" in line
    result = json.load(open(os.path.join(out, "model", "train_result.json")))["runs"][-1]
    assert result["batch_size"] == 300 and result["baseline_loss"] == pytest.approx(loss)


def test_rerunning_the_demo_starts_a_fresh_model_and_resume_says_when_nothing_is_left(tmp_path, capsys):
    out = str(tmp_path / "out")
    first = write_synthetic_criteo(str(tmp_path / "a.tsv"), 400, 11)
    other = write_synthetic_criteo(str(tmp_path / "b.tsv"), 350, 12)
    common = ["--output", out, "--steps", "5", "--batch_size", "64", "--no-early_stopping"]
    demo.main(["--input", first, *common])
    # Other input into the same output: a fresh model, not a resume of the first one's reading plan.
    result = demo.run_demo(["--input", other, *common])
    assert "starting a fresh model" in capsys.readouterr().out
    assert result["steps"] == 5 and not math.isnan(result["loss"]) and result["eval_rows"] == 350
    # Resuming a model that has trained every step asked for: one line saying why, exit status 2.
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--input", other, *common, "--resume"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "trained 5 steps already, and --steps is 5: nothing left to train" in err
    assert err.strip().splitlines()[-1].startswith("pipelines.demo: error: --resume: the model in")


def test_early_stopping_keeps_the_round_with_the_lowest_held_out_loss(tmp_path, capsys):
    train_log = write_synthetic_criteo(str(tmp_path / "train.tsv"), 200, 5000)
    held_log = write_synthetic_criteo(str(tmp_path / "held.tsv"), 200, 5001)
    out = tmp_path / "out"
    result = demo.run_demo(["--input", train_log, "--eval_input", held_log, "--output", str(out), "--steps", "80"])
    printed = capsys.readouterr().out
    rounds = {int(m.group(1)): float(m.group(2))
              for m in re.finditer(r"step +(\d+): training loss [\d.]+, held-out loss ([\d.]+)", printed)}
    assert len(rounds) >= 2
    best = min(rounds, key=rounds.get)
    assert result["steps"] == best and result["eval_loss"] == pytest.approx(rounds[best], abs=1e-4)
    if result["stopped_at"] is not None:  # 200 rows memorised quickly: the rise is what stopped it
        assert rounds[result["stopped_at"]] >= rounds[best] and result["stopped_at"] > best
    checkpoint = open(out / "model" / "checkpoints" / "checkpoint").read()
    assert f"ckpt-{best}\"" in checkpoint
    assert (out / "model" / "export" / "saved_model.pb").exists() and not (out / "model" / "best_checkpoints").exists()
