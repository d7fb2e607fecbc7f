"""Criteo display-advertising logs: headerless TSV, one column per schema feature in order.

The default layout (`criteo_schema()`) is label, I1..I13, C1..C26: 40
tab-separated fields per line, integers as decimal text, categorical values
as 8-digit hex strings (32-bit hashes), an empty field a missing value.

Lines are split into fields in one vectorised call per block, so lines that
lost their trailing empty fields (as in real Criteo dumps) are read with
those fields missing and counted (`DeadLetterSink.padded`); in strict mode
they are dead letters instead. More fields than the schema is always bad.

Most blocks of a well-formed log need none of that care: `parse_criteo_bytes`
hands the block's bytes to pyarrow's CSV reader, which splits and converts
all columns in one pass (measured about twice as fast as splitting and
gathering the fields), and gives up, returning None, on any block that holds
something the general path treats specially, so the caller parses that
block with `parse_criteo_block`: the two agree on every block the fast one
accepts.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from sparse_io.readers._convert import (
    FLOAT32_EXACT,
    RowProblems,
    empty_to_null,
    np_mask,
    scalar_column,
    scalar_parts,
    sparse_column,
)
from sparse_io.schema import Schema

__all__ = ["check_criteo_schema", "parse_criteo_block", "parse_criteo_bytes"]


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


_PARSE = pcsv.ParseOptions(
    delimiter="\t", quote_char=False, escape_char=False, double_quote=False, ignore_empty_lines=False
)
# Bytes the general path treats specially and the CSV reader would not the same way: the CSV
# reader trims spaces around numbers and ends lines at "\r"; an "x" may be a hexadecimal
# integer, which Arrow's parser takes and the contract does not. (Blank lines need no scan: the
# reader sees one field where the schema has more, and a one-column row of nothing is caught
# below as a row with every column missing; searching for "\n\n" cost 15x a one-byte scan.)
_SPECIAL = (b" ", b"\r", b"\x0b", b"\x0c", b"x", b"X")
_MAX_CSV_BLOCK = (1 << 31) - 1  # the CSV reader's block size is an int32


def parse_criteo_bytes(data: bytes, schema: Schema) -> pa.RecordBatch | None:
    """A block of whole lines (as `iter_byte_blocks` yields) parsed in one pass, or None.

    Returns the batch `parse_criteo_block` would return for the same lines
    when every line is a good record of exactly `len(schema)` fields; None
    when any line is short, long, blank, not UTF-8, holds a bad value or a
    byte the general path treats specially: parse such a block with
    `parse_criteo_block`, which finds the bad lines.
    """
    if not data or len(data) >= _MAX_CSV_BLOCK or data.startswith(b"\n"):
        return None  # the general path reads (or refuses, naming the size) what this one cannot
    if any(special in data for special in _SPECIAL):
        return None
    specs = list(schema)
    target = schema.arrow_schema()
    types = {spec.name: pa.string() if spec.is_sparse else target.field(spec.name).type for spec in specs}
    # Sparse ids are checked below to be 8 hex digits or numbers, which UTF-8 validation of their
    # bytes cannot add to (about 9% of the parse); a dense string column has no such check.
    check_utf8 = any(types[spec.name] == pa.string() for spec in specs if not spec.is_sparse)
    convert = pcsv.ConvertOptions(
        column_types=types, null_values=[""], strings_can_be_null=True, check_utf8=check_utf8
    )
    # Two CSV blocks, parsed on Arrow's threads: in a pipeline the rest of the work leaves a core idle.
    read = pcsv.ReadOptions(use_threads=True, column_names=list(types), block_size=len(data) // 2 + 1)
    try:
        table = pcsv.read_csv(pa.BufferReader(data), read_options=read, parse_options=_PARSE, convert_options=convert)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    problems = RowProblems(table.num_rows)
    missing = np.ones(table.num_rows, dtype=bool)  # rows of tabs alone are blank lines
    columns = []
    for spec in specs:
        values = table.column(spec.name).combine_chunks()
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        missing &= ~valid
        if spec.is_sparse:
            splits, elements = scalar_parts(values)
            columns.append(sparse_column(splits, elements, spec, problems, text=True, hex32=True))
            continue
        if spec.kind == "label" and not valid.all():
            return None
        if spec.dtype == "float32":
            if not np_mask(pc.is_finite(values), null_as=True).all():
                return None
            # Above 2**24 float32 may have rounded an integer: the general path checks the text.
            if len(values) and (pc.max(pc.abs(values)).as_py() or 0) > FLOAT32_EXACT:
                return None
        if spec.binary_label:
            clicks = pc.is_in(values, value_set=pa.array([0, 1], values.type))
            if not np_mask(clicks, null_as=False).all():
                return None
        columns.append(values)
    if problems.bad.any() or missing.any():
        return None
    return pa.RecordBatch.from_arrays(columns, schema=target)
