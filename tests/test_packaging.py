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
    return files


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
