"""Shared fixtures: quiet TensorFlow, the in-process Beam runner, the real Criteo sample, a tf.data service,
the record batches Beam pickles, native helpers or their numpy references."""

import os
import pathlib

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

from hypothesis import settings

# CI replays the same examples every run so a red build always means a change broke something;
# the "explore" profile draws fresh examples to hunt for new failures.
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, print_blob=True)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile("explore", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = pathlib.Path(os.environ.get("SPARSEFLOW_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture
def criteo_data_dir() -> pathlib.Path:
    """The real Criteo sample files; the test skips when they are absent."""
    if not (SHARED_DATA / "criteo_paddlerec_dnn_train.tsv").exists():
        pytest.skip(f"real Criteo sample not present at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="module")
def service():
    """An in-process tf.data service dispatcher with one worker: the dispatcher's address."""
    import tensorflow as tf

    # Finished jobs are collected after half a second, not five minutes: stopping the worker waits for the tasks
    # of jobs not yet collected (18-57 s at the end of the module, as measured), which their heartbeats now free.
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0, job_gc_check_interval_ms=500, job_gc_timeout_ms=500)
    )
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(
            dispatcher_address=dispatcher.target.split("://")[1], port=0, heartbeat_interval_ms=500
        )
    )
    yield dispatcher.target
    del worker, dispatcher


@pytest.fixture
def pickled_batches(monkeypatch) -> list:
    """The column names of every `pa.RecordBatch` Beam's pickle coder encodes while the test runs.

    Beam encodes (or sizes, by encoding a sample) the elements of every PCollection with its coder; a batch
    output without a declared type falls back to pickling whole batches, where the Arrow coder is meant.
    """
    import pickle

    import apache_beam.coders.coders as beam_coders
    import pyarrow as pa

    pickled: list = []
    dumps = pickle.dumps

    def recording(value, *args, **kwargs):
        if isinstance(value, pa.RecordBatch):
            pickled.append(value.schema.names)
        return dumps(value, *args, **kwargs)

    monkeypatch.setattr(beam_coders.pickle, "dumps", recording)
    return pickled


@pytest.fixture(params=[True, False], ids=["native", "numpy"])
def native_helpers(request) -> bool:
    """True: the test runs sparse_io's native helpers (skipped where they do not build); False: the numpy
    references they are checked against (a function's `native=False`)."""
    from sparse_io import native_build

    if request.param and native_build.load() is None:
        pytest.skip(f"native helpers unavailable: {native_build.unavailable_reason()}")
    return request.param
