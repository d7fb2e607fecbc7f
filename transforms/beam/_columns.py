"""Small RecordBatch helpers shared by the Beam transforms."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

__all__ = ["feature_names", "replace_column", "require_columns", "concat_batches", "num_values"]


def feature_names(features: str | Sequence[str], transform: str, *, allow_empty: bool = False) -> list[str]:
    """A list of distinct column names (non-empty unless allowed); ValueError otherwise."""
    names = [features] if isinstance(features, str) else list(features)
    if (not names and not allow_empty) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{transform}: features must be one or more column names, got {features!r}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{transform}: duplicate feature(s) {dupes}")
    return names


def require_columns(batch: pa.RecordBatch, names: Iterable[str], transform: str) -> None:
    """ValueError naming the first column of `names` the batch lacks."""
    present = set(batch.schema.names)
    for name in names:
        if name not in present:
            raise ValueError(
                f"{transform}: feature {name!r} is not a column of the batch; it has {batch.schema.names}"
            )


def replace_column(batch: pa.RecordBatch, name: str, array: pa.Array) -> pa.RecordBatch:
    """`batch` with column `name` replaced by `array` (same position, new type)."""
    index = batch.schema.get_field_index(name)
    field = pa.field(name, array.type, nullable=batch.schema.field(index).nullable)
    return batch.set_column(index, field, array)


def concat_batches(batches: Sequence[pa.RecordBatch], schema: pa.Schema | None = None) -> pa.RecordBatch:
    """One RecordBatch holding the rows of `batches` in order (copies once)."""
    if not batches:
        if schema is None:
            raise ValueError("concat_batches: no batches and no schema")
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(batches) == 1:
        return batches[0]
    return pa.concat_batches(batches)


def num_values(array: pa.Array) -> int:
    """Ids in a list column (values referenced by its rows), or its length when flat."""
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        if len(array) == 0:
            return 0
        return int(array.offsets[-1].as_py() - array.offsets[0].as_py())
    return len(array)
