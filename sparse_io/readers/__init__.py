"""Reading recommendation logs into bounded Arrow record batches.

`read_logs` streams every file matching a pattern; `read_file` reads one
file (what a Beam worker calls per file). Both yield `pa.RecordBatch`es
with exactly `schema.arrow_schema()` and at most `batch_size` rows each,
holding one block of input in memory at a time. Records that cannot be read
go to a `DeadLetterSink` instead of stopping the read.

Formats: "criteo" (headerless TSV of the Criteo display-advertising layout),
"csv" and "tsv" (header or schema column order, id lists joined by
`list_separator`; "tsv" is "csv" with a tab; "csv" takes any one-character
`delimiter` and `quote_char`, and `null_values` tokens that mean missing),
"jsonl" and "parquet". `LOG_FORMATS` (defined in `sparse_io.formats`) is the one list of
these names that every entry point (config, CLI, Beam, tf.data) accepts. Text files may be gzip (.gz),
zstd (.zst, .zstd) or bzip2 (.bz2) compressed, on any file system Beam's
`FileSystems` knows (gs:// included); a truncated or damaged compressed file
raises `CorruptFileError` naming it (whatever the error budget: the records
it lost cannot be counted). Text may be in any ASCII-compatible encoding
(`encoding`, default UTF-8). In "csv"/"tsv", `column_sources`
(`sparse_io.readers.columns`) read a feature from another column, from
several columns as one id list, or derive a label from a column's value.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa

from sparse_io.dead_letters import DeadLetter, DeadLetterSink
from sparse_io.errors import LayoutError
from sparse_io.formats import DELIMITED_FORMATS, LOG_FORMATS
from sparse_io.readers._blocks import parse_lines
from sparse_io.readers._encoding import DEFAULT_ENCODING, check_encoding, transcode_blocks
from sparse_io.readers._line_limit import LongLine
from sparse_io.readers._source import (
    DEFAULT_MAX_LINE_BYTES,
    expand_paths,
    iter_byte_blocks,
    open_binary,
    split_lines,
)
from sparse_io.readers.columns import ColumnRange, ColumnSource, check_sources, plan_columns
from sparse_io.readers.criteo import check_criteo_schema, parse_criteo_block, parse_criteo_bytes
from sparse_io.readers.csv import (
    DEFAULT_NULL_VALUES,
    describe_csv_failure,
    file_columns,
    header_columns,
    parse_csv_block,
)
from sparse_io.readers.jsonl import describe_json_failure, parse_jsonl_block
from sparse_io.readers.parquet import read_parquet_log
from sparse_io.schema import Schema, criteo_schema

__all__ = [
    "DEFAULT_MAX_LINE_BYTES", "LOG_FORMATS", "FORMATS", "DELIMITED_FORMATS", "CsvOptions", "csv_options", "read_file",
    "read_logs", "ColumnRange", "ColumnSource", "check_encoding",
]

FORMATS = LOG_FORMATS  # the older name of the same tuple
_DELIMITERS = {"csv": ",", "tsv": "\t"}


@dataclasses.dataclass(frozen=True)
class CsvOptions:
    """How a "csv"/"tsv" file is laid out (see `csv_options`)."""

    delimiter: str = ","
    quote_char: str = '"'
    null_values: tuple[str, ...] = DEFAULT_NULL_VALUES
    feature_null_values: tuple[tuple[str, tuple[str, ...]], ...] = ()
    column_sources: tuple[ColumnSource, ...] = ()
    encoding: str = DEFAULT_ENCODING


def csv_options(
    format: str,
    delimiter: str | None = None,
    quote_char: str | None = None,
    null_values: Sequence[str] | None = None,
    feature_null_values: Mapping[str, Sequence[str]] | None = None,
    list_separator: str = "|",
    column_sources: Sequence[ColumnSource] | None = None,
    encoding: str | None = None,
) -> CsvOptions:
    """Checks the layout options of a log; None means the format's default.

    `column_sources` are checked against the schema by `check_sources`
    (`read_file` does), `encoding` by `check_encoding`.

    Raises:
      ValueError: naming the option: a delimiter or quote that is not one
        character (or clashes with the other, the list separator or a line
        end), "tsv" with a delimiter other than a tab, layout options or
        column sources for a format that is not "csv"/"tsv", null tokens that
        are not strings, an encoding that is not a usable text codec or one
        for "parquet".
    """
    given = delimiter is not None or quote_char is not None or null_values is not None or feature_null_values
    encoding = DEFAULT_ENCODING if encoding is None else check_encoding(encoding)
    if format == "parquet" and encoding != DEFAULT_ENCODING:
        raise ValueError("encoding applies to text formats, not 'parquet'")
    if format not in DELIMITED_FORMATS:
        if given:
            raise ValueError(f"delimiter, quote_char and null_values apply to {DELIMITED_FORMATS}, not {format!r}")
        if column_sources:
            raise ValueError(f"column sources (column, columns, from) apply to {DELIMITED_FORMATS}, not {format!r}")
        return CsvOptions(delimiter=_DELIMITERS.get(format, "\t"), encoding=encoding)
    if format == "tsv" and delimiter not in (None, "\t"):
        raise ValueError(f"format 'tsv' means delimiter '\\t', got delimiter {delimiter!r}; use format 'csv'")
    delimiter = _DELIMITERS[format] if delimiter is None else delimiter
    quote_char = '"' if quote_char is None else quote_char
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n":
        raise ValueError(f"delimiter must be one character other than a line end, got {delimiter!r}")
    if not isinstance(quote_char, str) or len(quote_char) > 1 or quote_char in ("\r", "\n"):
        raise ValueError(f"quote_char must be one character (or '' for none), got {quote_char!r}")
    if delimiter == quote_char:
        raise ValueError(f"delimiter and quote_char are both {delimiter!r}")
    if list_separator in (delimiter, quote_char):
        raise ValueError(
            f"list_separator {list_separator!r} cannot separate ids: it is also the delimiter or the quote character"
        )

    def tokens(values, what) -> tuple[str, ...]:
        if isinstance(values, str) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"{what} must be a list of strings, got {values!r}")
        return tuple(values)

    return CsvOptions(
        delimiter=delimiter,
        quote_char=quote_char,
        null_values=DEFAULT_NULL_VALUES if null_values is None else tokens(null_values, "null_values"),
        feature_null_values=tuple(
            (name, tokens(values, f"null_values of {name!r}")) for name, values in (feature_null_values or {}).items()
        ),
        column_sources=tuple(column_sources or ()),
        encoding=encoding,
    )


def _resolve(
    format: str, schema: Schema | None, batch_size: int, list_separator: str, max_line_bytes: int | None = None
) -> Schema:
    if format not in LOG_FORMATS:
        raise ValueError(f"format {format!r} is not one of {LOG_FORMATS}")
    if max_line_bytes is not None and (
        isinstance(max_line_bytes, bool) or not isinstance(max_line_bytes, int) or max_line_bytes <= 0
    ):
        raise ValueError(f"max_line_bytes must be a positive integer or None, got {max_line_bytes!r}")
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    # Clashes with a chosen delimiter or quote character are checked by `csv_options`.
    quote = format not in DELIMITED_FORMATS and list_separator == '"'
    if not list_separator or list_separator in ("\n", "\r") or quote:
        raise ValueError(f"list_separator {list_separator!r} cannot separate ids in format {format!r}")
    if schema is None:
        if format != "criteo":
            raise ValueError(f"format {format!r} needs a schema")
        schema = criteo_schema()
    if not isinstance(schema, Schema):
        raise TypeError(f"schema must be a sparse_io.Schema, got {type(schema).__name__}")
    if format == "criteo":
        check_criteo_schema(schema)
    return schema


def read_file(
    path: str,
    format: str,
    schema: Schema | None = None,
    *,
    batch_size: int = 8192,
    strict: bool = False,
    list_separator: str = "|",
    skip_header: bool | None = None,
    dead_letters: DeadLetterSink | None = None,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
    delimiter: str | None = None,
    quote_char: str | None = None,
    null_values: Sequence[str] | None = None,
    feature_null_values: Mapping[str, Sequence[str]] | None = None,
    column_sources: Sequence[ColumnSource] | None = None,
    encoding: str | None = None,
) -> Iterator[pa.RecordBatch]:
    r"""Streams one log file as record batches with `schema.arrow_schema()`.

    Args:
      path: a local path or any URL Beam's FileSystems can open.
      format: one of `LOG_FORMATS`.
      schema: what to read; defaults to `criteo_schema()` for "criteo",
        required otherwise.
      batch_size: most rows per batch (and lines held in memory at once).
      strict: "criteo" only: a line short of trailing fields is a dead
        letter instead of a row with those fields missing.
      list_separator: joins the ids of one field in "csv"/"tsv".
      skip_header: whether line 1 is a header (not a record). Default: True
        for "csv"/"tsv" (the header names the columns), False otherwise.
      dead_letters: receives bad records and the record count. When None,
        any bad record raises `ErrorBudgetExceeded` after the file is read.
      max_line_bytes: text formats: a line longer than this (without its
        "\n") is a dead letter whose reason gives its length and the limit;
        it is read past in chunks, never held whole (default 16 MiB; None:
        no limit).
      delimiter: "csv" only: the field delimiter, any one character
        (default ","; "tsv" is always a tab).
      quote_char: "csv"/"tsv": the quote character (default '"'; "" for
        none).
      null_values: "csv"/"tsv": cells that mean missing (default `[""]`);
        a sparse feature's missing cell is an empty id list, a dense one's
        a null (NaN in tf.data), never a dead letter (a missing label is).
      feature_null_values: per feature, tokens that replace `null_values`.
      column_sources: "csv"/"tsv": `ColumnSource`s of features read from
        another header column (`column`), from several columns as one id list
        (`columns`, with `padding` and `mask`), or derived labels
        (`label_from`); see `sparse_io.readers.columns`.
      encoding: text formats: the file's character encoding, any Python
        codec that writes line ends as the bytes "\n" and "\r" (default
        "utf-8"); a line it cannot decode is a dead letter naming the byte.

    Raises:
      ValueError: bad arguments, a Parquet file lacking a needed column, a
        Parquet column of an unusable type.
      LayoutError: a CSV header lacking a needed column or repeating one a
        feature reads by its name, column sources that do not fit the file.
      FileNotFoundError: `path` does not exist.
      CorruptFileError: a compressed file is truncated or damaged (raised
        where the damage is found, after the batches before it).
      ErrorBudgetExceeded: see `dead_letters`.

    Example:
      >>> import os, tempfile
      >>> path = os.path.join(tempfile.mkdtemp(), "day0.tsv")  # one Criteo line: label, 13 counts, 26 ids
      >>> _ = open(path, "w").write("\t".join(["1"] + ["3"] * 13 + ["05db9164"] * 26) + "\n")
      >>> for batch in read_file(path, "criteo", batch_size=4096):
      ...     print(batch.num_rows, batch.column("label").to_pylist())
      1 [1]
    """
    schema = _resolve(format, schema, batch_size, list_separator, max_line_bytes)
    layout = csv_options(format, delimiter, quote_char, null_values, feature_null_values, list_separator,
                         column_sources, encoding)
    check_sources(schema, layout.column_sources)
    return _read_file(
        path, format, schema, batch_size, strict, list_separator, skip_header, dead_letters, layout, max_line_bytes
    )


def _read_file(
    path, format, schema, batch_size, strict, list_separator, skip_header, dead_letters, layout, max_line_bytes
):
    sink = dead_letters if dead_letters is not None else DeadLetterSink()
    if format == "parquet":
        yield from read_parquet_log(path, schema, batch_size=batch_size, sink=sink)
    else:
        yield from _read_text(
            path, format, schema, batch_size, strict, list_separator, skip_header, sink, layout, max_line_bytes
        )
    if dead_letters is None:
        sink.check_budget(0.0)


def _long_line_letter(path: str, long: LongLine) -> DeadLetter:
    return DeadLetter(path, long.line, long.reason, long.raw)


def _read_text(path, format, schema, batch_size, strict, list_separator, skip_header, sink, layout, max_line_bytes):
    delimiter = layout.delimiter if format in DELIMITED_FORMATS else None
    has_header = skip_header if skip_header is not None else delimiter is not None
    with open_binary(path) as stream:
        blocks: Iterator = iter_byte_blocks(stream, batch_size, max_line_bytes=max_line_bytes)
        if layout.encoding != DEFAULT_ENCODING:
            blocks = transcode_blocks(blocks, layout.encoding, path)
        header, first_lines = None, []
        if has_header:
            first = next(blocks, None)
            if first is None:
                return
            if isinstance(first, LongLine):
                raise LayoutError(path, f"the header line is {first.reason}")
            if isinstance(first, DeadLetter):
                raise LayoutError(path, f"the header line {first.reason}")
            first_line, lines = first[0], split_lines(first[1])
            header = lines[0].as_py()
            first_lines = [(first_line + 1, lines.slice(1))] if len(lines) > 1 else []
        fast = None
        describe: Callable[[Exception], str]
        if format == "criteo":
            parse, describe = functools.partial(parse_criteo_block, schema=schema, strict=strict), str
            fast = functools.partial(parse_criteo_bytes, schema=schema)
        elif format == "jsonl":
            parse, describe = functools.partial(parse_jsonl_block, schema=schema), describe_json_failure
        else:
            names = header_columns(header, layout.delimiter, path, layout.quote_char) if header is not None else None
            plan = None
            if layout.column_sources or (names is not None and len(set(names)) < len(names)):
                plan = plan_columns(schema, layout.column_sources, names, path)  # fields found by position
            parse = functools.partial(
                parse_csv_block,
                schema=schema,
                columns=file_columns(schema, names, path) if plan is None else plan.field_names,
                plan=plan,
                delimiter=layout.delimiter,
                list_separator=list_separator,
                quote_char=layout.quote_char,
                null_values=layout.null_values,
                feature_null_values=dict(layout.feature_null_values),
            )
            describe = describe_csv_failure

        def general(first_line, lines):
            return parse_lines(lines, first_line, parse, source=path, sink=sink, describe_failure=describe)

        for first_line, lines in first_lines:
            batch = general(first_line, lines)
            if batch is not None:
                yield batch
        for item in blocks:
            if isinstance(item, (LongLine, DeadLetter)):
                sink.count_records(1)
                sink.add(_long_line_letter(path, item) if isinstance(item, LongLine) else item)
                continue
            first_line, data = item
            # A block of only good records takes the one-pass parser; any other block the general one.
            batch = fast(data) if fast is not None else None
            if batch is not None:
                sink.count_records(batch.num_rows)
            else:
                batch = general(first_line, split_lines(data))
            if batch is not None:
                yield batch


def read_logs(
    pattern: str | Sequence[str],
    format: str,
    schema: Schema | None = None,
    *,
    batch_size: int = 8192,
    strict: bool = False,
    errors: DeadLetterSink | None = None,
    error_budget: float = 0.0,
    list_separator: str = "|",
    skip_header: bool | None = None,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
    delimiter: str | None = None,
    quote_char: str | None = None,
    null_values: Sequence[str] | None = None,
    feature_null_values: Mapping[str, Sequence[str]] | None = None,
    column_sources: Sequence[ColumnSource] | None = None,
    encoding: str | None = None,
) -> Iterator[pa.RecordBatch]:
    r"""Streams every file matching `pattern` (sorted) as record batches; see `read_file`.

    Args:
      pattern: a path, glob, directory or list of them (local or a URL).
      errors: a `DeadLetterSink` to collect bad records into (then write
        them with `errors.write_jsonl(path)`); a private one when None.
      error_budget: allowed fraction of bad records over all files.
      format: as in `read_file`.
      schema: as in `read_file`.
      batch_size: as in `read_file`.
      strict: as in `read_file`.
      list_separator: as in `read_file`.
      skip_header: as in `read_file`.
      max_line_bytes: as in `read_file`.
      delimiter: as in `read_file`.
      quote_char: as in `read_file`.
      null_values: as in `read_file`.
      feature_null_values: as in `read_file`.
      column_sources: as in `read_file`.
      encoding: as in `read_file`.

    Raises:
      ErrorBudgetExceeded: once every file is read, if the fraction of bad
        records in `errors` exceeds `error_budget`; the message gives the
        count, the fraction and the first reasons.
      FileNotFoundError: a pattern matches nothing.
      ValueError: as in `read_file`.

    Example:
      >>> import os, tempfile
      >>> logs = tempfile.mkdtemp()
      >>> good = "\t".join(["0"] + ["1"] * 13 + ["68fd1e64"] * 26)
      >>> _ = open(os.path.join(logs, "day0.tsv"), "w").write(good + "\n" + good + "\nnot a criteo line\n")
      >>> sink = DeadLetterSink()
      >>> sum(b.num_rows for b in read_logs(os.path.join(logs, "*.tsv"), "criteo", errors=sink, error_budget=0.5))
      2
      >>> sink.bad
      1
    """
    schema = _resolve(format, schema, batch_size, list_separator, max_line_bytes)
    layout = csv_options(format, delimiter, quote_char, null_values, feature_null_values, list_separator,
                         column_sources, encoding)
    check_sources(schema, layout.column_sources)
    if not 0.0 <= error_budget <= 1.0:
        raise ValueError(f"error_budget must be a fraction in [0, 1], got {error_budget!r}")
    paths = expand_paths(pattern)
    return _read_logs(
        paths, format, schema, batch_size, strict, errors, error_budget, list_separator, skip_header, layout,
        max_line_bytes,
    )


def _read_logs(
    paths, format, schema, batch_size, strict, errors, error_budget, list_separator, skip_header, layout, max_line_bytes
):
    sink = errors if errors is not None else DeadLetterSink()
    for path in paths:
        yield from _read_file(
            path, format, schema, batch_size, strict, list_separator, skip_header, sink, layout, max_line_bytes
        )
    sink.check_budget(error_budget)
