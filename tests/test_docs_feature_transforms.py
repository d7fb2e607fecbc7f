"""The examples of docs/feature_transforms.md run as written and print what the text says they print."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "feature_transforms.md").read_text(encoding="utf-8")


def _section(title: str) -> list[str]:
    body = DOC.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", body, flags=re.S)


def _run(block: str, cwd: pathlib.Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # `python` is the project's
    done = subprocess.run(["bash", "-ec", block], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_the_crosses_example_counts_its_overflow(tmp_path):
    (block,) = _section("Crosses")
    out = _run(block, tmp_path)
    assert out.strip().splitlines()[-1] == "{'rows': 1, 'dropped': 1, 'max_per_row': 2}"


@pytest.mark.slow
def test_the_shared_vocabulary_example_writes_one_file(tmp_path):
    (block,) = _section("Shared vocabularies")
    out = _run(block, tmp_path)
    assert out.strip().splitlines()[-4:] == ["shoes", "hats", "bags", "socks"]
    assert sorted(os.listdir(tmp_path / "shared_demo" / "out" / "vocab")) == ["cate.txt"]


@pytest.mark.slow
def test_the_bucketize_and_scale_example_reuses_the_training_days_parameters(tmp_path):
    body = DOC.split("## Example\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", body, flags=re.S)
    assert [lang for lang, _ in blocks] == ["python", "bash", "python"]
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")  # the commands name the shipped config by its path
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    printed = []
    for lang, block in blocks:
        if lang == "bash":
            _run(block, tmp_path)
            continue
        done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, env=env,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        printed += done.stdout.splitlines()
    # One line per derived feature of the shipped config, its recorded transform beside it.
    import yaml

    config = yaml.safe_load((REPO / "pipelines" / "configs" / "criteo_transforms.yaml").read_text())
    derived = sorted(name for name, entry in config["features"].items()
                     if isinstance(entry, dict) and "source" in entry)
    assert sorted(line.split(" ", 1)[0] for line in printed) == derived
    assert all("'source'" in line for line in printed)
