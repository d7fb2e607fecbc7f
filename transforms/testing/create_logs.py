"""CreateLogs: log lines or records held in a test -> the batches and dead letters `ReadLogs` makes of them.

The lines travel through the pipeline as one element (the bytes of a log
file); the worker that receives it stages them as a private temporary file
and hands that to `ReadLogs`' own read step, so the parsing, the dead
letters, the batching, the metrics, the dead-letter file and the error
budget are the reader's, not a copy of them.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping

import apache_beam as beam
import pyarrow as pa

from sparse_io.formats import LOG_FORMATS, LOG_SUFFIXES
from sparse_io.schema import Schema
from transforms.beam.read_logs import _COUNTS, DEAD_LETTERS, ReadLogs, _ReadFileFn

__all__ = ["CreateLogs", "MEMORY_SOURCE", "encode_logs"]

# The `source` of a dead letter from CreateLogs (the staged file's name would change every run).
MEMORY_SOURCE = "<memory>"


def _line(item, index: int, format: str) -> bytes:
    if isinstance(item, Mapping) and format == "jsonl":
        return json.dumps(item, ensure_ascii=False).encode("utf-8")
    if isinstance(item, str):
        item = item.encode("utf-8")
    if not isinstance(item, bytes):
        kinds = "a str or bytes line" + (" or a dict record" if format == "jsonl" else "")
        raise TypeError(f"CreateLogs: item {index} is a {type(item).__name__}; format {format!r} takes {kinds}")
    if b"\n" in item:
        raise ValueError(f"CreateLogs: item {index} holds a newline; give one line per item")
    return item


def encode_logs(lines_or_records, format: str, schema: Schema | None = None) -> bytes:
    """The bytes of a log file of `format` holding `lines_or_records`.

    Text formats ("criteo", "tsv", "csv", "jsonl") take a list of lines (str
    or bytes, without their newline; a "csv"/"tsv" header is one of them),
    or one str/bytes holding the whole file; "jsonl" also takes dicts, written
    as JSON. "parquet" takes a `pa.Table`/`pa.RecordBatch` or a list of dicts
    (types inferred by pyarrow; an empty list gives `schema`'s columns).

    Raises:
      TypeError: an item of a kind the format cannot take (its index named).
      ValueError: a line holding a newline, an unknown format.
    """
    if format not in LOG_FORMATS:
        raise ValueError(f"CreateLogs: format {format!r} is not one of {LOG_FORMATS}")
    if format == "parquet":
        return _parquet_bytes(lines_or_records, schema)
    if isinstance(lines_or_records, str):
        return lines_or_records.encode("utf-8")
    if isinstance(lines_or_records, bytes):
        return lines_or_records
    lines = [_line(item, i, format) for i, item in enumerate(lines_or_records)]
    return b"".join(line + b"\n" for line in lines)


def _parquet_bytes(records, schema: Schema | None) -> bytes:
    import pyarrow.parquet as pq

    if isinstance(records, pa.RecordBatch):
        table = pa.Table.from_batches([records])
    elif isinstance(records, pa.Table):
        table = records
    elif isinstance(records, Iterable) and not isinstance(records, (str, bytes, Mapping)):
        rows = list(records)
        bad = next((i for i, r in enumerate(rows) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise TypeError(f"CreateLogs: item {bad} is a {type(rows[bad]).__name__}; format 'parquet' takes dicts")
        if not rows and schema is None:
            raise ValueError("CreateLogs: an empty list of Parquet records needs a schema for its columns")
        table = pa.Table.from_pylist(rows) if rows else schema.arrow_schema().empty_table()
    else:
        raise TypeError(
            f"CreateLogs: format 'parquet' takes a pa.Table, a pa.RecordBatch or a list of dicts, "
            f"got {type(records).__name__}"
        )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _relabel(output):
    # Dead letters name the staged file; give them the stable MEMORY_SOURCE instead.
    if not isinstance(output, beam.pvalue.TaggedOutput):
        return output
    if output.tag == DEAD_LETTERS:
        return beam.pvalue.TaggedOutput(DEAD_LETTERS, dataclasses.replace(output.value, source=MEMORY_SOURCE))
    if output.tag == _COUNTS:
        records, bad, first = output.value
        first = [dataclasses.replace(d, source=MEMORY_SOURCE) for d in first]
        return beam.pvalue.TaggedOutput(_COUNTS, (records, bad, first))
    return output


class _ReadBytesFn(_ReadFileFn):
    """`ReadLogs`' per-file read, on a log file that arrives as bytes."""

    def __init__(self, format: str, schema: Schema, options: dict):
        super().__init__(format, schema, options)
        self._suffix = LOG_SUFFIXES[format]

    def process(self, data: bytes):
        with tempfile.TemporaryDirectory(prefix="sparseflow-createlogs-") as staging:
            path = os.path.join(staging, "logs" + self._suffix)
            with open(path, "wb") as f:
                f.write(data)
            for output in super().process(path):
                yield _relabel(output)


class CreateLogs(ReadLogs):
    r"""An in-memory log source for tests: `ReadLogs` over lines or records given in the test.

    What comes out is what `ReadLogs` makes of a file holding
    `lines_or_records`: `pa.RecordBatch`es with `schema.arrow_schema()`, at
    most `batch_size` rows each, bad records as `sparse_io.DeadLetter`s
    (their `source` is `MEMORY_SOURCE`, "<memory>"; `line` is the 1-based
    line, or Parquet row), the same metrics ("sparseflow.ReadLogs"), the
    same `dead_letters_path` file and error budget. The parsing is the
    reader's own: the bytes are staged as a temporary file on the worker and
    read by `ReadLogs`' read step, then the file is removed.

    Args:
      lines_or_records: see `encode_logs` (lines for text formats, dicts
        also for "jsonl", a table or dicts for "parquet").
      log_format: one of `sparse_io.LOG_FORMATS`.
      schema: as in `ReadLogs` (default `criteo_schema()` for "criteo").
      reader_options: any keyword `ReadLogs` takes (`batch_size`, `strict`,
        `list_separator`, `skip_header`, `dead_letters_path`, `error_budget`,
        `with_dead_letters`, ...), with the same meaning and defaults
        (`error_budget=0.0`: any bad record fails the run; pass None, or a
        fraction, to test dead letters).

    Raises: as `ReadLogs` at construction, plus TypeError/ValueError from
    `encode_logs` for items the format cannot take.

    Example:
      >>> from apache_beam.testing.util import assert_that
      >>> from transforms.testing import dead_letters, equal_to_rows, test_pipeline
      >>> line = "\t".join(["1"] + ["5"] * 13 + ["05db9164"] * 26)  # a Criteo line
      >>> with test_pipeline() as p:
      ...     batches, dead = p | CreateLogs([line, "1\tnot a count"], "criteo", error_budget=None,
      ...                                     with_dead_letters=True)
      ...     _ = assert_that(batches, equal_to_rows([{"label": 1, "I1": 5.0}], columns=["label", "I1"]))
      ...     _ = assert_that(dead, dead_letters(["I1"]), label="dead")
    """

    def __init__(self, lines_or_records, log_format: str, schema: Schema | None = None, **reader_options):
        super().__init__(MEMORY_SOURCE, log_format, schema, **reader_options)
        self._data = encode_logs(lines_or_records, log_format, self._schema)

    def expand(self, pbegin):
        results = (
            pbegin
            | "LogBytes" >> beam.Create([self._data])
            | "ReadFile" >> self._read_files(_ReadBytesFn(self._format, self._schema, self._options))
        )
        return self._outputs(results)
