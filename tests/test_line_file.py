"""WriteLineFile: every line in one file, an empty file for no lines, pieces gone, a failed run's pieces recoverable."""

import os

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipelines.output_dir import is_temporary, list_output, recover_dead_letters
from transforms.beam.line_file import WriteLineFile
from transforms.beam.runner import in_process_options


def _write(lines, path, **flags):
    with beam.Pipeline(options=in_process_options(**flags)) as p:
        written = p | beam.Create(lines, reshuffle=False) | WriteLineFile(str(path))
        assert_that(written, equal_to([str(path)]))


@pytest.mark.parametrize("workers", [1, 2])
def test_every_line_lands_once_in_the_file_and_the_pieces_go(tmp_path, workers):
    lines = [f'{{"line": {i}, "text": "é {i}"}}' for i in range(5000)]
    path = tmp_path / "errors" / "dead.jsonl"
    _write(lines, path, direct_num_workers=workers, direct_running_mode="multi_threading")
    with open(path, encoding="utf-8") as f:
        got = f.read().split("\n")
    assert got[-1] == ""  # every line ends with a newline
    assert sorted(got[:-1]) == sorted(lines)
    assert os.listdir(tmp_path / "errors") == ["dead.jsonl"]


def test_no_lines_still_write_an_empty_file(tmp_path):
    path = tmp_path / "errors" / "dead.jsonl"
    with beam.Pipeline(options=in_process_options()) as p:
        _ = p | beam.Create([]).with_output_types(str) | WriteLineFile(str(path))
    assert path.read_bytes() == b""
    assert os.listdir(tmp_path / "errors") == ["dead.jsonl"]


def test_an_existing_file_is_replaced_whole(tmp_path):
    path = tmp_path / "dead.jsonl"
    path.write_text("old line\nanother\n")
    _write(["new"], path)
    assert path.read_text() == "new\n"


def test_pieces_left_by_a_failed_run_are_where_recovery_finds_them(tmp_path):
    # What a run that fails before the concatenation leaves: the bundles' pieces under beam-temp-*.
    from transforms.beam.line_file import PIECES_PREFIX, _WritePiecesFn

    pieces_dir = os.path.join(tmp_path, "errors", f"{PIECES_PREFIX}dead.jsonl-0f")
    with beam.Pipeline(options=in_process_options()) as p:
        _ = p | beam.Create(["a", "b", "c"], reshuffle=False) | beam.ParDo(_WritePiecesFn(pieces_dir, "dead.jsonl"))
    left = list_output(str(tmp_path))
    assert left and all(is_temporary(f) and f.endswith(".dead.jsonl") for f in left)
    assert recover_dead_letters(str(tmp_path), "errors/dead.jsonl")
    assert sorted((tmp_path / "errors" / "dead.jsonl").read_text().split()) == ["a", "b", "c"]


def test_the_docstring_example_runs():
    import doctest

    import transforms.beam.line_file as module

    results = doctest.testmod(module)
    assert results.attempted >= 3 and results.failed == 0


def test_a_piece_cut_mid_line_keeps_its_lines_apart(tmp_path):
    from transforms.beam.line_file import concatenate_pieces

    (tmp_path / "a").write_bytes(b'{"x": 1}\n{"x": 2')  # a killed run's last write
    (tmp_path / "b").write_bytes(b'{"x": 3}\n')
    (tmp_path / "c").write_bytes(b"")
    concatenate_pieces([str(tmp_path / n) for n in ("c", "b", "a")], str(tmp_path / "out.jsonl"))
    assert (tmp_path / "out.jsonl").read_bytes() == b'{"x": 1}\n{"x": 2\n{"x": 3}\n'
