"""The check that a Parquet shard holds the columns a read needs, with the Arrow types it needs."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from transforms.tfdata.core.columns import Column

__all__ = ["check_arrow_schema"]


def _arrow_kind(t: pa.DataType) -> str:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = t.value_type
        if pa.types.is_int64(inner):
            return "list<int64>"
        if pa.types.is_int32(inner):
            return "list<int32>"
        if pa.types.is_string(inner) or pa.types.is_large_string(inner):
            return "list<string>"
        if pa.types.is_floating(inner):
            return "list<float>"
        return f"list<{inner}>"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return "number"
    return str(t)


def check_arrow_schema(path: str, arrow_schema: pa.Schema, columns: Sequence[Column], label: Column | None) -> None:
    """Checks a shard's Arrow schema against the columns to read.

    A sparse feature needs a list column of its id type (int64, int32, or
    string for string ids), a weighted one also `<name>__weights` as a list
    of floats; a dense feature and the label need a number column, as does
    the source of a feature derived at read.

    Raises:
      ValueError: naming the file and column, when a column is missing or
        has another type.
    """
    names = set(arrow_schema.names)
    expected = []
    for c in columns:
        if c.derived is not None:  # computed from its source column as the unit is read
            expected.append((c.derived.source, "number"))
        elif c.is_sparse:
            expected.append((c.name, {"int64": "list<int64>", "int32": "list<int32>"}.get(c.dtype, "list<string>")))
            if c.weighted:
                expected.append((c.weights_name, "list<float>"))
        else:
            expected.append((c.name, "number"))
    if label is not None:
        expected.append((label.name, "number"))
    for name, kind in expected:
        if name not in names:
            raise ValueError(f"{path}: column {name!r} is missing (the file has {arrow_schema.names})")
        got = _arrow_kind(arrow_schema.field(name).type)
        if got != kind:
            raise ValueError(f"{path}: column {name!r} has type {arrow_schema.field(name).type}, expected {kind}")
