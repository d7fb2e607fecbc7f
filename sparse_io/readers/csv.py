r"""CSV/TSV logs: one column per schema column, id lists joined by a separator (`a|b|c`).

Columns are found by the header line when there is one (extra columns are
ignored), else taken in `schema.arrow_schema()` order (a weighted feature's
`f__weights` column right after `f`). Quoted fields follow the usual CSV
rules (any single-character delimiter; the quote character is `"` unless
chosen otherwise, and `""` inside quotes is one quote). A field equal to one
of the null tokens (by default only the empty field; for example `NA`,
`NULL`, `\N`), chosen for all columns or per feature, is a missing value:
an empty id list for a sparse feature, a null for a dense one. Integers
written as floats (`260.0`, as pandas writes them) are accepted for integer
features; `2.5` is not.

Each block of lines is parsed by `pyarrow.csv` in one call, all columns as
strings, then converted column by column (see `_convert`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from sparse_io.errors import HeaderError
from sparse_io.readers._convert import (
    RowProblems,
    empty_to_null,
    list_parts,
    np_mask,
    scalar_column,
    sparse_column,
    weights_column_values,
)
from sparse_io.schema import Schema, weights_column

__all__ = ["header_columns", "file_columns", "parse_csv_block", "describe_csv_failure"]


DEFAULT_NULL_VALUES = ("",)


def _parse_options(delimiter: str, quote_char: str) -> pcsv.ParseOptions:
    return pcsv.ParseOptions(
        delimiter=delimiter,
        quote_char=quote_char or False,
        double_quote=True,
        escape_char=False,
        newlines_in_values=False,
        ignore_empty_lines=False,
    )


def header_columns(line: bytes, delimiter: str, source: str, quote_char: str = '"') -> list[str]:
    """The column names in a header line.

    Raises:
      HeaderError: (a ValueError) the header is not UTF-8, or names a column twice.
    """
    try:
        line.decode("utf-8")
        names = pcsv.read_csv(
            pa.BufferReader(line.rstrip(b"\r") + b"\n"), parse_options=_parse_options(delimiter, quote_char)
        )
    except (UnicodeDecodeError, pa.ArrowInvalid) as e:
        raise HeaderError(source, f"cannot read the CSV header line: {e}") from None
    columns = names.column_names
    dupes = sorted({c for c in columns if columns.count(c) > 1})
    if dupes:
        raise HeaderError(source, f"the header names column(s) {dupes} more than once")
    return columns


def file_columns(schema: Schema, header: list[str] | None, source: str) -> list[str]:
    """Column names in file order: the header's, or the schema's when there is none.

    Raises:
      HeaderError: (a ValueError) the header lacks a column the schema needs.
    """
    needed = schema.arrow_schema().names
    if header is None:
        return needed
    missing = [c for c in needed if c not in header]
    if missing:
        raise HeaderError(source, f"the header lacks column(s) {missing} that the schema needs; it has {header}")
    return header


def describe_csv_failure(exc: Exception) -> str:
    """A reason for a single line that pyarrow.csv refused."""
    counts = re.search(r"Expected (\d+) columns, got (\d+)", str(exc))
    if counts:
        return f"expected {counts.group(1)} fields, got {counts.group(2)}"
    return f"unreadable CSV line: {exc}"


def _re2_char(c: str) -> str:
    """One character as an RE2 literal that is safe anywhere, character classes included."""
    return f"\\x{{{ord(c):x}}}"


def _unclosed_quotes(lines: pa.StringArray, delimiter: str, quote_char: str) -> np.ndarray:
    """Where a line ends inside a quoted field.

    pyarrow.csv would carry such a field on over the following lines (or
    accept it cut short at the end of the data), so the record must not
    reach it. The pattern follows pyarrow's rules: a field is quoted only
    when it starts with a quote, `""` inside quotes is one quote, and text
    after the closing quote up to the delimiter is kept as is.
    """
    if not quote_char:
        return np.zeros(len(lines), dtype=bool)
    quoted = np_mask(pc.match_substring(lines, quote_char), null_as=False)
    if not quoted.any():
        return quoted
    d, q = _re2_char(delimiter), _re2_char(quote_char)
    field = f"(?:{q}(?:[^{q}]|{q}{q})*{q}(?:[^{q}{d}][^{d}]*)?|[^{q}{d}][^{d}]*|)"
    closed = np_mask(pc.match_substring_regex(lines, f"^{field}(?:{d}{field})*$"), null_as=True)
    return quoted & ~closed


def _null_tokens(values: pa.Array, tokens: Sequence[str]) -> pa.Array:
    """Cells equal to one of `tokens` become null."""
    tokens = list(tokens)
    if tokens == [""]:
        return empty_to_null(values)  # the common case, without a hash lookup per cell
    if not tokens:
        return values
    hit = np_mask(pc.is_in(values, value_set=pa.array(tokens, pa.string())), null_as=False)
    if not hit.any():
        return values
    return pc.if_else(pa.array(~hit), values, pa.scalar(None, values.type))


def parse_csv_block(
    lines: pa.StringArray,
    schema: Schema,
    columns: list[str],
    *,
    delimiter: str,
    list_separator: str,
    quote_char: str = '"',
    null_values: Sequence[str] = DEFAULT_NULL_VALUES,
    feature_null_values: Mapping[str, Sequence[str]] | None = None,
) -> tuple[pa.RecordBatch, RowProblems]:
    """Parses CSV lines (no header) into a batch with `schema.arrow_schema()`; marks bad rows.

    A cell equal to one of `null_values` (or of `feature_null_values[name]`
    for that feature, and its weights column) is missing. The test is on the
    whole cell, after quotes are removed.

    Raises:
      pa.ArrowInvalid: a line pyarrow.csv cannot parse (wrong field count, ...):
        the caller isolates it.
    """
    n = len(lines)
    problems = RowProblems(n)
    unclosed = _unclosed_quotes(lines, delimiter, quote_char)
    if unclosed.any():
        problems.add(unclosed, lambda _: "a quoted field is not closed before the end of the line")
        lines = pc.if_else(pa.array(~unclosed), lines, pa.scalar(delimiter * (len(columns) - 1)))
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), lines), "\n")
    data = joined[0].as_buffer()
    needed = schema.arrow_schema().names
    table = pcsv.read_csv(
        pa.BufferReader(data),
        read_options=pcsv.ReadOptions(
            column_names=columns, use_threads=False, block_size=max(1 << 20, min(data.size + 1, 1 << 30))
        ),
        parse_options=_parse_options(delimiter, quote_char),
        convert_options=pcsv.ConvertOptions(
            column_types={c: pa.string() for c in needed},
            include_columns=needed,
            null_values=[],
            strings_can_be_null=False,
        ),
    )
    if table.num_rows != n:  # a carriage return inside a line ends a CSV record too
        raise ValueError(f"expected {n} CSV rows, parsed {table.num_rows} (a carriage return inside a line?)")
    feature_null_values = feature_null_values or {}

    def cells(column: str, feature: str) -> pa.Array:
        return _null_tokens(table.column(column).combine_chunks(), feature_null_values.get(feature, null_values))

    out = []
    for spec in schema:
        values = cells(spec.name, spec.name)
        if not spec.is_sparse:
            out.append(scalar_column(values, spec, problems, text=True))
            continue
        splits, elements = list_parts(pc.split_pattern(values, list_separator), spec)
        out.append(sparse_column(splits, elements, spec, problems, text=True))
        if spec.weighted:
            w_values = cells(weights_column(spec.name), spec.name)
            w_splits, w_elements = list_parts(pc.split_pattern(w_values, list_separator), spec)
            out.append(weights_column_values(w_splits, w_elements, splits, spec, problems, text=True))
    return pa.RecordBatch.from_arrays(out, schema=schema.arrow_schema()), problems
