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


def read_parquet_log(
    path: str, schema: Schema, *, batch_size: int, sink: DeadLetterSink
) -> Iterator[pa.RecordBatch]:
    """Streams `path` in batches of at most `batch_size` rows with `schema.arrow_schema()`.

    Raises:
      ValueError: a needed column is absent or has an unusable type.
    """
    with contextlib.nullcontext() if is_local(path) else open_binary(path) as stream:
        parquet = pq.ParquetFile(stream if stream is not None else path)
        needed = schema.arrow_schema().names
        missing = [c for c in needed if c not in parquet.schema_arrow.names]
        if missing:
            raise ValueError(
                f"{path}: Parquet file lacks column(s) {missing}; it has {parquet.schema_arrow.names}"
            )
        first_row = 1
        for batch in parquet.iter_batches(batch_size=batch_size, columns=needed, use_threads=False):
            sink.count_records(batch.num_rows)
            try:
                out, problems = _convert_batch(batch, schema)
            except ColumnTypeError as e:
                raise ValueError(f"{path}: column {e}") from None
            for row, reason in sorted(problems.reasons.items()):
                sink.add(DeadLetter(path, first_row + row, reason, _raw_row(batch, row)))
            if problems.bad.any():
                out = out.filter(pa.array(~problems.bad))
            first_row += batch.num_rows
            if out.num_rows:
                yield out
