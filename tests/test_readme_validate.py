"""The README's "Validating your data" commands run verbatim: a drifted day is flagged, a config quiets it."""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

from tests.test_validate import _log

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _section() -> str:
    section = README[README.index("## Validating your data"):]
    return section[: section.index("\n## ", 1)]


def test_the_readme_validation_commands_flag_drift_and_the_config_sets_thresholds(tmp_path):
    section = _section()
    (body,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    commands = [line.strip() for line in body.splitlines() if line.strip()]
    (config,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    (tmp_path / "checks.yaml").write_text(config)
    (tmp_path / "logs").mkdir()
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")  # the commands name the config relative to the repo
    _log(tmp_path / "logs" / "train-1.tsv", 1)
    _log(tmp_path / "logs" / "today-1.tsv", 3, drift=True, day=1)
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    done = []
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "python"
        done.append(subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                                   env=env, timeout=600))
    assert [d.returncode for d in done] == [0, 0, 3, 0], [d.stderr[-2000:] for d in done]
    flagged = {line.split("\t")[0] for line in done[2].stdout.splitlines()}
    assert flagged == {"item_id", "price"}
    assert "no anomalies" in done[3].stdout
    # The held-out ingest recorded the same comparison against its --vocab_from source, and its report flags it.
    stats = json.loads((tmp_path / "out" / "today" / "stats.json").read_text())
    assert {a["feature"] for a in stats["validation"]["anomalies"]} == flagged
    assert "categorical_drift" in (tmp_path / "out" / "today" / "report.html").read_text()
    # Every default the table documents is the one the code uses.
    from pipelines.anomalies import DEFAULT_THRESHOLDS

    table = dict(re.findall(r"^\| `(\w+)` \| .*? \| ([\d.]+) \|$", section, flags=re.M))
    assert {k: float(v) for k, v in table.items()} == {
        k: v for k, v in DEFAULT_THRESHOLDS.items() if k in table}
    single = re.search(r"^\| (`always_missing`.*?) \| .*? \| 0 \|$", section, flags=re.M).group(1)
    assert set(table) | set(re.findall(r"`(\w+)`", single)) == set(DEFAULT_THRESHOLDS)
    assert all(DEFAULT_THRESHOLDS[k] == 0 for k in re.findall(r"`(\w+)`", single))
