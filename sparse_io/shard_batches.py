"""Batches made ready for a shard writer: conformed to the schema, cut into tables of one size.

Every shard writer (`sparse_io.parquet_shards`, `sparse_io.arrow_shards`,
`sparse_io.tfrecord`) takes batches of any size and column order; these give
it exactly `schema.arrow_schema()`'s columns and types, in row groups (or
record batches) of `DEFAULT_ROW_GROUP_SIZE` rows unless told otherwise.

Example:
  >>> import pyarrow as pa
  >>> from sparse_io.schema import FeatureSpec, Schema
  >>> schema = Schema([FeatureSpec("label", "label"), FeatureSpec("C1")])
  >>> batch = pa.table({"C1": [[4], [2, 3], []], "label": [1, 0, 1]})
  >>> [t.num_rows for t in fixed_size_tables([batch], schema, 2)]
  [2, 1]
  >>> conform_batch(batch, schema).schema.names
  ['label', 'C1']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from sparse_io.schema import Schema

__all__ = ["DEFAULT_ROW_GROUP_SIZE", "conform_batch", "fixed_size_tables"]

DEFAULT_ROW_GROUP_SIZE = 65536


def conform_batch(batch: pa.RecordBatch | pa.Table, schema: Schema) -> pa.RecordBatch | pa.Table:
    """`batch` with exactly `schema.arrow_schema()`: its columns selected, in order, cast if needed.

    Raises:
      ValueError: a column is missing or cannot be cast (naming it).
    """
    target = schema.arrow_schema()
    if batch.schema.equals(target):
        return batch
    arrays = []
    for field in target:
        if field.name not in batch.schema.names:
            raise ValueError(f"feature {field.name!r}: column missing; the batch has {batch.schema.names}")
        column = batch.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ValueError(
                    f"feature {field.name!r}: cannot cast {column.type} to {field.type}: {e}"
                ) from None
        arrays.append(column)
    make = pa.Table.from_arrays if isinstance(batch, pa.Table) else pa.RecordBatch.from_arrays
    return make(arrays, schema=target)


def fixed_size_tables(
    batches: Iterable[pa.RecordBatch | pa.Table], schema: Schema, size: int
) -> Iterator[pa.Table]:
    """The rows of `batches`, conformed to `schema` (`conform_batch`), as tables of `size` rows, the last fewer.

    Whatever the sizes of the incoming batches, so a writer's row groups (or
    record batches) have one size; no rows give no table.

    Raises:
      ValueError: as `conform_batch`.
    """
    target = schema.arrow_schema()
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for batch in batches:
        batch = conform_batch(batch, schema)
        for part in batch.to_batches() if isinstance(batch, pa.Table) else [batch]:
            if part.num_rows:
                pending.append(part)
                pending_rows += part.num_rows
        while pending_rows >= size:
            table = pa.Table.from_batches(pending, schema=target)
            yield table.slice(0, size)
            rest = table.slice(size)
            pending, pending_rows = rest.to_batches(), rest.num_rows
    if pending_rows:
        yield pa.Table.from_batches(pending, schema=target)
