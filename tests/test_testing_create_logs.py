"""CreateLogs: in-memory logs through ReadLogs' own parsing, dead letters, batching, metrics and budget."""

import json

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that, equal_to

from sparse_io import ErrorBudgetExceeded, FeatureSpec, Schema
from transforms.beam import ReadLogs
from transforms.beam.read_logs import READ_METRICS
from transforms.testing import MEMORY_SOURCE, CreateLogs, dead_letters, encode_logs, equal_to_rows, test_pipeline

EVENTS = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("item", "sparse", "string")])


def _criteo(i):
    cats = [f"{i * 26 + j:08x}" for j in range(26)]
    return "\t".join([str(i % 2), *[str(i + k) for k in range(13)], *cats])


def _criteo_row(i):
    row = {"label": i % 2}
    row.update({f"I{k + 1}": float(i + k) for k in range(13)})
    row.update({f"C{j + 1}": [f"{i * 26 + j:08x}"] for j in range(26)})
    return row


GOOD = [_criteo(i) for i in range(7)]
BAD = [_criteo(7).replace(f"{7 * 26:08x}", "zzzz"), "1\t2"]  # a non-hex C1 id; too few fields (strict)
LINES = GOOD[:3] + [BAD[0]] + GOOD[3:] + [BAD[1]]  # bad records on lines 4 and 9


def _counters(result):
    found = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(READ_METRICS))["counters"]
    return {c.key.metric.name: c.committed for c in found}


def test_rows_batches_dead_letters_and_metrics_are_the_readers(tmp_path):
    p = test_pipeline()
    batches, dead = p | CreateLogs(
        LINES, "criteo", batch_size=3, strict=True, error_budget=None, with_dead_letters=True,
        dead_letters_path=str(tmp_path / "dead.jsonl"),
    )
    assert_that(batches, equal_to_rows([_criteo_row(i) for i in range(7)]), label="rows")
    assert_that(batches | beam.Map(lambda b: b.num_rows <= 3) | beam.Distinct(), equal_to([True]), label="size")
    assert_that(dead, dead_letters(["C1", "fields"]), label="dead")
    assert_that(dead | beam.Map(lambda d: (d.source, d.line)), equal_to([(MEMORY_SOURCE, 4), (MEMORY_SOURCE, 9)]),
                label="where")
    result = p.run()
    result.wait_until_finish()
    counters = _counters(result)
    assert (counters["files"], counters["records"], counters["bad_records"]) == (1, 9, 2)
    written = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert sorted((d["source"], d["line"]) for d in written) == [(MEMORY_SOURCE, 4), (MEMORY_SOURCE, 9)]


def test_same_letters_as_readlogs_on_the_same_file(tmp_path):
    (tmp_path / "logs.tsv").write_text("\n".join(LINES) + "\n")
    with test_pipeline() as p:
        _ = p | "Memory" >> CreateLogs(LINES, "criteo", strict=True, error_budget=None,
                                       dead_letters_path=str(tmp_path / "memory.jsonl"))
        _ = p | "File" >> ReadLogs(str(tmp_path / "logs.tsv"), "criteo", strict=True, error_budget=None,
                                   dead_letters_path=str(tmp_path / "file.jsonl"))

    def letters(name):
        rows = [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
        return sorted((d["line"], d["reason"], d["raw"]) for d in rows)

    assert letters("memory.jsonl") == letters("file.jsonl")
    assert [line for line, _, _ in letters("file.jsonl")] == [4, 9]


def test_the_error_budget_holds_as_in_readlogs():
    with pytest.raises(Exception, match="over the error budget") as info:
        with test_pipeline() as p:
            _ = p | CreateLogs(LINES, "criteo", strict=True, error_budget=0.1)
    assert isinstance(info.value, ErrorBudgetExceeded) or "ErrorBudgetExceeded" in repr(info.value)
    assert MEMORY_SOURCE in str(info.value)


def test_jsonl_records_and_lines_csv_with_header_and_parquet_records():
    csv_schema = Schema([FeatureSpec("label", "label", "int64"), FeatureSpec("items", "sparse", "int64")])
    with test_pipeline() as p:
        jsonl, jsonl_dead = p | "Jsonl" >> CreateLogs(
            [{"label": 1, "item": ["a", "b"]}, '{"label": 0, "item": []}', '{"label": "x"}'],
            "jsonl", EVENTS, error_budget=None, with_dead_letters=True,
        )
        csv = p | "Csv" >> CreateLogs(["items,label", "3|4,1", ",0"], "csv", csv_schema)
        # A null id list reads as no ids, as ReadLogs reads it.
        parquet = p | "Parquet" >> CreateLogs([{"label": 1, "item": ["z"]}, {"label": 0, "item": None}], "parquet",
                                              EVENTS)
        assert_that(jsonl, equal_to_rows([{"label": 1, "item": ["a", "b"]}, {"label": 0, "item": []}]), "jsonl")
        assert_that(jsonl_dead | beam.Map(lambda d: d.line), equal_to([3]), label="jsonl_dead")
        assert_that(csv, equal_to_rows([{"label": 1, "items": [3, 4]}, {"label": 0, "items": []}]), label="csv")
        assert_that(parquet, equal_to_rows([{"label": 1, "item": ["z"]}, {"label": 0, "item": []}]), "parquet")


def test_encoding_and_argument_errors():
    assert encode_logs(["a", b"b"], "tsv") == b"a\nb\n"
    assert encode_logs("whole\nfile", "criteo") == b"whole\nfile"
    assert encode_logs([{"é": 1}], "jsonl") == '{"é": 1}\n'.encode()
    back = pq.read_table(pa.BufferReader(encode_logs([{"label": 1, "item": ["q"]}], "parquet")))
    assert back.to_pylist() == [{"label": 1, "item": ["q"]}]
    with pytest.raises(TypeError, match="item 1 is a dict; format 'criteo'"):
        CreateLogs(["x", {"a": 1}], "criteo")
    with pytest.raises(ValueError, match="item 0 holds a newline"):
        CreateLogs(["a\nb"], "criteo")
    with pytest.raises(ValueError, match="needs a schema"):
        CreateLogs([], "parquet")
    with pytest.raises(ValueError, match="format 'xml'"):
        CreateLogs([], "xml", EVENTS)
    with pytest.raises(ValueError, match="batch_size"):
        CreateLogs([], "jsonl", EVENTS, batch_size=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        CreateLogs([], "jsonl", EVENTS, bogus=1)
