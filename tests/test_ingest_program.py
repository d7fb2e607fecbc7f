"""`python -m pipelines.ingest` as a program: its end skips the final collection; the start-up
benchmark's child runs it that way and times each phase."""

import gc
import json
import os
import sys

import pytest

from pipelines import ingest
from pipelines.synthetic import synthetic_criteo_lines


@pytest.fixture
def small_log(tmp_path):
    path = tmp_path / "day.tsv"
    path.write_text("\n".join(synthetic_criteo_lines(300, seed=5)) + "\n")
    return str(path)


@pytest.fixture
def thawed():
    gc.unfreeze()
    yield
    gc.unfreeze()  # this process lives on: what a test froze must be collectable again


def test_run_as_the_program_it_freezes_the_heap_for_exit(small_log, tmp_path, monkeypatch, thawed, capsys):
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["pipelines.ingest", "--input", small_log, "--output", str(out), "--no_report"])
    ingest.main()
    assert gc.get_freeze_count() > 1000
    assert json.loads((out / "_MANIFEST.json").read_text())["totals"]["rows_out"] == 300
    assert "300" in capsys.readouterr().out


def test_called_with_flags_it_leaves_the_collector_alone(small_log, tmp_path, thawed):
    ingest.main(["--input", small_log, "--output", str(tmp_path / "out"), "--no_report"])
    assert gc.get_freeze_count() == 0


def test_a_failed_run_leaves_the_collector_alone(tmp_path, monkeypatch, thawed):
    monkeypatch.setattr(sys, "argv", ["pipelines.ingest", "--input", str(tmp_path / "none*.tsv"),
                                      "--output", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exit_info:
        ingest.main()
    assert exit_info.value.code == 2 and gc.get_freeze_count() == 0


def test_the_start_up_benchmark_child_runs_the_program_and_times_its_phases(small_log, tmp_path, monkeypatch,
                                                                             thawed):
    from benchmarks import vocabulary
    from transforms.beam import read_logs

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the child sets the program's command line
    monkeypatch.setattr(read_logs._ReadFileFn, "process", read_logs._ReadFileFn.process)  # it times this
    monkeypatch.setattr(ingest, "build_ingest", ingest.build_ingest)  # and this
    result = vocabulary._child_small(small_log, str(tmp_path / "out"))
    assert result["rows"] == 300
    marks = result["marks"]
    order = ["interpreter_ready", "imports_done", "checks_done", "graph_built", "first_batch_read", "run_done"]
    assert set(marks) == set(order)
    assert [marks[k] for k in order] == sorted(marks[k] for k in order)
    assert os.path.exists(tmp_path / "out" / "stats.json")
