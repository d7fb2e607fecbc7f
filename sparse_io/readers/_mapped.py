"""Columns a `ColumnPlan` builds from other fields: an id list from many cells, a label derived from a value.

Both take `field(position, feature)`: the strings of one field of the block,
null where the cell is missing (a null token), and mark bad rows in a
`RowProblems` with a reason naming the feature, as every conversion does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.readers._convert import RowProblems, _convert, np_mask, sparse_column
from sparse_io.readers.columns import DerivedLabel, ListColumns
from sparse_io.schema import FeatureSpec

__all__ = ["list_from_columns", "derived_label"]

FieldFn = Callable[[int, str], pa.Array]


def _numbers(values: pa.Array, spec: FeatureSpec) -> tuple[np.ndarray, np.ndarray, Callable[[int], str]]:
    """Text to float64 (NaN where missing or bad), the bad mask, and why(i) for a bad value."""
    typed, bad, why = _convert(values, FeatureSpec(spec.name, "dense", "float64"), text=True)
    return pc.fill_null(typed, np.nan).to_numpy(zero_copy_only=False), bad, why


def _mask_keeps(cells: pa.Array, j: int, spec: FeatureSpec, problems: RowProblems) -> np.ndarray:
    """Where mask cell `j` of each row is 1; rows whose cell is missing or not 0 or 1 are marked bad."""
    one = np_mask(pc.equal(cells, pa.scalar("1", pa.string())), null_as=False)
    if (one | np_mask(pc.equal(cells, pa.scalar("0", pa.string())), null_as=False)).all():
        return one  # the usual spelling, without parsing numbers
    present = cells.is_valid().to_numpy(zero_copy_only=False)
    values, bad, why = _numbers(cells, spec)
    problems.add(~present, lambda r: f"{spec.name}: mask cell {j} is missing")
    problems.add(bad, lambda r: f"{spec.name}: mask cell {j}: {why(r)}")
    problems.add(present & ~bad & (values != 0) & (values != 1),
                 lambda r: f"{spec.name}: mask cell {j} is {values[r]:g}, not 0 or 1")
    return values == 1


def list_from_columns(lst: ListColumns, spec: FeatureSpec, field: FieldFn, problems: RowProblems) -> pa.ListArray:
    """The id list of sparse `spec` from the cells at `lst.positions`, row by row, in field order.

    A cell is dropped when it is missing, equals `lst.padding`, or its mask
    cell is 0; a mask cell that is missing or not a number equal to 0 or 1
    makes the row bad. The ids left are checked as any id list's are.
    """
    columns = [field(p, spec.name) for p in lst.positions]
    n = len(columns[0])
    keep = np.empty((n, len(columns)), dtype=bool)  # [row, cell]: row-major, the order of the ids
    for j, cells in enumerate(columns):
        keep[:, j] = cells.is_valid().to_numpy(zero_copy_only=False)
        if lst.padding is not None:
            keep[:, j] &= ~np_mask(pc.equal(cells, pa.scalar(lst.padding, pa.string())), null_as=False)
    for j, position in enumerate(lst.mask or ()):
        keep[:, j] &= _mask_keeps(field(position, spec.name), j, spec, problems)
    rows, cells_at = np.nonzero(keep)
    # Only the kept cells are gathered, from the columns laid end to end (cell j of row r at j * n + r).
    elements = pa.concat_arrays(columns).take(pa.array(cells_at * n + rows))
    splits = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=splits[1:])
    return sparse_column(splits, elements, spec, problems, text=True)


def derived_label(label: DerivedLabel, spec: FeatureSpec, field: FieldFn, problems: RowProblems) -> pa.Array:
    """Label `spec` (0 or 1, in its dtype) from the value at `label.position`.

    1 where the value is >= `label.at_least`, or is one of `label.one_of`
    (numbers compared as numbers, strings as the cell's text), else 0. A
    missing value, or one that is not a number when numbers are compared,
    makes the row bad.
    """
    values = field(label.position, spec.name)
    problems.add(~values.is_valid().to_numpy(zero_copy_only=False),
                 lambda r: f"{spec.name}: source column {label.column!r} is missing")
    if label.one_of is not None and not label.numeric_set:
        hit = np_mask(pc.is_in(values, value_set=pa.array(list(label.one_of), pa.string())), null_as=False)
    else:
        numbers, bad, why = _numbers(values, spec)
        problems.add(bad, lambda r: f"{spec.name}: source column {label.column!r}: {why(r)}")
        with np.errstate(invalid="ignore"):
            hit = numbers >= label.at_least if label.at_least is not None else np.isin(numbers, label.one_of or ())
    return pa.array(hit.astype(np.int64)).cast(spec.arrow_type())
