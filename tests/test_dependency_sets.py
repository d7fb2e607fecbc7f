"""What each install of the package pulls in: a lean core for the Beam stage, the rest behind extras.

`pip install sparseflow` must not bring TensorFlow, nor Beam's Google Cloud packages (about a hundred
more, and a protobuf downgrade beside an existing stack); `[tf]` beside the pinned TensorFlow changes
no installed package.
"""

import json
import pathlib
import re
import subprocess
import sys
import tomllib

REPO = pathlib.Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name_and_extras(requirement: str) -> tuple[str, set[str]]:
    match = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?", requirement)
    assert match, requirement
    extras = {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}
    return match.group(1).lower().replace("_", "-"), extras


def test_the_core_install_has_no_tensorflow_and_no_beam_extras():
    core = dict(_name_and_extras(r) for r in PROJECT["dependencies"])
    assert {"apache-beam", "pyarrow", "numpy", "pyyaml"} <= set(core)
    assert not {name for name in core if name.startswith(("tensorflow", "keras", "matplotlib", "torch"))}
    assert core["apache-beam"] == set(), "Beam's extras belong in the gcp extra, not the core install"


def test_every_core_requirement_is_a_range_not_a_pin():
    for requirement in PROJECT["dependencies"]:
        assert "==" not in requirement, requirement


def test_the_extras_hold_google_cloud_tensorflow_and_the_tools():
    extras = PROJECT["optional-dependencies"]
    assert {"gcp", "tf", "plots", "test", "bench", "all"} <= set(extras)
    assert [_name_and_extras(r) for r in extras["gcp"]] == [("apache-beam", {"gcp"})]
    assert {_name_and_extras(r)[0] for r in extras["tf"]} == {"tensorflow"}
    (everything,) = extras["all"]
    assert _name_and_extras(everything)[1] >= {"gcp", "tf", "plots", "test", "bench"}


def test_installing_the_tf_extra_beside_the_pinned_stack_changes_no_installed_package(tmp_path):
    # A resolution against what is installed only (no index): anything it would add or change is listed.
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-index", "--no-build-isolation",
         "--disable-pip-version-check", "--report", str(report), f"{REPO}[tf]"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installs = [(i["metadata"]["name"], i["metadata"]["version"]) for i in json.loads(report.read_text())["install"]]
    assert [name for name, _ in installs] == ["sparseflow"], installs
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-2000:]
