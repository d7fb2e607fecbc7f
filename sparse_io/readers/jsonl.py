"""JSON Lines logs: one object per line, keys named after schema features.

A sparse feature's value may be a list of ids or a single id (a one-id
row); null or an absent key is an empty row. A weighted feature's weights
are a parallel list under `f__weights`. Dense and label values are numbers
(an absent or null dense value is missing; an absent label is a bad row).
Timestamps belong in int64 dense or label features: epoch numbers are kept
exactly, and ISO-8601 strings become seconds since the epoch. Keys not in
the schema are ignored.

Each block is parsed by `pyarrow.json` in one call with type inference.
Inference also types keys outside the schema, and fails on one whose values
mix types (`[1, "x"]`); such a block is read again one schema key at a time
with explicit types, the other keys skipped. A block whose lines disagree on
a schema key's type (a list in one line, a number in the next) still fails;
the caller then splits the block so each part is read on its own (see
`_blocks`).
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from sparse_io.readers._convert import (
    RowProblems,
    list_parts,
    scalar_column,
    scalar_parts,
    sparse_column,
    weights_column_values,
)
from sparse_io.schema import FeatureSpec, Schema, weights_column

__all__ = ["parse_jsonl_block", "describe_json_failure"]

_LIST_TYPES = (pa.ListType, pa.LargeListType, pa.FixedSizeListType)


def describe_json_failure(exc: Exception) -> str:
    """A reason for a single line that pyarrow.json refused or that had unusable types."""
    text = str(exc)
    if text.startswith("JSON parse error: "):
        return "invalid JSON: " + text[len("JSON parse error: ") :]
    return text


def _parts(column: pa.Array, spec: FeatureSpec):
    if isinstance(column.type, _LIST_TYPES):
        return list_parts(column, spec)
    return scalar_parts(column)


def _read(data: pa.Buffer, explicit: pa.Schema | None, unexpected: str = "infer") -> pa.Table:
    return pj.read_json(
        pa.BufferReader(data),
        read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, min(data.size + 1, 1 << 30))),
        parse_options=pj.ParseOptions(
            explicit_schema=explicit, newlines_in_values=False, unexpected_field_behavior=unexpected
        ),
    )


def _string_fields_read_as_timestamps(table: pa.Table, schema: Schema) -> pa.Schema | None:
    """Inference turns ISO-date-like strings into timestamps; string features must stay text."""
    fields = []
    for spec in schema:
        if spec.dtype != "string" or spec.name not in table.column_names:
            continue
        t = table.schema.field(spec.name).type
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            fields.append(pa.field(spec.name, pa.string()))
        elif isinstance(t, _LIST_TYPES) and (
            pa.types.is_timestamp(t.value_type) or pa.types.is_date(t.value_type)
        ):
            fields.append(pa.field(spec.name, pa.list_(pa.string())))
    return pa.schema(fields) if fields else None


def _keys(schema: Schema) -> dict[str, str]:
    """JSON key -> dtype of its values, for every column the schema reads."""
    keys = {}
    for spec in schema:
        keys[spec.name] = spec.dtype
        if spec.weighted:
            keys[weights_column(spec.name)] = "float32"
    return keys


def _candidates(dtype: str) -> list[pa.DataType]:
    """Explicit JSON types that can hold a value of `dtype`, single or listed, most exact first."""
    if dtype == "string":
        scalars = [pa.string(), pa.int64()]
    elif dtype == "float32":
        scalars = [pa.float64()]
    else:
        scalars = [pa.int64(), pa.float64(), pa.timestamp("s")]
    return scalars + [pa.list_(t) for t in scalars]


def _names_other_key(exc: Exception, keys: dict[str, str]) -> bool:
    found = re.search(r"Column\(/([^/)]*)", str(exc))
    return found is not None and found.group(1) not in keys


def _read_keys_one_by_one(data: pa.Buffer, keys: dict[str, str]) -> pa.Table:
    """Each schema key read alone with the first explicit type that fits; other keys skipped."""
    columns = {}
    for key, dtype in keys.items():
        for candidate in _candidates(dtype):
            try:
                columns[key] = _read(data, pa.schema([(key, candidate)]), "ignore").column(key)
                break
            except pa.ArrowInvalid:
                continue
        else:
            raise ValueError(f"{key}: values that cannot hold {dtype} (or lists mixed with single values)")
    return pa.table(columns)


def parse_jsonl_block(lines: pa.StringArray, schema: Schema) -> tuple[pa.RecordBatch, RowProblems]:
    """Parses JSON lines into a batch with `schema.arrow_schema()`; marks bad rows.

    Raises:
      pa.ArrowInvalid / ValueError: the block cannot be read as a whole (a
        malformed line, a key whose type changes between lines, a value of
        an unusable type): the caller isolates the offending lines.
    """
    n = len(lines)
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), lines), "\n")
    data = joined[0].as_buffer()
    keys = _keys(schema)
    try:
        table = _read(data, None)
    except pa.ArrowInvalid as e:
        if not _names_other_key(e, keys):
            raise
        table = _read_keys_one_by_one(data, keys)
    retyped = _string_fields_read_as_timestamps(table, schema)
    if retyped is not None:
        table = _read(data, retyped)
    if table.num_rows != n:
        raise ValueError(f"expected one JSON object per line: {n} lines gave {table.num_rows} rows")

    def column(name: str) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(n)
        return table.column(name).combine_chunks()

    problems = RowProblems(n)
    out = []
    for spec in schema:
        if not spec.is_sparse:
            out.append(scalar_column(column(spec.name), spec, problems, text=False))
            continue
        splits, elements = _parts(column(spec.name), spec)
        out.append(sparse_column(splits, elements, spec, problems, text=False))
        if spec.weighted:
            w_splits, w_elements = _parts(column(weights_column(spec.name)), spec)
            out.append(weights_column_values(w_splits, w_elements, splits, spec, problems, text=False))
    return pa.RecordBatch.from_arrays(out, schema=schema.arrow_schema()), problems
