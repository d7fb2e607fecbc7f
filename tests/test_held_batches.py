"""HoldBatches / ReleaseBatches: batches wait on disk, come back whole and in order, after their side inputs."""

import json
import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from transforms.beam import in_process_options
from transforms.beam.held_batches import HELD_PREFIX, HoldBatches, ReleaseBatches


def _batches(count: int, rows: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(3)
    out = []
    for b in range(count):
        ids = [[f"t{v}" for v in rng.integers(0, 50, rng.integers(0, 4))] for _ in range(rows)]
        out.append(pa.record_batch({"batch": np.full(rows, b), "row": np.arange(rows), "ids": pa.array(ids)}))
    return out


class _Collect:
    """Appends each element's rows as a JSON line to a file (a DoFn's own lists do not survive pickling)."""

    def __init__(self, path):
        self.path = str(path)

    def __call__(self, batch):
        with open(self.path, "a") as f:
            f.write(json.dumps(batch.to_pydict(), default=int) + "\n")

    def read(self) -> list[dict]:
        with open(self.path) as f:
            return [json.loads(line) for line in f]


def _rows(batches) -> list[dict]:
    return [json.loads(json.dumps(b.to_pydict(), default=int)) for b in batches]


def _held_files(directory) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith(HELD_PREFIX)]


@pytest.mark.parametrize("hold_rows", [1, 250, 10_000])
def test_held_batches_come_back_whole_in_order_and_their_files_are_removed(tmp_path, hold_rows):
    batches = _batches(7, 100)
    seen = _Collect(tmp_path / "seen.jsonl")
    held_dir = tmp_path / "held"
    held_dir.mkdir()
    with beam.Pipeline(options=in_process_options()) as p:
        held = p | beam.Create(batches, reshuffle=False) | HoldBatches(str(held_dir), hold_rows=hold_rows)
        released = held | ReleaseBatches([])
        _ = released | beam.Map(seen)
    assert seen.read() == _rows(batches)
    assert _held_files(held_dir) == []


def test_batches_of_another_schema_start_a_file_of_their_own(tmp_path):
    first = pa.record_batch({"x": [1, 2]})
    second = pa.record_batch({"x": pa.array([1.5], pa.float32()), "y": ["a"]})
    seen = _Collect(tmp_path / "seen.jsonl")
    with beam.Pipeline(options=in_process_options()) as p:
        held = p | beam.Create([first, second, first], reshuffle=False) | HoldBatches(str(tmp_path))
        _ = held | ReleaseBatches([]) | beam.Map(seen)
    assert seen.read() == _rows([first, second, first])


def test_release_waits_until_its_side_inputs_are_complete(tmp_path):
    marker = tmp_path / "counted.txt"

    def write_marker(total):
        marker.write_text(str(total))
        return total

    def check_marker(batch):
        # Read back only after the count over every batch exists: the whole point of holding them.
        assert marker.exists(), "a held batch was released before its side input was complete"
        return batch.num_rows

    held_dir = tmp_path / "held"
    held_dir.mkdir()
    with beam.Pipeline(options=in_process_options()) as p:
        batches = p | beam.Create(_batches(5, 40), reshuffle=False)
        counted = (
            batches
            | beam.Map(lambda b: b.num_rows)
            | "Total" >> beam.CombineGlobally(sum)
            | beam.Map(write_marker)
        )
        held = batches | HoldBatches(str(held_dir), hold_rows=40)
        released = held | ReleaseBatches([counted]) | beam.Map(check_marker) | "Released" >> beam.CombineGlobally(sum)
        assert_that(released, equal_to([200]))
    assert marker.read_text() == "200"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_hold_rows_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="hold_rows"):
        HoldBatches("/tmp", hold_rows=bad)


def test_an_ingest_with_vocabularies_leaves_no_held_file(tmp_path):
    from benchmarks.beam_ingest import make_log
    from benchmarks.vocabulary import _OURS_CONFIG
    from pipelines.ingest import run_ingest

    log = make_log(str(tmp_path / "log.tsv"), 3000)
    config = tmp_path / "config.yaml"
    config.write_text(_OURS_CONFIG)
    out = tmp_path / "out"
    summary = run_ingest(["--input", log, "--format", "criteo", "--config", str(config), "--output", str(out),
                          "--no_report"])
    assert summary["rows_out"] == 3000
    leftovers = [str(p) for p in out.rglob("*") if p.name.startswith(HELD_PREFIX)]
    assert leftovers == []


def test_a_local_ingest_graph_holds_the_batches_a_vocabulary_waits_for():
    from pipelines.config import load_config
    from pipelines.ingest import build_ingest

    config = load_config(os.path.join(os.path.dirname(os.path.dirname(__file__)), "pipelines", "configs",
                                      "criteo.yaml"))
    assert config.vocabularies, "the shipped criteo config computes vocabularies"
    pipeline = beam.Pipeline(options=in_process_options())
    build_ingest(pipeline, config, "logs/day_*.tsv", "out")
    names = {t.unique_name for t in pipeline.to_runner_api().components.transforms.values()}
    assert {"HoldBatches", "ReleaseBatches"} <= names
