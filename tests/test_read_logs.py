"""ReadLogs: files split across workers, dead letters on a tagged output, counted and budgeted."""

import json

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from sparse_io import ErrorBudgetExceeded
from transforms.beam import ReadLogs
from transforms.beam.read_logs import READ_METRICS
from transforms.testing import equal_to_rows, test_pipeline


def _line(label, ints, cats):
    return "\t".join([str(label), *[str(v) for v in ints], *cats])


def _write_logs(tmp_path):
    good = [_line(i % 2, range(13), [f"{i * 26 + j:08x}" for j in range(26)]) for i in range(30)]
    bad = [_line(0, range(13), ["zzzz"] + ["0000000a"] * 25), "1\t2"]  # a non-hex id; too few fields (strict)
    (tmp_path / "day1.tsv").write_text("\n".join(good[:20]) + "\n")
    (tmp_path / "day2.tsv").write_text("\n".join(good[20:] + bad) + "\n")
    (tmp_path / "_SUCCESS").write_text("")  # markers and temporaries are not logs
    (tmp_path / ".tmp-x-day3.tsv").write_text("garbage\n")
    return good


def test_reads_every_file_once_with_dead_letters_tagged_written_and_counted(tmp_path):
    good = _write_logs(tmp_path)
    dead_path = str(tmp_path / "out" / "dead.jsonl")
    p = test_pipeline()
    batches, dead = p | ReadLogs(
        str(tmp_path),
        "criteo",
        batch_size=8,
        strict=True,
        dead_letters_path=dead_path,
        error_budget=0.1,
        with_dead_letters=True,
    )
    assert_that(batches, equal_to_rows([{"C1": [f"{i * 26:08x}"]} for i in range(30)], columns=["C1"]), "rows")
    assert_that(batches | beam.Map(lambda b: b.num_rows <= 8) | beam.Distinct(), equal_to([True]), "size")
    assert_that(
        dead | beam.Map(lambda d: (d.line, "C1" in d.reason or "fields" in d.reason)),
        equal_to([(11, True), (12, True)]),
        label="dead",
    )
    result = p.run()
    result.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(beam.metrics.MetricsFilter().with_namespace(READ_METRICS))["counters"]
    }
    assert counters["files"] == 2 and counters["records"] == 32 and counters["bad_records"] == 2
    with open(dead_path) as f:
        letters = [json.loads(line) for line in f]
    assert sorted(d["line"] for d in letters) == [11, 12]
    assert all(d["source"].endswith("day2.tsv") and d["raw"] for d in letters)
    assert len(good) == 30


def test_error_budget_fails_the_pipeline(tmp_path):
    _write_logs(tmp_path)
    with pytest.raises(Exception, match="over the error budget") as info:
        with test_pipeline() as p:
            _ = p | ReadLogs(str(tmp_path / "day*.tsv"), "criteo", strict=True, error_budget=0.01)
    assert isinstance(info.value, ErrorBudgetExceeded) or "ErrorBudgetExceeded" in repr(info.value)


def test_bad_arguments():
    with pytest.raises(ValueError, match="format"):
        ReadLogs("x", "xml")
    with pytest.raises(ValueError, match="needs a schema"):
        ReadLogs("x", "csv")
    with pytest.raises(ValueError, match="error_budget"):
        ReadLogs("x", "criteo", error_budget=2.0)
    with pytest.raises(ValueError, match="batch_size"):
        ReadLogs("x", "criteo", batch_size=0)


def test_a_cut_zstd_log_fails_the_pipeline_naming_the_file(tmp_path):
    import zstandard

    good = [_line(i % 2, range(13), [f"{i * 26 + j:08x}" for j in range(26)]) for i in range(400)]
    whole = zstandard.ZstdCompressor().compress(("\n".join(good) + "\n").encode())
    cut = tmp_path / "day1.tsv.zst"
    cut.write_bytes(whole[: len(whole) * 15 // 100])
    with pytest.raises(Exception, match="truncated zstd stream") as info:
        with test_pipeline() as p:
            _ = p | ReadLogs(str(cut), "criteo", error_budget=0.5)
    assert str(cut) in str(info.value)
