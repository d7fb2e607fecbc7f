"""CSV/TSV logs: one column per schema column, id lists joined by a separator (`a|b|c`).

Columns are found by the header line when there is one (extra columns are
ignored), else taken in `schema.arrow_schema()` order (a weighted feature's
`f__weights` column right after `f`). Quoted fields follow the usual CSV
rules; an empty field is a missing value (an empty id list for a sparse
feature). Integers written as floats (`260.0`, as pandas writes them) are
accepted for integer features; `2.5` is not.

Each block of lines is parsed by `pyarrow.csv` in one call, all columns as
strings, then converted column by column (see `_convert`).
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from sparse_io.readers._convert import (
    RowProblems,
    empty_to_null,
    list_parts,
    scalar_column,
    sparse_column,
    weights_column_values,
)
from sparse_io.schema import Schema, weights_column

__all__ = ["header_columns", "file_columns", "parse_csv_block", "describe_csv_failure"]


def _parse_options(delimiter: str) -> pcsv.ParseOptions:
    return pcsv.ParseOptions(
        delimiter=delimiter,
        quote_char='"',
        double_quote=True,
        escape_char=False,
        newlines_in_values=False,
        ignore_empty_lines=False,
    )


def header_columns(line: bytes, delimiter: str, source: str) -> list[str]:
    """The column names in a header line.

    Raises:
      ValueError: the header is not UTF-8, or names a column twice.
    """
    try:
        line.decode("utf-8")
        names = pcsv.read_csv(
            pa.BufferReader(line.rstrip(b"\r") + b"\n"), parse_options=_parse_options(delimiter)
        )
    except (UnicodeDecodeError, pa.ArrowInvalid) as e:
        raise ValueError(f"{source}: cannot read the CSV header line: {e}") from None
    columns = names.column_names
    dupes = sorted({c for c in columns if columns.count(c) > 1})
    if dupes:
        raise ValueError(f"{source}: the header names column(s) {dupes} more than once")
    return columns


def file_columns(schema: Schema, header: list[str] | None, source: str) -> list[str]:
    """Column names in file order: the header's, or the schema's when there is none.

    Raises:
      ValueError: the header lacks a column the schema needs.
    """
    needed = schema.arrow_schema().names
    if header is None:
        return needed
    missing = [c for c in needed if c not in header]
    if missing:
        raise ValueError(
            f"{source}: the header lacks column(s) {missing} that the schema needs; it has {header}"
        )
    return header


def describe_csv_failure(exc: Exception) -> str:
    """A reason for a single line that pyarrow.csv refused."""
    counts = re.search(r"Expected (\d+) columns, got (\d+)", str(exc))
    if counts:
        return f"expected {counts.group(1)} fields, got {counts.group(2)}"
    return f"unreadable CSV line: {exc}"


def parse_csv_block(
    lines: pa.StringArray,
    schema: Schema,
    columns: list[str],
    *,
    delimiter: str,
    list_separator: str,
) -> tuple[pa.RecordBatch, RowProblems]:
    """Parses CSV lines (no header) into a batch with `schema.arrow_schema()`; marks bad rows.

    Raises:
      pa.ArrowInvalid: a line pyarrow.csv cannot parse (wrong field count, ...):
        the caller isolates it.
    """
    n = len(lines)
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), lines), "\n")
    data = joined[0].as_buffer()
    needed = schema.arrow_schema().names
    table = pcsv.read_csv(
        pa.BufferReader(data),
        read_options=pcsv.ReadOptions(
            column_names=columns, use_threads=False, block_size=max(1 << 20, min(data.size + 1, 1 << 30))
        ),
        parse_options=_parse_options(delimiter),
        convert_options=pcsv.ConvertOptions(
            column_types={c: pa.string() for c in needed},
            include_columns=needed,
            null_values=[""],
            strings_can_be_null=True,
        ),
    )
    if table.num_rows != n:
        raise ValueError(f"expected {n} CSV rows, parsed {table.num_rows}")
    problems = RowProblems(n)
    out = []
    for spec in schema:
        values = empty_to_null(table.column(spec.name).combine_chunks())
        if not spec.is_sparse:
            out.append(scalar_column(values, spec, problems, text=True))
            continue
        splits, elements = list_parts(pc.split_pattern(values, list_separator), spec)
        out.append(sparse_column(splits, elements, spec, problems, text=True))
        if spec.weighted:
            w_values = empty_to_null(table.column(weights_column(spec.name)).combine_chunks())
            w_splits, w_elements = list_parts(pc.split_pattern(w_values, list_separator), spec)
            out.append(weights_column_values(w_splits, w_elements, splits, spec, problems, text=True))
    return pa.RecordBatch.from_arrays(out, schema=schema.arrow_schema()), problems
