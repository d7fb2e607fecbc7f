"""ReadLogs: log files -> PCollection[pa.RecordBatch], split across files, bad records aside.

Files are matched at run time (`MatchFiles`, any Beam filesystem), spread
over workers by a `Reshuffle`, and each is read by `sparse_io.read_file`, which
parses a block of lines per pyarrow call. Records the reader rejects leave as
`DeadLetter`s on a tagged output, are counted in Beam metrics, can be written
out as JSON Lines, and are held against an error budget over the whole input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

import apache_beam as beam
import pyarrow as pa
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from sparse_io.dead_letters import DeadLetterSink, ErrorBudgetExceeded
from sparse_io.formats import LOG_FORMATS
from sparse_io.readers import DEFAULT_MAX_LINE_BYTES, ColumnSource, csv_options, read_file
from sparse_io.readers.columns import check_sources
from sparse_io.schema import Schema, criteo_schema
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._read_ahead import read_ahead
from transforms.beam.call_once import CallOnce
from transforms.beam.line_file import WriteLineFile

__all__ = ["ReadLogs", "DEAD_LETTERS", "READ_METRICS"]

DEAD_LETTERS = "dead_letters"
# Rows per RecordBatch. Larger than sparse_io's default: every Beam element and
# every per-batch vectorised call has a fixed cost, and 32768 Criteo rows are
# only about 10 MB (measured: ~12% less CPU for the whole ingest than 8192).
DEFAULT_BATCH_SIZE = 32768
_COUNTS = "record_counts"
READ_METRICS = "sparseflow.ReadLogs"


class _ReadFileFn(beam.DoFn):
    def __init__(self, format: str, schema: Schema, options: dict):
        self._format = format
        self._schema = schema
        self._options = options
        self._files = beam.metrics.Metrics.counter(READ_METRICS, "files")
        self._records = beam.metrics.Metrics.counter(READ_METRICS, "records")
        self._bad = beam.metrics.Metrics.counter(READ_METRICS, "bad_records")
        self._padded = beam.metrics.Metrics.counter(READ_METRICS, "padded_records")
        self._batches = beam.metrics.Metrics.counter(READ_METRICS, "batches")

    def process(self, path: str):
        sink = DeadLetterSink()
        # The next batch is read and parsed while this one goes through the rest of the stage.
        batches = read_file(path, self._format, self._schema, dead_letters=sink, **self._options)
        for batch in read_ahead(batches):
            self._batches.inc()
            yield batch
        self._files.inc()
        self._records.inc(sink.records)
        self._bad.inc(sink.bad)
        self._padded.inc(sink.padded)
        for letter in sink:
            yield beam.pvalue.TaggedOutput(DEAD_LETTERS, letter)
        yield beam.pvalue.TaggedOutput(_COUNTS, (sink.records, sink.bad, sink.letters[:5]))


def _visible(path: str) -> bool:
    return not os.path.basename(path).startswith((".", "_"))


def _check_budget(counts: list, budget: float, written=None) -> None:
    records = sum(c[0] for c in counts)
    bad = sum(c[1] for c in counts)
    if bad and bad / max(records, 1) > budget:
        raise ErrorBudgetExceeded(bad, records, budget, [d for c in counts for d in c[2]][:5])


class ReadLogs(beam.PTransform):
    r"""Reads log files into a PCollection of `pa.RecordBatch` with `schema.arrow_schema()`.

    Splittable across files: each matched file is one unit of work (a gzip
    file cannot be split further anyway). Within a file, the next batch is
    read and parsed in a background thread while the current one goes
    downstream (one batch ahead: two cores in use, memory still bounded).

    Args:
      file_pattern: a path, glob or directory (or a list), local or on any
        Beam filesystem; a directory or glob leaves out names starting with
        "." or "_" (temporaries, `_SUCCESS` markers).
      format: one of `sparse_io.LOG_FORMATS` ("criteo", "csv", "tsv", "jsonl", "parquet").
      schema: what to read (default `criteo_schema()` for "criteo").
      batch_size: most rows per RecordBatch (default 32768).
      strict, list_separator, skip_header, delimiter, quote_char, null_values,
      feature_null_values, column_sources, encoding: as in `sparse_io.read_file`.
      max_line_bytes: a line longer than this (default 16 MiB) is a dead
        letter, read past without being held whole.
      dead_letters_path: if given, rejected records are written there as JSON
        Lines (`{"source", "line", "reason", "raw"}`; an empty file when none).
      error_budget: fail the pipeline when more than this fraction of all
        records is bad (None: never fail on bad records).
      with_dead_letters: return `(batches, dead_letters)` instead of batches,
        dead_letters a PCollection of `sparse_io.DeadLetter`.

    Metrics (namespace "sparseflow.ReadLogs"): files, records, bad_records,
    padded_records, batches.

    Raises: ValueError at construction for an unknown format or a bad
    argument; `ErrorBudgetExceeded` fails the run when over budget.

    Example:
      >>> import os, tempfile
      >>> work = tempfile.mkdtemp()
      >>> line = "\t".join(["1"] + ["2"] * 13 + ["05db9164"] * 26)
      >>> _ = open(os.path.join(work, "day_0.tsv"), "w").write(line + "\n" + line + "\nnot a criteo line\n")
      >>> from transforms.beam.runner import in_process_options
      >>> with beam.Pipeline(options=in_process_options()) as p:
      ...     batches = p | ReadLogs(os.path.join(work, "day_*.tsv"), "criteo", error_budget=0.5,
      ...                            dead_letters_path=os.path.join(work, "out", "errors.jsonl"))
      ...     rows = batches | beam.Map(lambda batch: batch.num_rows) | beam.CombineGlobally(sum)
      >>> len(open(os.path.join(work, "out", "errors.jsonl")).readlines())  # the bad line, with its reason
      1
    """

    def __init__(
        self,
        file_pattern: str | Sequence[str],
        format: str,
        schema: Schema | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        *,
        strict: bool = False,
        list_separator: str = "|",
        skip_header: bool | None = None,
        max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
        dead_letters_path: str | None = None,
        error_budget: float | None = 0.0,
        with_dead_letters: bool = False,
        delimiter: str | None = None,
        quote_char: str | None = None,
        null_values: Sequence[str] | None = None,
        feature_null_values: Mapping[str, Sequence[str]] | None = None,
        column_sources: Sequence[ColumnSource] | None = None,
        encoding: str | None = None,
    ):
        super().__init__()
        if format not in LOG_FORMATS:
            raise ValueError(f"ReadLogs: format {format!r} is not one of {LOG_FORMATS}")
        if schema is None:
            if format != "criteo":
                raise ValueError(f"ReadLogs: format {format!r} needs a schema")
            schema = criteo_schema()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"ReadLogs: batch_size must be a positive integer, got {batch_size!r}")
        if error_budget is not None and not 0.0 <= error_budget <= 1.0:
            raise ValueError(f"ReadLogs: error_budget must be a fraction in [0, 1], got {error_budget!r}")
        patterns = [file_pattern] if isinstance(file_pattern, (str, os.PathLike)) else list(file_pattern)
        if not patterns:
            raise ValueError("ReadLogs: no file pattern given")
        self._patterns = [self._as_glob(os.fspath(p)) for p in patterns]
        self._format = format
        self._schema = schema
        self._options = dict(
            batch_size=batch_size, strict=strict, list_separator=list_separator, skip_header=skip_header,
            max_line_bytes=max_line_bytes,
            delimiter=delimiter, quote_char=quote_char, null_values=null_values,
            feature_null_values=None if feature_null_values is None else dict(feature_null_values),
            column_sources=None if column_sources is None else tuple(column_sources), encoding=encoding,
        )
        self._dead_letters_path = dead_letters_path
        self._error_budget = error_budget
        self._with_dead_letters = with_dead_letters
        # Fail at construction on arguments read_file would reject at run time.
        from sparse_io.readers import _resolve

        _resolve(format, schema, batch_size, list_separator, max_line_bytes)
        layout = csv_options(format, delimiter, quote_char, null_values, feature_null_values, list_separator,
                             column_sources, encoding)
        check_sources(schema, layout.column_sources)

    @staticmethod
    def _as_glob(pattern: str) -> tuple[str, bool]:
        if FileSystems.get_scheme(pattern) is None and os.path.isdir(pattern):
            return os.path.join(pattern, "*"), True
        return pattern, any(c in pattern for c in "*?[")

    def expand(self, pbegin):
        matched = []
        for i, (pattern, filtered) in enumerate(self._patterns):
            files = (
                pbegin
                | f"Match{i}"
                >> fileio.MatchFiles(pattern, empty_match_treatment=fileio.EmptyMatchTreatment.DISALLOW)
                | f"Path{i}" >> beam.Map(lambda m: m.path)
            )
            if filtered:
                files = files | f"SkipHidden{i}" >> beam.Filter(_visible)
            matched.append(files)
        paths = matched[0] if len(matched) == 1 else tuple(matched) | "AllFiles" >> beam.Flatten()
        results = (
            paths
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadFile" >> self._read_files(_ReadFileFn(self._format, self._schema, self._options))
        )
        return self._outputs(results)

    @staticmethod
    def _read_files(read_fn: _ReadFileFn) -> beam.PTransform:
        """The tagged read step: batches, dead letters and per-file counts."""
        return beam.ParDo(read_fn).with_outputs(DEAD_LETTERS, _COUNTS, main="batches")

    def _outputs(self, results):
        """What the read step's outputs become: batches, the dead-letter file, the budget check."""
        batches = results.batches
        batches.element_type = pa.RecordBatch
        dead = results[DEAD_LETTERS]
        written = None
        if self._dead_letters_path:
            written = (
                dead
                | "DeadLetterJson" >> beam.Map(lambda d: json.dumps(d.to_dict(), ensure_ascii=False))
                | "WriteDeadLetters" >> WriteLineFile(self._dead_letters_path)
            )
        if self._error_budget is not None:
            budget = self._error_budget
            # The check waits for the dead letters to reach their final name (the sink's output, a side
            # input), so a run that fails over budget still leaves them there, not in Beam's temp directory.
            side = [] if written is None else [beam.pvalue.AsList(written)]
            results.batches.pipeline | "CheckErrorBudget" >> CallOnce(
                _check_budget, beam.pvalue.AsList(results[_COUNTS]), budget, *side
            )
        if self._with_dead_letters:
            return batches, dead
        return batches
