"""A side table indexed by its key, and the Arrow lookup that joins its columns onto a batch of events.

Pure pyarrow + numpy, no Beam: `transforms.beam.join_tables` runs it in its
DoFns. A lookup costs one vectorised pass per batch, never a Python step per
row: integer keys are found by position in an array over their range when they fill most
of it (user and item numbers), else by `numpy.searchsorted` over the table's
sorted keys; string keys by their 64-bit Fingerprint64 (the same hash `HashIds`
uses) and then compared byte for byte, so a hash collision can never join
the wrong row.

Missing values follow the readers' conventions (`sparse_io.readers`): an
event whose key is not in the table (or is missing) gets an empty id list in
a sparse (list) column and a null in a dense one, exactly what a missing cell
of the log would have given.

Example:
  >>> users = KeyedTable.from_batches(
  ...     [pa.record_batch({"user_id": [7, 9], "age": [25, 35], "job": [["a"], ["b"]]})],
  ...     "user_id", ["age", "job"], where="users.tsv")
  >>> rows, matched = users.join(pa.array([9, 8, None]))
  >>> rows.column("age").to_pylist(), rows.column("job").to_pylist(), matched.to_pylist()
  ([35, None, None], [['b'], [], []], [True, False, False])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.errors import LayoutError
from sparse_io.string_hashes import fingerprint64

__all__ = ["KeyedTable", "key_values", "key_codes", "filled_keys", "missing_columns", "fill_missing"]


_DIRECT_SPAN_PER_ROW = 4  # integer keys spanning at most this many values per table row (plus the minimum
_DIRECT_SPAN_MIN = 1 << 16  # span below) are indexed by an array over their whole range


def key_values(column: pa.Array | pa.ChunkedArray, key: str, where: str) -> pa.Array:
    """One key per row: a scalar column as it is, a list column's only value (null for an empty list).

    Raises:
      LayoutError: naming `where` and `key`, when a row's list holds more than one value (a join key takes one).
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return column
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    if len(lengths) and lengths.max() > 1:
        row = int(np.argmax(lengths > 1))
        raise LayoutError(where, f"join key {key!r} holds {int(lengths[row])} values in row {row} "
                                 f"({column[row].as_py()!r}); a join key takes one value per row")
    starts = column.offsets.to_numpy()[:-1] - column.offsets[0].as_py()
    flat = pc.list_flatten(column)
    # The first (only) value of each non-empty row; an empty or null row gets a null key.
    index = pa.array(starts, mask=lengths == 0, type=pa.int64())
    return flat.take(index)


def key_codes(keys: pa.Array) -> np.ndarray:
    """uint64 per key: an integer key's own bits, a string key's Fingerprint64 (nulls must be filled first)."""
    if pa.types.is_integer(keys.type):
        return keys.cast(pa.int64()).to_numpy(zero_copy_only=False).view(np.uint64)
    return fingerprint64(keys)


def filled_keys(keys: pa.Array) -> pa.Array:
    """`keys` with nulls replaced by 0 or "" (for `key_codes`; the caller masks those rows out)."""
    return pc.fill_null(keys, pa.scalar(0 if pa.types.is_integer(keys.type) else "", keys.type))


def missing_columns(types: pa.Schema, num_rows: int) -> list[pa.Array]:
    """`num_rows` missing values per field of `types`: empty lists for list fields, nulls otherwise."""
    return [fill_missing(pa.nulls(num_rows, field.type)) for field in types]


