"""Every invalid flag or config key of the command-line programs gives one clear line and a non-zero
exit, never a bare traceback; configs never build Python objects; paths are never run as shell."""

import json
import os
import subprocess
import sys

import pytest

from pipelines import demo, ingest, train
from pipelines.synthetic import synthetic_criteo_lines

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = '!!python/object/apply:os.system ["touch {marker}"]'

# Config file name -> (contents, fragment the last line must contain). "{marker}" is a file that
# exists only if a tag was executed.
CONFIGS = {
    "unknown_key.yaml": ("output:\n  num_shardz: 3\n", "'output.num_shardz': unknown key"),
    "unknown_top.yaml": ("outptu: {}\n", "'outptu': unknown key"),
    "wrong_type.yaml": ("output:\n  num_shards: four\n", "'output.num_shards': must be int"),
    "negative_shards.yaml": ("output: {num_shards: -3}\n", "'output.num_shards': must be positive"),
    "negative_rows.yaml": ("output: {row_group_size: -1}\n", "'output.row_group_size': must be positive"),
    "negative_buckets.yaml": ('features: {"C*": {hash_buckets: -5}}\n', "hash_buckets': must be positive"),
    "negative_oov.yaml": (
        'features: {"C*": {vocabulary: {num_oov_buckets: -2}}}\n', "num_oov_buckets': must be >= 0"),
    "negative_batch.yaml": (
        'input: {batch_size: -1}\nfeatures: {"C*": {hash_buckets: 9}}\n', "'input.batch_size': must be positive"),
    "zero_stats_batch.yaml": ("stats: {batch_sizes: [0]}\n", "'stats.batch_sizes[0]'"),
    "budget.yaml": ("error_budget: 2\n", "'error_budget': must be a fraction"),
    "nan_budget.yaml": ("error_budget: .nan\n", "'error_budget': must be a fraction"),
    "top_tag.yaml": (TAG + "\n", "not valid YAML: could not determine a constructor"),
    "nested_tag.yaml": ("output: " + TAG + "\n", "not valid YAML: could not determine a constructor"),
    "new_tag.yaml": ("output: !!python/object/new:os.system [x]\n", "not valid YAML"),
    "name_tag.yaml": ("output: !!python/name:os.system\n", "not valid YAML"),
    "not_a_mapping.yaml": ("- 1\n- 2\n", "must be a mapping"),
    "broken.yaml": ("output: [1, 2\n", "not valid YAML"),
    "broken.json": ('{"output": ', "not valid JSON"),
    "zero.json": ('{"output": {"num_shards": 0}}', "'output.num_shards': must be positive"),
    "binary.yml": (b"\xff\xfe\x00garbage", "is not UTF-8 text"),
}


@pytest.fixture(scope="module")
def small_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "day.tsv"
    path.write_text("\n".join(synthetic_criteo_lines(50, seed=3)) + "\n")
    return str(path)


