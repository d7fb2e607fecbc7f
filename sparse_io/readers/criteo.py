"""Criteo display-advertising logs: headerless TSV, one column per schema feature in order.

The default layout (`criteo_schema()`) is label, I1..I13, C1..C26: 40
tab-separated fields per line, integers as decimal text, categorical values
as 8-digit hex strings (32-bit hashes), an empty field a missing value.

Lines are split into fields in one vectorised call per block, so lines that
lost their trailing empty fields (as in real Criteo dumps) are read with
those fields missing and counted (`DeadLetterSink.padded`); in strict mode
they are dead letters instead. More fields than the schema is always bad.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.readers._convert import RowProblems, empty_to_null, scalar_column, scalar_parts, sparse_column
from sparse_io.schema import Schema

__all__ = ["check_criteo_schema", "parse_criteo_block"]


def check_criteo_schema(schema: Schema) -> None:
    """Criteo categorical fields are hex strings, one per field, unweighted.

    Raises:
      ValueError: a sparse feature that is not an unweighted string feature.
    """
    for spec in schema.sparse:
        if spec.dtype != "string" or spec.weighted:
            raise ValueError(
                f"criteo format: sparse feature {spec.name!r} must be an unweighted string feature "
                f"(hex ids; hash them downstream), got dtype={spec.dtype!r} weighted={spec.weighted}"
            )


def parse_criteo_block(
    lines: pa.StringArray, schema: Schema, *, strict: bool
) -> tuple[pa.RecordBatch, RowProblems]:
    """Parses tab-separated lines into a batch with `schema.arrow_schema()`; marks bad rows."""
    specs = list(schema)
    expected = len(specs)
    fields = pc.split_pattern(lines, "\t")
    counts = pc.list_value_length(fields).to_numpy(zero_copy_only=False)
    problems = RowProblems(len(lines))
    problems.add(counts > expected, lambda r: f"expected {expected} fields, got {counts[r]}")
    short = counts < expected
    if strict:
        problems.add(short, lambda r: f"expected {expected} fields, got {counts[r]} (strict mode)")
    else:
        problems.padded = short
    starts = fields.offsets.to_numpy()[:-1].astype(np.int64)
    flat = fields.values
    columns = []
    for i, spec in enumerate(specs):
        # Field i of every line at once; lines too short to have it get a null (missing).
        values = empty_to_null(flat.take(pa.array(starts + i, mask=counts <= i)))
        if spec.is_sparse:
            splits, elements = scalar_parts(values)
            columns.append(sparse_column(splits, elements, spec, problems, text=True, hex32=True))
        else:
            columns.append(scalar_column(values, spec, problems, text=True))
    return pa.RecordBatch.from_arrays(columns, schema=schema.arrow_schema()), problems