def fill_missing(column: pa.Array) -> pa.Array:
    """`column` with its null lists made empty lists (a missing sparse cell); scalars keep their nulls."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)) or not column.null_count:
        return column
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32 if pa.types.is_list(column.type) else np.int64)
    np.cumsum(lengths, out=offsets[1:])
    cls = pa.ListArray if pa.types.is_list(column.type) else pa.LargeListArray
    return cls.from_arrays(pa.array(offsets), pc.list_flatten(column), type=column.type)


class KeyedTable:
    """A side table's joined columns, indexed by its unique key.

    Attributes:
      keys: the table's keys (scalars, no nulls, no duplicates).
      columns: the joined columns, row i belonging to `keys[i]` (a `pa.Table`).
    """

    def __init__(self, keys: pa.Array, columns: pa.Table):
        if len(keys) != columns.num_rows:
            raise ValueError(f"KeyedTable: {len(keys)} keys for {columns.num_rows} rows")
        self.keys = keys
        self.columns = columns
        codes = key_codes(keys)
        self._order = np.argsort(codes, kind="stable")
        self._sorted = codes[self._order]
        self._integer = pa.types.is_integer(keys.type)
        self._collides = bool(len(codes) > 1 and (np.diff(self._sorted) == 0).any())
        self._direct: np.ndarray | None = None
        if self._integer and len(codes):
            # Ids that fill most of their range (user and item numbers usually do) are looked up by position:
            # a random probe of a binary search misses the cache about 20 times over a 1M-row table.
            values = codes.view(np.int64)
            low, high = int(values.min()), int(values.max())
            if high - low < _DIRECT_SPAN_PER_ROW * len(values) + _DIRECT_SPAN_MIN:
                self._low = low
                self._direct = np.full(high - low + 1, -1, dtype=np.int64)
                self._direct[values - low] = np.arange(len(values))

    @classmethod
    def from_batches(cls, batches: Iterable[pa.RecordBatch], key: str, columns: Sequence[str], *,
                     where: str, types: pa.Schema | None = None) -> KeyedTable:
        """The table the record batches hold, keyed by column `key`, keeping `columns`.

        `types` (the joined columns' Arrow fields, key first is not needed) lets
        a table without rows be built.

        Raises:
          LayoutError: naming `where` and the key: a row without a key, a key
            that occurs in more than one row (with an example), a key list of
            several values.
        """
        batches = [b for b in batches if b.num_rows]
        if not batches:
            if types is None:
                raise ValueError("KeyedTable.from_batches: no rows and no column types")
            return cls(pa.array([], type=pa.int64()), pa.Table.from_arrays(missing_columns(types, 0), schema=types))
        table = pa.Table.from_batches(batches)
        keys = key_values(table.column(key), key, where)
        if keys.null_count:
            raise LayoutError(where, f"a row of the table has no value in join key {key!r} (each row needs one)")
        if len(pc.unique(keys)) < len(keys):
            counts = pc.value_counts(keys)
            repeated = counts.filter(pc.greater(counts.field("counts"), 1))[0]
            raise LayoutError(where, f"join key {key!r} is duplicated: {repeated['values'].as_py()!r} occurs in "
                                     f"{repeated['counts'].as_py()} rows (a side table holds one row per key)")
        kept = table.select(list(columns)).combine_chunks()
        return cls(keys, kept)

    @property
    def num_rows(self) -> int:
        return len(self.keys)

    def lookup(self, keys: pa.Array) -> pa.Array:
        """int64 row of the table for each key, null where the key is null or absent from the table."""
        n = len(keys)
        if n == 0 or self.num_rows == 0:
            return pa.nulls(n, pa.int64())
        valid = keys.is_valid().to_numpy(zero_copy_only=False)
        filled = filled_keys(keys.cast(self.keys.type) if keys.type != self.keys.type else keys)
        if self._collides:
            # Distinct keys sharing a 64-bit hash (checked when built): Arrow's hash set, which compares bytes.
            index = pc.index_in(filled, value_set=self.keys)
            found = valid & index.is_valid().to_numpy(zero_copy_only=False)
            rows = np.asarray(pc.fill_null(index, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
            return pa.array(rows, mask=~found)
        codes = key_codes(filled)
        if self._direct is not None:
            offset = codes.view(np.int64) - self._low  # wraps around for keys far outside: caught as out of range
            inside = valid & (offset >= 0) & (offset < len(self._direct))
            rows = self._direct[np.where(inside, offset, 0)]
            return pa.array(rows, mask=~(inside & (rows >= 0)))
        at = np.minimum(np.searchsorted(self._sorted, codes), self.num_rows - 1)
        found = valid & (self._sorted[at] == codes)
        rows = self._order[at].astype(np.int64)
        if not self._integer:
            # Equal hashes of unequal strings must not join: compare the candidates' bytes.
            found &= pc.equal(filled, self.keys.take(pa.array(rows))).to_numpy(zero_copy_only=False)
        return pa.array(rows, mask=~found)

    def join(self, keys: pa.Array) -> tuple[pa.Table, pa.Array]:
        """The joined columns for events with `keys`, and a boolean array of which events matched.

        Unmatched events get missing values (see the module doc).
        """
        rows = self.lookup(keys)
        taken = self.columns.take(rows)
        out = pa.Table.from_arrays([fill_missing(c.combine_chunks()) for c in taken.columns],
                                   schema=self.columns.schema)
        return out, rows.is_valid()
