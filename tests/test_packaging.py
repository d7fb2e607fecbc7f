"""The sdist and the wheel carry every module and config a Beam worker or a trainer imports."""

import pathlib
import subprocess
import sys
import tarfile
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("sparse_io", "transforms", "ops", "pipelines")


def _source_files() -> set[str]:
    files = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*"):
            if path.suffix in (".py", ".yaml", ".cc", ".h", ".cu") and "__pycache__" not in path.parts:
                files.add(path.relative_to(REPO).as_posix())
    return files | {"sparseflow.py"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    # No isolation: the build uses the pinned setuptools already installed, so it works offline.
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation", "--skip-dependency-check",
         "--outdir", str(out), str(REPO)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("sparseflow-*.whl")
    (sdist,) = out.glob("sparseflow-*.tar.gz")
    return wheel, sdist


def test_wheel_holds_every_package_module_and_config(built):
    wheel, _ = built
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _source_files()
    assert "pipelines/configs/demo.yaml" in expected and "transforms/beam/write_shards.py" in expected
    assert expected <= names, sorted(expected - names)
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)


def test_sdist_holds_the_sources_and_the_project_file(built):
    _, sdist = built
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert _source_files() | {"pyproject.toml", "README.md"} <= names, sorted(_source_files() - names)


def test_import_sparseflow_gives_the_version_and_where_each_package_imports_from():
    import doctest

    import sparseflow

    assert doctest.testmod(sparseflow).failed == 0
    assert set(sparseflow.packages()) == set(PACKAGES)
    for name, folder in sparseflow.packages().items():
        assert folder == str(REPO / name), (name, folder)


def test_the_readme_command_that_checks_the_package_names_runs_as_written():
    import os
    import re
    import shlex

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (command,) = re.findall(r'`(python -c "import sparseflow;[^`]*)`', readme)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, *shlex.split(command)[1:]], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    for name in PACKAGES:
        assert f"'{name}': '{REPO / name}'" in done.stdout
