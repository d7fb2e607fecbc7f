"""docs/validation.md's own sections run as written: a day with bad labels is flagged, a threshold quiets it."""

import os
import pathlib
import re
import shlex
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "validation.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    section = DOC[DOC.index(f"## {title}"):]
    end = section.find("\n## ", 1)
    return section if end < 0 else section[:end]


def _blocks(section: str) -> list[tuple[str, str]]:
    return re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)


def _python(command: str, cwd, env):
    argv = shlex.split(command)
    assert argv[0] == "python", command
    return subprocess.run([sys.executable, *argv[1:]], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def test_the_dead_letter_walk_flags_the_bad_labels_and_the_config_quiets_them(tmp_path):
    from pipelines.anomalies import DEFAULT_THRESHOLDS

    section = _section("Checks of one ingest alone")
    blocks = _blocks(section)
    (log_writer,) = [body for lang, body in blocks if lang == "py"]
    (ingest,) = [body.strip() for lang, body in blocks if lang == "bash"]
    untagged = [body for lang, body in blocks if lang == ""]
    validate, shown, config, with_config = untagged
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")  # the commands name the config relative to the repo
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    (tmp_path / "write_log.py").write_text(log_writer)
    assert subprocess.run([sys.executable, "write_log.py"], cwd=tmp_path, env=env, timeout=60).returncode == 0
    done = _python(ingest, tmp_path, env)
    assert done.returncode == 0, done.stderr[-2000:]
    done = _python(validate.strip(), tmp_path, env)
    assert done.returncode == 3 and done.stdout == shown, (done.stdout, done.stderr[-2000:])
    (tmp_path / "checks.yaml").write_text(config)
    done = _python(with_config.strip(), tmp_path, env)
    assert done.returncode == 0 and "no anomalies" in done.stdout, done.stdout + done.stderr[-2000:]
    # The table's defaults are the code's.
    table = dict(re.findall(r"^\| `(\w+)` \| .*? \| ([\d.]+) \|$", section, flags=re.M))
    assert set(table) == {"always_missing", "constant", "label_constant", "dead_letters"}
    assert {k: float(v) for k, v in table.items()} == {k: DEFAULT_THRESHOLDS[k] for k in table}


def test_the_benchmark_commands_name_a_registered_benchmark_and_its_module():
    from benchmarks.suite import BENCHMARKS

    commands = [line.split("#")[0].strip() for _, body in _blocks(_section("What the checks cost"))
                for line in body.splitlines() if line.strip()]
    assert commands == ["python -m benchmarks.validation_cost", "python -m benchmarks --only validation_cost"]
    assert "validation_cost" in BENCHMARKS and (REPO / "benchmarks" / "validation_cost.py").exists()
