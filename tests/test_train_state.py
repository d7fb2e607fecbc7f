"""The trainer's state is explicit: a checkpointed --model_dir is continued or started over only when asked,
a run that trains nothing records nothing, every run keeps its own entry, and columns that give the label
away are named (and can be excluded)."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import yaml

from pipelines import train as train_cli
from pipelines.ingest import run_ingest
from pipelines.synthetic import write_synthetic_criteo
from pipelines.train import train

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[1]
DEMO_CONFIG = str(REPO / "pipelines" / "configs" / "demo.yaml")
SMALL = ["--batch_size", "64", "--embedding_dim", "4", "--hidden_units", "16", "--block_size", "16", "--quiet"]


@pytest.fixture(scope="module")
def clicks(tmp_path_factory):
    root = tmp_path_factory.mktemp("clicks")
    log = write_synthetic_criteo(str(root / "train.tsv"), 400, 1000)
    run_ingest(["--input", log, "--config", DEMO_CONFIG, "--output", str(root / "train"), "--no_report"])
    return root


def _exit_line(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        train_cli.main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return exit_info.value.code, err.strip().splitlines()[-1]


def _runs(model_dir):
    return json.loads((model_dir / "train_result.json").read_text())["runs"]


def _checkpoint_step(model_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir / "checkpoints")))
    return int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))


def test_a_second_run_into_a_checkpointed_model_dir_is_refused_and_the_first_result_kept(clicks, tmp_path, capsys):
    model_dir = tmp_path / "m"
    argv = ["--data", str(clicks / "train"), "--model_dir", str(model_dir), "--steps", "3", "--export", "none", *SMALL]
    train(argv)
    before = (model_dir / "train_result.json").read_bytes()
    code, line = _exit_line(capsys, [*argv[:-len(SMALL)], "--steps", "5", *SMALL])
    assert code == 2
    assert line.startswith(f"pipelines.train: error: --model_dir {model_dir} holds a checkpoint at step 3")
    assert "--resume" in line and "--overwrite" in line
    assert (model_dir / "train_result.json").read_bytes() == before and _checkpoint_step(model_dir) == 3


def test_a_resumed_run_with_nothing_left_to_train_exits_2_and_writes_no_result(clicks, tmp_path, capsys):
    model_dir = tmp_path / "m"
    argv = ["--data", str(clicks / "train"), "--model_dir", str(model_dir), "--steps", "3", "--export", "none", *SMALL]
    train(argv)
    before = (model_dir / "train_result.json").read_bytes()
    code, line = _exit_line(capsys, [*argv, "--resume"])
    assert code == 2 and "at step 3 and --steps is 3: nothing to train" in line
    assert (model_dir / "train_result.json").read_bytes() == before
    assert "nan" not in before.decode().lower()


def test_resume_and_overwrite_each_add_one_entry_and_do_what_they_say(clicks, tmp_path):
    model_dir = tmp_path / "m"
    common = ["--data", str(clicks / "train"), "--model_dir", str(model_dir), "--export", "none", *SMALL]
    train([*common, "--steps", "3"])
    train([*common, "--steps", "7", "--resume"])
    runs = _runs(model_dir)
    assert [(r["steps"], r["steps_this_run"], r["started"]) for r in runs] == [(3, 3, "fresh"), (7, 4, "resumed")]
    assert _checkpoint_step(model_dir) == 7
    train([*common, "--steps", "2", "--overwrite"])
    runs = _runs(model_dir)
    assert [(r["steps"], r["started"]) for r in runs] == [(3, "fresh"), (7, "resumed"), (2, "overwrote")]
    assert _checkpoint_step(model_dir) == 2
    assert all(np.isfinite(r["loss"]) for r in runs)


def test_resume_and_overwrite_together_are_a_usage_error(clicks, tmp_path, capsys):
    code, line = _exit_line(capsys, ["--data", str(clicks / "train"), "--model_dir", str(tmp_path / "m"),
                                     "--resume", "--overwrite"])
    assert code == 2 and "--resume" in line and "--overwrite" in line


def test_a_train_result_of_the_older_layout_is_kept_as_the_first_run(clicks, tmp_path):
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "train_result.json").write_text(json.dumps({"task": "ctr", "steps": 9, "loss": 0.5}))
    train(["--data", str(clicks / "train"), "--model_dir", str(model_dir), "--steps", "2", "--export", "none", *SMALL])
    runs = _runs(model_dir)
    assert runs[0] == {"task": "ctr", "steps": 9, "loss": 0.5} and runs[1]["steps"] == 2 and len(runs) == 2


def test_exclude_drops_columns_from_the_model_and_the_serving_signature(clicks, tmp_path):
    model_dir = tmp_path / "m"
    result = train(["--data", str(clicks / "train"), "--model_dir", str(model_dir), "--steps", "2",
                    "--exclude", "C1,I2", *SMALL])
    assert result["excluded"] == ["C1", "I2"]
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir / "checkpoints")))
    variables = reader.get_variable_to_shape_map()
    assert any("embedding_C2" in k for k in variables) and not any("embedding_C1/" in k for k in variables)
    served = tf.saved_model.load(result["export"]).signatures["serving_default"]
    inputs = set(served.structured_input_signature[1])
    assert "C2" in inputs and "I1" in inputs and not {"C1", "I2"} & inputs


def test_exclude_naming_no_column_or_the_label_is_refused(clicks, tmp_path, capsys):
    common = ["--data", str(clicks / "train"), "--model_dir", str(tmp_path / "m"), *SMALL]
    code, line = _exit_line(capsys, [*common, "--exclude", "C1,nope"])
    assert code == 2 and "'nope'" in line
    code, line = _exit_line(capsys, [*common, "--exclude", "label"])
    assert code == 2 and "--exclude label" in line


LEAKY_CONFIG = {
    "input": {"format": "csv", "schema": [
        {"name": "liked", "kind": "label", "dtype": "int64"},
        {"name": "user", "kind": "sparse", "dtype": "string"},
        {"name": "rating", "kind": "dense", "dtype": "int64"},
        {"name": "verdict", "kind": "sparse", "dtype": "string"},
        {"name": "noise", "kind": "dense", "dtype": "float32"},
    ]},
    "features": {"user": {"hash_buckets": 100}, "verdict": {"hash_buckets": 100}},
    "output": {"format": "parquet", "num_shards": 1, "shuffle": False},
    "stats": {"batch_sizes": [64]},
}


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    """liked = rating >= 4, beside the rating itself and a text copy of the verdict."""
    root = tmp_path_factory.mktemp("leaky")
    rng = np.random.default_rng(7)
    lines = ["liked,user,rating,verdict,noise"]
    for _ in range(400):
        rating = int(rng.integers(1, 6))
        liked = int(rating >= 4)
        lines.append(f"{liked},u{rng.integers(50)},{rating},{'yes' if liked else 'no'},{rng.normal():.3f}")
    (root / "log.csv").write_text("\n".join(lines) + "\n")
    (root / "config.yaml").write_text(yaml.safe_dump(LEAKY_CONFIG))
    run_ingest(["--input", str(root / "log.csv"), "--config", str(root / "config.yaml"), "--output",
                str(root / "train"), "--no_report"])
    return root


def test_features_that_give_the_label_away_are_warned_about_by_name_and_recorded(leaky, tmp_path, caplog):
    caplog.set_level("WARNING", logger="sparseflow")
    model_dir = tmp_path / "m"
    result = train(["--data", str(leaky / "train"), "--model_dir", str(model_dir), "--steps", "2",
                    "--export", "none", *SMALL])
    named = {leak["feature"] for leak in result["label_leaks"]}
    assert named == {"rating", "verdict"}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and all("gives the label 'liked' away" in w for w in warnings)
    assert any("'rating'" in w and "--exclude rating" in w for w in warnings)
    assert {leak["feature"] for leak in _runs(model_dir)[-1]["label_leaks"]} == {"rating", "verdict"}

    caplog.clear()
    result = train(["--data", str(leaky / "train"), "--model_dir", str(tmp_path / "m2"), "--steps", "2",
                    "--export", "none", "--exclude", "rating,verdict", *SMALL])
    assert "label_leaks" not in result
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_the_leak_check_auc_matches_a_pairwise_count():
    from pipelines.leakage import auc

    rng = np.random.default_rng(3)
    scores, labels = rng.integers(0, 5, 60).astype(float), rng.integers(0, 2, 60)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = [(1.0 if p > n else 0.5 if p == n else 0.0) for p in pos for n in neg]
    assert auc(scores, labels) == pytest.approx(sum(pairs) / len(pairs))
