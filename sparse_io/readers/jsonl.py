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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from sparse_io.readers._convert import (
    RowProblems,
    list_parts,
    np_mask,
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
        keys[spec.name] = "timestamp" if spec.time_unit is not None else spec.dtype
        if spec.weighted:
            keys[weights_column(spec.name)] = "float32"
    return keys


def _candidates(dtype: str) -> list[pa.DataType]:
    """Explicit JSON types that can hold a value of `dtype`, single or listed, most exact first."""
    if dtype == "string":
        scalars = [pa.string(), pa.int64()]
    elif dtype in ("float32", "float64"):
        scalars = [pa.float64()]
    elif dtype == "timestamp":  # unix numbers, or ISO-8601 text the timestamp parser reads
        scalars = [pa.int64(), pa.float64(), pa.string()]
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


def _float_values(column: pa.ChunkedArray) -> np.ndarray:
    values = column.combine_chunks()
    if isinstance(values.type, _LIST_TYPES):
        values = values.flatten()
    return np_mask(values, null_as=0.0)


def _exact_integers(data: pa.Buffer, table: pa.Table, keys: dict[str, str]) -> pa.Table:
    """`table` with integer keys that were read as doubles read again as integers where that is exact.

    One float literal (or one number beyond int64) for a key makes inference
    read the whole block's key as doubles, which rounds integers beyond 2**53.
    Such a key is read again with int64 types; when some value really is not
    an integer literal, the doubles are kept, unless one of them is an
    integral value of magnitude 2**53 to 2**63, which may have been rounded:
    then ValueError, and the caller reads the lines one by one.
    """
    for key, dtype in keys.items():
        if dtype not in ("int64", "int32") or key not in table.column_names:
            continue
        found = table.schema.field(key).type
        listed = isinstance(found, _LIST_TYPES)
        if not pa.types.is_floating(found.value_type if listed else found):
            continue
        exact_type = pa.list_(pa.int64()) if listed else pa.int64()
        try:
            exact = _read(data, pa.schema([(key, exact_type)]), "ignore").column(key)
        except pa.ArrowInvalid:
            values = _float_values(table.column(key))
            with np.errstate(invalid="ignore"):
                rounded = (np.abs(values) >= 2.0**53) & (np.abs(values) <= 2.0**63) & (np.floor(values) == values)
            if rounded.any():
                raise ValueError(
                    f"{key}: {values[rounded][0]:.17g} is an integer too large to be read exactly from a JSON "
                    "number with a fraction or exponent (2**53 or more); write it as an integer literal"
                ) from None
            continue
        table = table.set_column(table.column_names.index(key), key, exact)
    return table


def _objects_only(lines: pa.StringArray, problems: RowProblems) -> pa.StringArray:
    """Lines that are not JSON objects marked bad and replaced by `{}`.

    pyarrow.json reads a bare `null` line as a row of nulls, and crashes the
    process on a block that starts with one, so such lines never reach it.
    """
    not_object = ~np_mask(pc.match_substring_regex(lines, r"^[ \t\r]*\{"), null_as=False)
    if not not_object.any():
        return lines
    problems.add(not_object, lambda _: "invalid JSON: a line must hold one JSON object")
    return pc.if_else(pa.array(~not_object), lines, pa.scalar("{}"))


def parse_jsonl_block(lines: pa.StringArray, schema: Schema) -> tuple[pa.RecordBatch, RowProblems]:
    """Parses JSON lines into a batch with `schema.arrow_schema()`; marks bad rows.

    Raises:
      pa.ArrowInvalid / ValueError: the block cannot be read as a whole (a
        malformed line, a key whose type changes between lines, a value of
        an unusable type): the caller isolates the offending lines.
    """
    n = len(lines)
    problems = RowProblems(n)
    lines = _objects_only(lines, problems)
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
    table = _exact_integers(data, table, keys)

    def column(name: str) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(n)
        return table.column(name).combine_chunks()

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
