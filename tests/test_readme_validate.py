"""The "Validating your data" guide's commands run verbatim: a drifted held-out day is flagged, a config quiets it."""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

from tests.test_validate import _log

REPO = pathlib.Path(__file__).resolve().parents[1]
GUIDES = {"Your own logs": "your_logs.md", "Validating your data": "validation.md"}


def _section(title: str) -> str:
    """The guide of that title: the first part only, up to its first `## ` heading."""
    text = (REPO / "docs" / GUIDES[title]).read_text(encoding="utf-8")
    return text.split("\n## ", 1)[0]


def _blocks(section: str, language: str) -> list[str]:
    return [body for lang, body in re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S) if lang == language]


def _commands(section: str, language: str) -> list[str]:
    blocks = _blocks(section, language)
    return [line.strip() for b in blocks for line in b.replace("\\\n", " ").splitlines()
            if line.strip().startswith("python")]


def test_the_readme_validation_commands_flag_drift_and_the_config_sets_thresholds(tmp_path):
    section = _section("Validating your data")
    ingests = [c for c in _commands(_section("Your own logs"), "bash") if "pipelines.ingest" in c]
    (validate,) = _commands(section, "bash")
    (with_config,) = _commands(section, "")
    (config,) = [b for b in _blocks(section, "") if b.startswith("validation:")]
    (tmp_path / "checks.yaml").write_text(config)
    logs = tmp_path / "docs" / "sample_logs"  # where the commands read the shipped sample: this test's logs instead
    logs.mkdir(parents=True)
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")  # the commands name the config relative to the repo
    _log(logs / "clicks-1.tsv", 1)
    _log(logs / "heldout-1.tsv", 3, drift=True, day=1)  # other popular items, dearer prices
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    done = []
    for command in [*ingests, validate, with_config]:
        argv = shlex.split(command)
        assert argv[0] == "python"
        done.append(subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                                   env=env, timeout=600))
    assert [d.returncode for d in done] == [0, 0, 3, 0], [d.stderr[-2000:] for d in done]
    flagged = {line.split("\t")[0] for line in done[2].stdout.splitlines()}
    assert flagged == {"item_id", "price"}
    assert "no anomalies" in done[3].stdout
    # The held-out ingest recorded the same comparison against its --vocab_from source, and its report flags it.
    out = tmp_path / "out" / "clicks-heldout"
    stats = json.loads((out / "stats.json").read_text())
    assert {a["feature"] for a in stats["validation"]["anomalies"]} == flagged
    assert "categorical_drift" in (out / "report.html").read_text()
    # Every default the table documents is the one the code uses.
    from pipelines.anomalies import DEFAULT_THRESHOLDS

    table = dict(re.findall(r"^\| `(\w+)` \| .*? \| ([\d.]+) \|$", section, flags=re.M))
    assert {k: float(v) for k, v in table.items()} == {k: v for k, v in DEFAULT_THRESHOLDS.items() if k in table}
    single = re.search(r"^\| (`always_missing`.*?) \| .*? \| 0 \|$", section, flags=re.M).group(1)
    assert set(table) | set(re.findall(r"`(\w+)`", single)) == set(DEFAULT_THRESHOLDS)
    assert all(DEFAULT_THRESHOLDS[k] == 0 for k in re.findall(r"`(\w+)`", single))


def test_the_shipped_sample_logs_show_no_anomalies(tmp_path):
    """test_readme's reader runs the bash command on the shipped sample logs: those are alike, so it exits 0."""
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")
    (tmp_path / "docs").symlink_to(REPO / "docs")
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    ingests = [c for c in _commands(_section("Your own logs"), "bash") if "pipelines.ingest" in c]
    for command in [*ingests, *_commands(_section("Validating your data"), "bash")]:
        done = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=tmp_path, capture_output=True,
                              text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
