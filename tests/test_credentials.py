"""gs:// paths without credentials fail fast with one line, and the credential lookup is bounded. Nothing here
reaches the network: the lookups are fakes, or google.auth's own with every networked source turned off."""

import os
import subprocess
import sys
import threading

import pytest

from pipelines import ingest, train
from pipelines.credentials import check_cloud_credentials
from pipelines.errors import UsageError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOW_TO = "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS"


class DefaultCredentialsError(Exception):
    """Stands in for google.auth.exceptions.DefaultCredentialsError."""


def _no_credentials():
    raise DefaultCredentialsError("Your default credentials were not found. To set up Application Default "
                                  "Credentials, see https://cloud.google.com/docs/authentication")


def test_local_paths_need_no_lookup():
    calls = []
    check_cloud_credentials({"--input": "logs/*.tsv", "--output": "out", "--eval_data": None},
                            lookup=lambda: calls.append(1))
    assert calls == []


def test_a_gs_path_without_credentials_is_one_line_naming_the_flag_and_the_fix():
    with pytest.raises(UsageError) as info:
        check_cloud_credentials({"--input": "logs/*.tsv", "--output": "gs://bucket/out"}, lookup=_no_credentials)
    assert str(info.value) == f"--output gs://bucket/out: no Google Cloud credentials found; {HOW_TO} to a " \
                              "service-account key file"


def test_a_lookup_that_hangs_is_given_up_after_the_timeout():
    release = threading.Event()
    try:
        with pytest.raises(UsageError, match=r"--data gs://b/train: no Google Cloud credentials found within 0.2 s"):
            check_cloud_credentials({"--data": "gs://b/train"}, timeout=0.2, lookup=release.wait)
    finally:
        release.set()


def test_found_credentials_pass():
    check_cloud_credentials({"--input": "gs://bucket/day_*.tsv"}, lookup=lambda: ("credentials", "project"))


@pytest.fixture
def offline_google_auth(tmp_path, monkeypatch):
    """An environment where google.auth finds no credentials without any network call."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "SPARSEFLOW_DEBUG")}
    (tmp_path / "gcloud").mkdir()
    env.update(PYTHONPATH=REPO, CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), NO_GCE_CHECK="true",
               # Should anything still ask the metadata server, it gets a refused local port, not the network.
               GCE_METADATA_HOST="127.0.0.1:9", GCE_METADATA_IP="127.0.0.1:9", TF_CPP_MIN_LOG_LEVEL="3")
    return env


@pytest.mark.parametrize("flags, flag", [
    (["--input", "gs://my-bucket/day_*.tsv", "--output", "{tmp}/out"], "--input gs://my-bucket/day_*.tsv"),
    (["--input", "{log}", "--output", "gs://my-bucket/shards"], "--output gs://my-bucket/shards"),
])
def test_ingest_with_a_gs_path_and_no_credentials_exits_2_with_one_line(flags, flag, offline_google_auth, tmp_path):
    log = tmp_path / "day.tsv"
    log.write_text("0\t1\t2\n")
    args = [f.format(tmp=tmp_path, log=log) for f in flags]
    done = subprocess.run([sys.executable, "-m", "pipelines.ingest", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=offline_google_auth, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"pipelines.ingest: error: {flag}: no Google Cloud credentials "
                                                f"found; {HOW_TO} to a service-account key file"]
    assert not (tmp_path / "out").exists()


def test_ingest_and_train_check_before_touching_anything(monkeypatch, tmp_path):
    monkeypatch.setattr("google.auth.default", _no_credentials)
    with pytest.raises(UsageError, match=r"^--input gs://b/x\.tsv: no Google Cloud credentials found"):
        ingest.run_ingest(["--input", "gs://b/x.tsv", "--output", str(tmp_path / "out")])
    with pytest.raises(UsageError, match=r"^--model_dir gs://b/model: no Google Cloud credentials found"):
        train.train(["--data", str(tmp_path / "nowhere"), "--model_dir", "gs://b/model"])
    assert not (tmp_path / "out").exists()


def test_a_gs_path_without_the_gcp_extra_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.auth", None)  # as where apache-beam[gcp] is not installed
    with pytest.raises(UsageError, match=r"^--output gs://b/out: gs:// paths need .*pip install 'sparseflow\[gcp\]'$"):
        check_cloud_credentials({"--input": "logs/x.tsv", "--output": "gs://b/out"})
