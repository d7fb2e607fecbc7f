"""Parquet logs: list columns map straight to id lists, scalar columns to dense/label values.

The file must hold every column of `schema.arrow_schema()` (others are
ignored). Compatible types are converted (list<int32> ids to list<int64>,
float64 to float32, a scalar id column to one-id rows); a column whose type
cannot hold the feature (a list for a label, strings for numbers, structs)
is a `ValueError` naming the file and the column. Values that are wrong in
a given row (a null label, a negative id, a non-integral float for an
integer) make that row a dead letter, numbered from 1.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from sparse_io.dead_letters import DeadLetter, DeadLetterSink, truncate_raw
from sparse_io.errors import damage_is_corruption
from sparse_io.readers._convert import (
    ColumnTypeError,
    RowProblems,
    list_parts,
    scalar_column,
    scalar_parts,
    sparse_column,
    weights_column_values,
)
from sparse_io.readers._source import is_local, open_binary
from sparse_io.schema import FeatureSpec, Schema, weights_column

__all__ = ["read_parquet_log"]

_LIST_TYPES = (pa.ListType, pa.LargeListType, pa.FixedSizeListType)


def _parts(column: pa.Array, spec: FeatureSpec):
    if isinstance(column.type, _LIST_TYPES):
        return list_parts(column, spec)
    return scalar_parts(column)


def _convert_batch(batch: pa.RecordBatch, schema: Schema) -> tuple[pa.RecordBatch, RowProblems]:
    problems = RowProblems(batch.num_rows)
    out = []
    for spec in schema:
        column = batch.column(spec.name)
        if not spec.is_sparse:
            out.append(scalar_column(column, spec, problems, text=False))
            continue
        splits, elements = _parts(column, spec)
        out.append(sparse_column(splits, elements, spec, problems, text=False))
        if spec.weighted:
            w_splits, w_elements = _parts(batch.column(weights_column(spec.name)), spec)
            out.append(weights_column_values(w_splits, w_elements, splits, spec, problems, text=False))
    return pa.RecordBatch.from_arrays(out, schema=schema.arrow_schema()), problems


def _raw_row(batch: pa.RecordBatch, row: int) -> str:
    return truncate_raw(json.dumps(batch.slice(row, 1).to_pylist()[0], default=str))


def _check_types(parquet: pq.ParquetFile, schema: Schema, path: str) -> None:
    """Refuses a file whose column types cannot hold the features, even when it holds no rows."""
    file_schema = parquet.schema_arrow
    needed = schema.arrow_schema().names
    missing = [c for c in needed if c not in file_schema.names]
    if missing:
        raise ValueError(f"{path}: Parquet file lacks column(s) {missing}; it has {file_schema.names}")
    empty = pa.RecordBatch.from_pylist([], schema=pa.schema([file_schema.field(c) for c in needed]))
    try:
        _convert_batch(empty, schema)
    except ColumnTypeError as e:
        raise ValueError(f"{path}: column {e}") from None


def read_parquet_log(
    path: str, schema: Schema, *, batch_size: int, sink: DeadLetterSink
) -> Iterator[pa.RecordBatch]:
    """Streams `path` in batches of at most `batch_size` rows with `schema.arrow_schema()`.

    Page checksums are verified where the file has them.

    Raises:
      ValueError: a needed column is absent or has an unusable type.
      CorruptFileError: the file is truncated, corrupted or not Parquet.
    """
    with contextlib.ExitStack() as stack:
        source = path if is_local(path) else stack.enter_context(open_binary(path))
        with damage_is_corruption(path, "Parquet"):
            parquet = pq.ParquetFile(source, page_checksum_verification=True)
        stack.enter_context(contextlib.closing(parquet))
        _check_types(parquet, schema, path)
        batches = _batches(parquet, batch_size, schema.arrow_schema().names)
        first_row = 1
        while True:
            with damage_is_corruption(path, "Parquet"):
                batch = next(batches, None)
            if batch is None:
                break
            sink.count_records(batch.num_rows)
            out, problems = _convert_batch(batch, schema)
            for row, reason in sorted(problems.reasons.items()):
                sink.add(DeadLetter(path, first_row + row, reason, _raw_row(batch, row)))
            if problems.bad.any():
                out = out.filter(pa.array(~problems.bad))
            first_row += batch.num_rows
            if out.num_rows:
                yield out


def _batches(parquet: pq.ParquetFile, batch_size: int, columns: list[str]):
    """The file's record batches of `columns`, at most `batch_size` rows each.

    pyarrow cannot put a list of dictionary-encoded values from two row groups into one batch ("Nested data
    conversions not implemented for chunked array outputs"), so a file with such a column is read a row group
    at a time: its batches end at row-group boundaries.
    """
    wanted = [parquet.schema_arrow.field(name).type for name in columns if name in parquet.schema_arrow.names]
    if not any(_nested_dictionary(t) for t in wanted):
        yield from parquet.iter_batches(batch_size=batch_size, columns=columns, use_threads=False)
        return
    for group in range(parquet.num_row_groups):
        yield from parquet.iter_batches(batch_size=batch_size, columns=columns, row_groups=[group], use_threads=False)


def _nested_dictionary(arrow_type: pa.DataType) -> bool:
    """Whether a dictionary type sits inside a list or struct of `arrow_type`."""
    children = [arrow_type.field(i).type for i in range(arrow_type.num_fields)] if arrow_type.num_fields else []
    return any(pa.types.is_dictionary(c) or _nested_dictionary(c) for c in children)

