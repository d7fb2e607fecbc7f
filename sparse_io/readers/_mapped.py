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


def _row_major(columns: list[pa.Array]) -> pa.Array:
    """The cells of k equal-length columns row by row: row 0's k cells, then row 1's, ..."""
    k, n = len(columns), len(columns[0])
    order = (np.arange(k)[None, :] * n + np.arange(n)[:, None]).ravel()
    return pa.concat_arrays(columns).take(pa.array(order))


def _numbers(values: pa.Array, spec: FeatureSpec) -> tuple[np.ndarray, np.ndarray, Callable[[int], str]]:
    """Text to float64 (NaN where missing or bad), the bad mask, and why(i) for a bad value."""
    typed, bad, why = _convert(values, FeatureSpec(spec.name, "dense", "float64"), text=True)
    return pc.fill_null(typed, np.nan).to_numpy(zero_copy_only=False), bad, why


def list_from_columns(lst: ListColumns, spec: FeatureSpec, field: FieldFn, problems: RowProblems) -> pa.ListArray:
    """The id list of sparse `spec` from the cells at `lst.positions`, row by row, in field order.

    A cell is dropped when it is missing, equals `lst.padding`, or its mask
    cell is 0; a mask cell that is missing or not a number equal to 0 or 1
    makes the row bad. The ids left are checked as any id list's are.
    """
    k = len(lst.positions)
    cells = _row_major([field(p, spec.name) for p in lst.positions])
    n = len(cells) // k
    keep = cells.is_valid().to_numpy(zero_copy_only=False)
    if lst.padding is not None:
        keep &= ~np_mask(pc.equal(cells, pa.scalar(lst.padding, pa.string())), null_as=False)
    if lst.mask is not None:
        mask_cells = _row_major([field(p, spec.name) for p in lst.mask])
        values, bad, why = _numbers(mask_cells, spec)
        present = mask_cells.is_valid().to_numpy(zero_copy_only=False)
        wrong = present & ~bad & (values != 0) & (values != 1)
        rows = np.arange(n * k) // k

        def mark(elements: np.ndarray, reason: Callable[[int], str]) -> None:
            first: dict[int, int] = {}
            for e in np.flatnonzero(elements).tolist():
                first.setdefault(int(rows[e]), e)
            row_mask = np.zeros(n, dtype=bool)
            row_mask[list(first)] = True
            problems.add(row_mask, lambda r: reason(first[r]))

        mark(~present, lambda e: f"{spec.name}: mask cell {e % k} is missing")
        mark(bad, lambda e: f"{spec.name}: mask cell {e % k}: {why(e)}")
        mark(wrong, lambda e: f"{spec.name}: mask cell {e % k} is {values[e]:g}, not 0 or 1")
        keep &= values == 1
    splits = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(keep.reshape(n, k).sum(axis=1), out=splits[1:])
    return sparse_column(splits, cells.filter(pa.array(keep)), spec, problems, text=True)


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
