"""Local runs stay in-process and offline; every DoFn survives pickling into worker processes."""

import logging
import os
import pathlib

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.portability import prism_runner
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.beam import (
    ApplyVocabulary,
    ComputeVocabulary,
    GroupHistories,
    HashIds,
    ReadLogs,
    WriteShards,
    in_process_options,
)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _watch_downloads(monkeypatch, caplog):
    attempts = []

    def refuse(url, *args, **kwargs):
        attempts.append(url)
        raise RuntimeError("no network in tests")

    monkeypatch.setattr(prism_runner.PrismJobServer, "_download_to_local_path", staticmethod(refuse))
    caplog.set_level(logging.INFO)
    return attempts


def _tiny_pipeline(options):
    with BeamPipeline(options=options) as p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 3), equal_to([3, 6]))


def test_in_process_options_never_try_to_download_prism(monkeypatch, caplog):
    attempts = _watch_downloads(monkeypatch, caplog)
    options = in_process_options()
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    _tiny_pipeline(options)
    assert attempts == []
    assert "Downloading prism" not in caplog.text and "Prism" not in caplog.text
    # The watch itself works: Beam's default runner does try (and falls back once refused).
    _tiny_pipeline(in_process_options(runner="DirectRunner"))
    assert attempts, "the default DirectRunner was expected to try fetching Prism"


def test_every_transform_pickles_into_worker_processes(tmp_path, monkeypatch, criteo_data_dir):
    # Workers are fresh interpreters: they import this tree through PYTHONPATH. (ComputeStats runs
    # inside WriteShards.)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    options = in_process_options(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    rng = np.random.default_rng(0)
    events = pa.record_batch(
        {
            "user": pa.array(rng.integers(0, 5, 40)),
            "item": pa.array(rng.integers(0, 9, 40)),
            "ts": pa.array(np.arange(40)),
        }
    )
    cats = [f"C{i}" for i in range(1, 27)]
    with BeamPipeline(options=options) as p:
        logs = p | ReadLogs(str(criteo_data_dir / "criteo_paddlerec_dnn_*.tsv"), "criteo", batch_size=50)
        vocab = logs | ComputeVocabulary(["C1", "C2"], str(tmp_path / "vocab"))
        indexed = logs | ApplyVocabulary(vocab)
        hashed = indexed | HashIds(cats[2:], 1 << 16, salt=7)
        summary = hashed | WriteShards(str(tmp_path / "shards"), num_shards=2, seed=1)
        histories = p | beam.Create([events]) | GroupHistories("user", "item", "ts", max_length=3)
        assert_that(summary | beam.Map(lambda s: s["num_rows"]), equal_to([200]), label="shards")
        assert_that(
            histories | beam.Map(lambda b: b.num_rows) | beam.CombineGlobally(sum), equal_to([5]), "hist"
        )