def _last_line(capsys, main, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code not in (0, None), err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines, "the failure must be explained on stderr"
    return lines[-1]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_ingest_rejects_each_invalid_config_with_one_line_naming_the_key(name, small_log, tmp_path, capsys):
    text, fragment = CONFIGS[name]
    marker = tmp_path / "executed"
    config = tmp_path / name
    if isinstance(text, bytes):
        config.write_bytes(text)
    else:
        config.write_text(text.replace("{marker}", str(marker)))
    last = _last_line(capsys, ingest.main,
                      ["--input", small_log, "--output", str(tmp_path / "out"), "--config", str(config)])
    assert last.startswith("pipelines.ingest: error:") and fragment in last, last
    assert not marker.exists(), "a YAML tag was executed"
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--frobnicate"], "unrecognized argument: --frobnicate"),
        (["stray"], "unrecognized argument: stray"),
        (["--progress_seconds", "abc"], "invalid float value: 'abc'"),
        (["--progress_seconds", "-1"], "--progress_seconds must be >= 0"),
        (["--format", "xml"], "invalid choice: 'xml'"),
        (["--num_workers", "many"], "invalid int value: 'many'"),
        (["--config", "{tmp}"], "is not a regular file"),
        (["--config", "{tmp}/missing.yaml"], "does not exist"),
    ],
)
def test_ingest_rejects_invalid_flags_with_one_clear_line(flags, fragment, small_log, tmp_path, capsys):
    flags = [f.format(tmp=tmp_path) for f in flags]
    last = _last_line(capsys, ingest.main, ["--input", small_log, "--output", str(tmp_path / "out"), *flags])
    assert fragment in last, last


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--frobnicate"], "unrecognized argument: --frobnicate"),
        (["--batch_size", "abc"], "argument --batch_size: invalid int value: 'abc'"),
        (["--batch_size", "-1"], "--batch_size must be positive"),
        (["--steps", "0"], "--steps must be positive"),
        (["--epochs", "-2"], "--epochs must be positive"),
        (["--embedding_dim", "0"], "--embedding_dim must be positive"),
        (["--checkpoint_every", "0"], "--checkpoint_every must be positive"),
        (["--learning_rate", "-1"], "--learning_rate must be positive"),
        (["--learning_rate", "nan"], "--learning_rate must be positive"),
        (["--density", "2"], "--density must be in (0, 1]"),
        (["--density", "0"], "--density must be in (0, 1]"),
        (["--block_size", "12"], "argument --block_size: invalid choice: 12"),
        (["--hidden_units", "a,b"], "--hidden_units must be comma-separated integers"),
        (["--hidden_units", "-32"], "must be positive multiples of --block_size"),
        (["--hidden_units", "48"], "must be positive multiples of --block_size 32"),
        (["--strategy", "mirrored"], "invalid choice: 'mirrored'"),
    ],
)
def test_train_rejects_invalid_flags_before_touching_data(flags, fragment, tmp_path, capsys):
    # --data points nowhere: each flag must be rejected before the data is looked at.
    argv = ["--data", str(tmp_path / "nowhere"), "--model_dir", str(tmp_path / "model"), *flags]
    last = _last_line(capsys, train.main, argv)
    assert last.startswith("pipelines.train: error:") and fragment in last, last
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--frobnicate"], "unrecognized argument: --frobnicate"),
        (["--rows", "-5"], "must be positive"),
        (["--rows", "abc"], "argument --rows: invalid int value: 'abc'"),
        (["--steps", "0"], "must be positive"),
        (["--eval_input", "x.tsv"], "--eval_input needs --input"),
        (["--format", "xml"], "invalid choice: 'xml'"),
    ],
)
def test_demo_rejects_invalid_flags_with_one_clear_line(flags, fragment, tmp_path, capsys):
    last = _last_line(capsys, demo.main, ["--output", str(tmp_path / "demo"), *flags])
    assert last.startswith("pipelines.demo: error:") and fragment in last, last
    assert not (tmp_path / "demo").exists()


def test_demo_passes_its_config_through_the_safe_loader(small_log, tmp_path, capsys):
    marker = tmp_path / "executed"
    config = tmp_path / "tagged.yaml"
    config.write_text(TAG.format(marker=marker) + "\n")
    argv = ["--input", small_log, "--output", str(tmp_path / "demo"), "--config", str(config)]
    last = _last_line(capsys, demo.main, argv)
    assert "not valid YAML" in last, last
    assert not marker.exists()


# --- as users run them: python -m, in a fresh process --------------------------------------------------


def _cli(module, *args, cwd):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_shell_metacharacters_in_paths_are_taken_literally(tmp_path):
    # A log and an output directory whose names would run commands if a shell ever saw them.
    log = tmp_path / "$(touch pwned-input)`touch pwned-tick`;touch pwned-semi.tsv"
    log.write_text("\n".join(synthetic_criteo_lines(40, seed=4)) + "\n")
    out = tmp_path / "$(touch pwned-output) && touch pwned-and"
    done = _cli("pipelines.ingest", "--input", str(log), "--output", str(out), "--no_report",
                "--progress_seconds", "0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir() if "pwned" in p.name and p != log and p != out) == []
    assert json.loads((out / "stats.json").read_text())["num_rows"] == 40
    # A pattern that matches nothing is reported as itself, not expanded by a shell.
    done = _cli("pipelines.ingest", "--input", "$(touch pwned-missing)*.tsv", "--output", str(tmp_path / "o2"),
                cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "pipelines.ingest: error: --input '$(touch pwned-missing)*.tsv' matches no files")
    assert not (tmp_path / "pwned-missing").exists()


@pytest.mark.parametrize(
    "module, args, fragment",
    [
        ("pipelines.ingest", ["--input", "x", "--output", "o", "--config", "tagged.yaml"], "not valid YAML"),
        ("pipelines.train", ["--data", "d", "--model_dir", "m", "--batch_size", "-4"], "--batch_size must be positive"),
        ("pipelines.demo", ["--rows", "many"], "argument --rows: invalid int value: 'many'"),
    ],
)
def test_python_m_entry_points_exit_non_zero_with_one_clear_last_line(module, args, fragment, tmp_path):
    (tmp_path / "x").write_text("\n".join(synthetic_criteo_lines(5, seed=1)) + "\n")
    (tmp_path / "tagged.yaml").write_text(TAG.format(marker=tmp_path / "executed") + "\n")
    done = _cli(module, *args, cwd=tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert fragment in last, done.stderr[-2000:]
    assert not (tmp_path / "executed").exists()
