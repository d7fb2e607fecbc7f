"""docs/feature_transforms.md, "Joining side tables": its blocks run as written and give what the text says."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pyarrow.parquet as pq

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "feature_transforms.md").read_text(encoding="utf-8")


def _section() -> str:
    section = DOC[DOC.index("## Joining side tables"):]
    end = section.find("\n## ", 1)
    return section if end < 0 else section[:end]


def test_the_section_s_snippet_and_command_run_and_match_its_counts(tmp_path):
    blocks = re.findall(r"```(\w+)\n(.*?)```", _section(), flags=re.S)
    assert [lang for lang, _ in blocks] == ["python", "bash"]
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")  # a directory that looks like the repository root
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    (tmp_path / "snippet.py").write_text(blocks[0][1])
    for command in ["python snippet.py", *[line for line in blocks[1][1].splitlines() if line.strip()]]:
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, env=env,
                              timeout=600)
        assert done.returncode == 0, (command, done.stderr[-2000:])
    out = tmp_path / "out" / "movielens"
    joins = json.loads((out / "stats.json").read_text())["joins"]
    said = re.search(r"records (\d+) of the (\d+) ratings matched in each join", _section())
    matched, total = int(said[1]), int(said[2])
    assert [(j["key"], j["rows_matched"], j["rows_unmatched"]) for j in joins] == [
        ("user_id", matched, total - matched), ("movie_id", matched, total - matched)]
    # User 1 is a 1-year-old ("1") woman, occupation 10, in the snippet's table: her rows carry that.
    vocab = {name: (out / "vocab" / f"{name}.txt").read_text().splitlines() for name in ("age", "gender")}
    rows = pq.read_table(next(out.glob("part-*.parquet"))).to_pylist()
    first = [r for r in rows if r["user_id"] == 1]
    assert len(first) == 2
    assert all([vocab["age"][i - 1] for i in r["age"]] == ["1"] and [vocab["gender"][i - 1] for i in r["gender"]]
               == ["F"] for r in first)
    assert all(r["age"] == [] for r in rows if r["user_id"] == 5)
