"""The serving guide's example runs as written against an export of the own-logs click model."""

import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
GUIDE = (REPO / "docs" / "serving.md").read_text(encoding="utf-8")

pytestmark = pytest.mark.slow


def _section() -> str:
    return GUIDE


def _example() -> str:
    (body,) = re.findall(r"```py\n(.*?)```", _section(), flags=re.S)
    return body


def test_the_serving_section_states_the_contract():
    section = _section()
    for term in ("list_separator", "null_values", "serving_text", "serving_default", "serving_inputs",
                 "_MANIFEST.json", "MISSING_INT", "float64", "not inputs"):
        assert term in section, term


def test_the_serving_example_prints_what_its_comments_say(tmp_path):
    from test_readme import _write_click_log

    from pipelines.ingest import run_ingest
    from pipelines.model import CtrModel
    from pipelines.tasks import resolve_task
    from sparse_io.schema import Schema

    (tmp_path / "logs").mkdir()
    _write_click_log(tmp_path / "logs" / "clicks-1.tsv", 300)
    config = REPO / "pipelines" / "configs" / "own_logs.yaml"
    assert yaml.safe_load(config.read_text())["input"]["null_values"] == ["", "NA", "NULL", "\\N"]
    data = tmp_path / "out" / "clicks"
    run_ingest(["--input", str(tmp_path / "logs" / "clicks-1.tsv"), "--config", str(config), "--output", str(data),
                "--no_report", "--progress_seconds", "0"])
    schema = Schema.load(str(data))
    model = CtrModel({s.name: s.hash_buckets for s in schema.sparse}, ["price"], embedding_dim=4,
                     hidden_units=(16,), block_size=16)
    model.build()
    resolve_task(schema).export(model, schema, str(tmp_path / "out" / "clicks-model" / "export"),
                                ingest_dir=str(data))
    (tmp_path / "example.py").write_text(_example())
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = ["['item_id', 'price', 'tags', 'user_id']", "(2,)", "(2,)", "refused: True"]
    assert done.stdout.strip().splitlines() == printed
    # Each printed line is the comment beside its print in the README.
    comments = [line.rsplit("  # ", 1)[1].split(" (")[0] if "refused" in line else line.rsplit("  # ", 1)[1]
                for line in _example().splitlines() if "print(" in line]
    assert [c for c in comments if c in printed] == printed
