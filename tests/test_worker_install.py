"""What a Beam worker installs and runs: the package as Beam's stager builds it, in a clean environment.

Beam's stager turns `--setup_file ./pyproject.toml` into an sdist (`python -m build --no-isolation --sdist`)
that every worker pip-installs. These tests install that sdist, with the registry's packages at the pinned
versions, into a virtual environment of its own, check that TensorFlow and matplotlib stay out of it, and
run the ingest there on the local runner and on Beam's PortableRunner with an external worker pool (the Fn
API path Dataflow's Runner v2 uses): every output file equals, byte for byte, what the main environment
writes.

The environment's packages are kept between runs in a cache folder keyed by requirements.lock (the first
run installs them from the package registry); the sdist itself is reinstalled every run.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import pytest

from pipelines.synthetic import write_synthetic_criteo

REPO = pathlib.Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"
# Written files that hold the run's own paths or times, compared by what they list rather than byte for byte.
# The report and the manifest (its time, and the report among its files) differ between runs by design;
# the manifests' shard entries are compared on their own.
_RUN_SPECIFIC = {"report.html", "_MANIFEST.json"}

_CONFIG = """\
input: {format: criteo, schema: criteo}
features:
  "C*": {hash_buckets: 5000}
  C9: {vocabulary: {min_frequency: 1, num_oov_buckets: 1}}
output: {format: parquet, num_shards: 2, shuffle: true, seed: 3, row_group_size: 500}
stats: {batch_sizes: [64, 256]}
error_budget: 0.01
"""

pytestmark = pytest.mark.slow


def _cache_dir() -> pathlib.Path:
    root = os.environ.get("SPARSEFLOW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "sparseflow")
    return pathlib.Path(root)


def _run(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    assert done.returncode == 0, f"{command[:4]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@contextlib.contextmanager
def _one_at_a_time(lock_path: pathlib.Path):
    # The fixture runs once per test worker that gets a test of this module: two builds in the same source
    # directory race on setuptools' release tree, and two pip runs on the one cached environment.
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="module")
def worker_python(tmp_path_factory) -> pathlib.Path:
    with _one_at_a_time(_cache_dir() / "worker-venv.lock"):
        return _worker_python(tmp_path_factory)


def _worker_python(tmp_path_factory) -> pathlib.Path:
    dist = tmp_path_factory.mktemp("dist")
    # Exactly the stager's command (apache_beam/runners/portability/stager.py, _build_setup_package).
    _run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir", str(dist), str(REPO)],
         cwd=REPO, timeout=600)
    (sdist,) = dist.glob("sparseflow-*.tar.gz")
    venv = _cache_dir() / f"worker-venv-{hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]}"
    python = venv / "bin" / "python"
    if not python.exists():
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # The package's own requirements, resolved at the pinned versions: what `--setup_file` pulls onto a worker.
    _run([*pip, "-c", str(LOCK), str(sdist)], timeout=1200)
    _run([*pip, "--no-deps", "--force-reinstall", str(sdist)], timeout=600)
    return python


def _installed(python: pathlib.Path) -> set[str]:
    done = _run([str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"], timeout=120)
    return {line.split("==")[0].lower().replace("_", "-") for line in done.stdout.splitlines() if "==" in line}


def _outputs(directory: pathlib.Path) -> dict[str, bytes]:
    files = {}
    for path in sorted(directory.rglob("*")):
        name = path.relative_to(directory).as_posix()
        if path.is_file() and name not in _RUN_SPECIFIC:
            files[name] = path.read_bytes()
    files["_MANIFEST.json shards"] = json.dumps(json.loads((directory / "_MANIFEST.json").read_text())["shards"])
    return files


@pytest.fixture(scope="module")
def log_and_config(tmp_path_factory):
    work = tmp_path_factory.mktemp("worker_logs")
    log = pathlib.Path(write_synthetic_criteo(str(work / "logs" / "day.tsv"), 2000, 11))
    with open(log, "a") as f:
        f.write("not a criteo line\n1\tx\n")  # two dead letters, within the 1% budget
    config = work / "ingest.yaml"
    config.write_text(_CONFIG)
    return log, config


@pytest.fixture(scope="module")
def main_output(log_and_config, tmp_path_factory):
    log, config = log_and_config
    out = tmp_path_factory.mktemp("main") / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    _run([sys.executable, "-m", "pipelines.ingest", "--input", str(log), "--config", str(config), "--output",
          str(out), "--no_report"], cwd=REPO, env=env, timeout=600)
    return _outputs(out)


def _worker_env(python: pathlib.Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The worker pool starts SDK workers with the `python` found first on PATH.
    env["PATH"] = str(python.parent) + os.pathsep + env.get("PATH", "")
    return env


def test_the_worker_package_pulls_neither_tensorflow_nor_matplotlib(worker_python):
    installed = _installed(worker_python)
    assert {"apache-beam", "pyarrow", "numpy", "sparseflow"} <= installed
    assert not installed & {"tensorflow", "tensorflow-cpu", "keras", "matplotlib"}, sorted(installed)
    # And nothing the ingest imports needs them.
    probe = ("import sys, pipelines.ingest, transforms.beam; "
             "print(sorted({'tensorflow', 'matplotlib'} & set(sys.modules)))")
    done = _run([str(worker_python), "-c", probe], cwd=worker_python.parent, env=_worker_env(worker_python),
                timeout=300)
    assert done.stdout.strip() == "[]"


def test_the_ingest_in_the_worker_environment_writes_the_same_bytes(worker_python, log_and_config, main_output,
                                                                    tmp_path):
    log, config = log_and_config
    out = tmp_path / "out"
    # With the report on: it draws its charts with no plotting library installed.
    done = _run([str(worker_python), "-m", "pipelines.ingest", "--input", str(log), "--config", str(config),
                 "--output", str(out)], cwd=tmp_path, env=_worker_env(worker_python), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "<svg class='chart'" in (out / "report.html").read_text()
    assert _outputs(out) == main_output


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_ingest_on_the_portable_runner_with_external_workers_writes_the_same_bytes(
        worker_python, log_and_config, main_output, tmp_path):
    log, config = log_and_config
    port = _free_port()
    env = _worker_env(worker_python)
    pool = subprocess.Popen([str(worker_python), "-m", "apache_beam.runners.worker.worker_pool_main",
                             "--service_port", str(port)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # the pool is ready once it listens
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert pool.poll() is None and time.monotonic() < deadline, "the worker pool did not start"
            time.sleep(0.2)
        out = tmp_path / "out"
        _run([str(worker_python), "-m", "pipelines.ingest", "--input", str(log), "--config", str(config),
              "--output", str(out), "--no_report", "--runner", "PortableRunner", "--job_endpoint", "embed",
              "--environment_type", "EXTERNAL", "--environment_config", f"localhost:{port}"],
             cwd=tmp_path, env=env, timeout=600)
    finally:
        pool.terminate()
        pool.wait(timeout=30)
    assert _outputs(out) == main_output
