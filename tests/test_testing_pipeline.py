"""transforms.testing.test_pipeline: the DirectRunner, offline, with no Prism attempt; the kit imports without TF."""

import doctest
import logging
import pathlib
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.runners.direct.direct_runner import DirectRunner
from apache_beam.runners.portability import prism_runner
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.testing import test_pipeline

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def prism_attempts(monkeypatch, caplog):
    """Every attempt to start (or fetch) Prism, refused and recorded; Beam's INFO log kept."""
    attempts = []

    def refuse_run(self, pipeline, options):
        attempts.append("run_pipeline")
        raise RuntimeError("Prism is not allowed in this test")

    def refuse_download(url, *args, **kwargs):
        attempts.append(f"download {url}")
        raise RuntimeError("no network in tests")

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", refuse_run)
    monkeypatch.setattr(prism_runner.PrismJobServer, "_download_to_local_path", staticmethod(refuse_download))
    caplog.set_level(logging.INFO)
    return attempts


def _triple(pipeline):
    with pipeline as p:
        assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 3), equal_to([3, 6]))


def test_runs_on_the_direct_runner_without_trying_prism(prism_attempts, caplog):
    pipeline = test_pipeline()
    assert isinstance(pipeline, BeamPipeline) and isinstance(pipeline.runner, DirectRunner)
    _triple(pipeline)
    assert prism_attempts == []
    assert "Prism" not in caplog.text and "Falling back" not in caplog.text
    # The watch can see an attempt: Beam's plain DirectRunner makes one (refused here, then falls back).
    _triple(BeamPipeline(runner="DirectRunner"))
    assert prism_attempts == ["run_pipeline"]


def test_options_reach_the_pipeline_and_a_failing_assert_fails_the_test(prism_attempts):
    pipeline = test_pipeline(direct_num_workers=2, direct_running_mode="multi_threading")
    assert pipeline.options.view_as(DirectOptions).direct_num_workers == 2
    _triple(pipeline)
    with pytest.raises(Exception, match="Failed assert"):
        with test_pipeline() as p:
            assert_that(p | beam.Create([1]), equal_to([2]))
    assert prism_attempts == []
    with pytest.raises(ValueError, match="runs on the DirectRunner"):
        test_pipeline(runner="FnApiRunner")


def test_pytest_does_not_collect_test_pipeline_as_a_test():
    assert test_pipeline.__test__ is False


def test_the_docstring_example_runs():
    import transforms.testing.pipeline as module

    results = doctest.testmod(module)
    assert results.attempted >= 3 and results.failed == 0


_BLOCK_TF = """
import sys
class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError("tensorflow is blocked in this check: " + name)
sys.meta_path.insert(0, _NoTensorFlow())
"""


def test_the_kit_imports_and_runs_without_tensorflow():
    # A Beam-only user's environment: any import of tensorflow fails.
    script = _BLOCK_TF + """
import apache_beam as beam
from apache_beam.testing.util import assert_that
from sparse_io import FeatureSpec, Schema
from transforms.beam import HashIds
from transforms.testing import CreateLogs, dead_letters, equal_to_rows, has_schema, test_pipeline
schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("item", "sparse", "string")])
with test_pipeline() as p:
    batches, dead = p | CreateLogs(['{"label": 1, "item": ["a"]}', "{"], "jsonl", schema,
                                   error_budget=None, with_dead_letters=True)
    assert_that(batches, equal_to_rows([{"label": 1, "item": ["a"]}]))
    assert_that(batches | HashIds("item", 10), has_schema({"label": "int64", "item": "list<int64>"}), label="s")
    assert_that(dead, dead_letters(["JSON"]), label="dead")
from transforms.testing import ingest_in_memory
columns = [{"name": "label", "kind": "label"}, {"name": "item", "dtype": "string"}]
config = {"input": {"format": "jsonl", "schema": columns},
          "features": {"item": {"hash_buckets": 7}}, "output": {"num_shards": 1}}
assert [r["label"] for r in ingest_in_memory([{"label": 1, "item": ["a"]}], config).rows] == [1]
print("tensorflow" in sys.modules, sorted(m for m in sys.modules if m.startswith("tensorflow")))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False []"
