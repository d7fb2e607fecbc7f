"""Feature crosses: `CrossSpec`, the ids `keras.layers.HashedCrossing` gives, computed over Arrow columns.

`keras.layers.HashedCrossing(num_bins)` calls `tf.sparse.cross_hashed`, which
hashes each combination of its inputs' raw values as

    h = 0xDECAFCAFFE                                   # the op's default hash key
    for value in combination:                          # inputs in the order given
        h = FingerprintCat64(h, Fingerprint64(value) if value is a string else uint64(value))
    id = h % num_bins                                  # unsigned

An integer takes part as its own 64 bits (two's complement), not as its
decimal text: the integer 7 and the string "7" cross differently. This module
computes the same ids in numpy (`sparse_io.string_hashes.fingerprint64` for
the strings; the hashes are chained in `native/crosses.cc` where it builds),
so the Beam ingest crosses a batch without TensorFlow; the graph
side (`transforms.tfdata.crosses.GraphCross`) runs `tf.sparse.cross_hashed`
itself at serving time.

Rows and lists: each input is a flat column (one value per row; a null row
has none) or a list column. A row's crosses are the Cartesian product of its
inputs' values, in `tf.sparse.cross`'s order (the first input varies slowest,
the last fastest), so single-valued inputs give exactly one id and a row
missing any input gives none. A row keeps at most `max_per_row` crosses, the
first ones in that order; `cross_arrow` reports how many it dropped so the
ingest can count them (stats.json) instead of losing them silently.

Example:
  >>> spec = CrossSpec(("user", "occupation"), 1000)
  >>> ids, dropped = spec.apply_arrow([pa.array(["a", "b", None]), pa.array([1, 2, 3])])
  >>> ids.to_pylist(), dropped.rows
  ([[485], [357], []], 0)
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from sparse_io.string_hashes import fingerprint64

__all__ = ["CrossSpec", "CrossOverflow", "DEFAULT_MAX_CROSSES_PER_ROW", "HASH_KEY", "fingerprint_cat64",
           "cross_arrow"]

HASH_KEY = 0xDECAFCAFFE  # tf.sparse.cross_hashed's default hash_key (Keras passes none)
DEFAULT_MAX_CROSSES_PER_ROW = 256
_MUL = np.uint64(0xC6A4A7935BD1E995)
_SHIFT = np.uint64(47)
_SATURATE = 1 << 62  # product counts are clipped here: past it only "too many" matters


def _shift_mix(v: np.ndarray) -> np.ndarray:
    return v ^ (v >> _SHIFT)


def fingerprint_cat64(first: np.ndarray | np.uint64, second: np.ndarray) -> np.ndarray:
    """TensorFlow's `FingerprintCat64(fp1, fp2)` (tensorflow/core/platform/fingerprint.h), elementwise on uint64."""
    with np.errstate(over="ignore"):
        result = np.asarray(first, np.uint64) ^ _MUL
        result = result ^ (_shift_mix(np.asarray(second, np.uint64) * _MUL) * _MUL)
        result = result * _MUL
        result = _shift_mix(result) * _MUL
        return _shift_mix(result)


@dataclasses.dataclass(frozen=True)
class CrossOverflow:
    """What the per-row cap cut: rows that had more than `max_per_row` crosses, and the crosses dropped."""

    rows: int = 0
    dropped: int = 0

    def __add__(self, other: CrossOverflow) -> CrossOverflow:
        return CrossOverflow(self.rows + other.rows, self.dropped + other.dropped)


@dataclasses.dataclass(frozen=True)
class CrossSpec:
    """Ids of `keras.layers.HashedCrossing(num_bins)` over the raw values of `sources`.

    Attributes:
      sources: the crossed columns, in order (>= 2; the order changes the ids, as in Keras).
      num_bins: bucket count, >= 1.
      max_per_row: a row keeps at most this many crosses (list inputs multiply).
    """

    sources: tuple[str, ...]
    num_bins: int
    max_per_row: int = DEFAULT_MAX_CROSSES_PER_ROW

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        if len(self.sources) < 2 or not all(isinstance(s, str) and s for s in self.sources):
            raise ValueError(f"a cross needs at least two column names, got {list(self.sources)!r}")
        for what, value in (("num_bins", self.num_bins), ("max_per_row", self.max_per_row)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{what} must be a positive integer, got {value!r}")

    @property
    def id_range(self) -> int:
        """Ids lie in `[0, id_range)`."""
        return self.num_bins

    def apply_arrow(self, columns: Sequence[pa.Array | pa.ChunkedArray], feature: str | None = None
                    ) -> tuple[pa.Array, CrossOverflow]:
        """`cross_arrow` of these columns (given in `sources` order) with this spec's bins and cap."""
        return cross_arrow(columns, self.num_bins, self.max_per_row, feature=feature, sources=self.sources)


@functools.cache
def _native_cross():
    from sparse_io import native_build

    p, i64 = ctypes.c_void_p, ctypes.c_int64
    return native_build.function("sparseflow_cross_ids", [i64, p, p, p, i64, ctypes.c_uint64, ctypes.c_uint64, p],
                                 None)


def _cross_ids(hashes: Sequence[np.ndarray], positions: Sequence[np.ndarray], rows: np.ndarray | None,
               num_bins: int, native: bool = True) -> np.ndarray:
    """int64 ids: cross i chains input j's value hash `hashes[j][positions[j][r]]`, r = `rows[i]` (None: i).

    `sparse_io/native/crosses.cc` where it builds; this numpy is its reference (tests/test_crosses.py,
    tests/test_crosses_flat.py).
    """
    function = _native_cross() if native else None
    if function is None:
        chain: np.ndarray | np.uint64 = np.uint64(HASH_KEY)
        for at, h in zip(positions, hashes):
            chain = fingerprint_cat64(chain, h[at if rows is None else at[rows]])
        return (np.asarray(chain, np.uint64).reshape(-1) % np.uint64(num_bins)).astype(np.int64)
    hashes = [np.ascontiguousarray(h, np.uint64) for h in hashes]
    positions = [np.ascontiguousarray(at, np.int64) for at in positions]
    count = len(positions[0]) if rows is None else len(rows)
    rows = None if rows is None else np.ascontiguousarray(rows, np.int64)
    out = np.empty(count, np.int64)
    pointers = ctypes.c_void_p * len(hashes)
    function(len(hashes), pointers(*[h.ctypes.data for h in hashes]), pointers(*[at.ctypes.data for at in positions]),
             None if rows is None else rows.ctypes.data, count, HASH_KEY, num_bins, out.ctypes.data)
    return out


def _value_hashes(values: pa.Array, where: str) -> np.ndarray:
    """uint64 per value: Fingerprint64 of a string's bytes, an integer's own bits."""
    if pa.types.is_integer(values.type):
        if values.null_count:  # null slots hold any bits; they are never crossed (see _rows_of)
            values = values.fill_null(0)
        return values.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64, copy=False).view(np.uint64)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type) or pa.types.is_binary(
            values.type) or pa.types.is_large_binary(values.type):
        # Remembered: the ingest hashes a crossed column again (HashIds), a few stages on.
        return fingerprint64(values, remember=True)
    raise ValueError(f"{where}: only strings and integers can be crossed, got {values.type}")


def _rows_of(column: pa.Array, where: str) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """(int64 row starts, int64 row lengths, the values) of a flat or list column; null rows are empty."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        offsets = column.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        lengths = np.diff(offsets)
        if column.null_count:
            lengths = np.where(column.is_valid().to_numpy(zero_copy_only=False), lengths, 0)
        first = int(offsets[0]) if len(offsets) else 0
        values = column.values.slice(first, int(offsets[-1]) - first if len(offsets) else 0)
        if values.null_count:
            raise ValueError(f"{where}: ids inside a list must not be null")
        return offsets[:-1] - first, lengths, values
    valid = column.is_valid().to_numpy(zero_copy_only=False) if column.null_count else np.ones(len(column), bool)
    # A null row has no value (length 0): its slot is hashed with the others (strings are read from their
    # buffers, whatever a null slot holds) but never crossed, so the column is not copied to fill it.
    return np.arange(len(column), dtype=np.int64), valid.astype(np.int64), column


def cross_arrow(columns: Sequence[pa.Array | pa.ChunkedArray], num_bins: int,
                max_per_row: int = DEFAULT_MAX_CROSSES_PER_ROW, *, feature: str | None = None,
                sources: Sequence[str] | None = None, native: bool = True) -> tuple[pa.Array, CrossOverflow]:
    """`list<int64>` cross ids per row, as `tf.sparse.cross_hashed(columns, num_bins)` gives them, and the overflow.

    Args:
      columns: >= 2 columns of equal length: flat or list, of strings or integers.
      num_bins: bucket count >= 1.
      max_per_row: crosses a row keeps (the first in `tf.sparse.cross` order).
      feature: the cross's name, for error messages.
      sources: the columns' names, for error messages.
      native: False chains the hashes with the numpy reference instead of the native loop.

    Returns:
      (ids `list<int64>` `[rows]`, `CrossOverflow` of the rows cut and crosses dropped).

    Raises:
      ValueError: columns of different lengths, a float column, a null inside a list, num_bins < 1.
    """
    if len(columns) < 2:
        raise ValueError("a cross needs at least two columns")
    if isinstance(num_bins, bool) or not isinstance(num_bins, (int, np.integer)) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")
    names = list(sources) if sources is not None else [f"#{i}" for i in range(len(columns))]
    prefix = f"cross {feature!r}" if feature else "cross"
    parts = [_rows_of(c, f"{prefix}, column {n!r}") for c, n in zip(columns, names)]
    rows = len(parts[0][0])
    if any(len(p[0]) != rows for p in parts):
        raise ValueError(f"{prefix}: the crossed columns have different row counts")
    hashes = [_value_hashes(values, f"{prefix}, column {n!r}") for (_, _, values), n in zip(parts, names)]
    total = np.ones(rows, np.int64)
    for _, lengths, _ in parts:
        total = np.minimum(total * lengths, _SATURATE)
    kept = np.minimum(total, max_per_row)
    offsets = np.zeros(rows + 1, np.int64)
    np.cumsum(kept, out=offsets[1:])
    if all(lengths.size == 0 or lengths.max() <= 1 for _, lengths, _ in parts):
        # Every input holds at most one value per row (a flat column, or lists of one id with empty rows, as
        # logs of categorical ids are read): a row's one cross, where all are present, is the hash of each
        # input's value at the row's start, so no product needs enumerating.
        ids = _cross_ids(hashes, [starts for starts, _, _ in parts], np.flatnonzero(kept), num_bins, native=native)
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(ids, pa.int64())), \
            CrossOverflow()
    row = np.repeat(np.arange(rows, dtype=np.int64), kept)
    rest = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[row]  # position within the row's product
    index = []
    for starts, lengths, _ in reversed(parts):  # the last input varies fastest
        length = lengths[row]
        index.append(starts[row] + rest % length)
        rest = rest // length
    ids = _cross_ids(hashes, index[::-1], None, num_bins, native=native)
    cut = total > kept
    overflow = CrossOverflow(int(np.count_nonzero(cut)), int((total[cut] - kept[cut]).sum()))
    make = pa.ListArray if offsets[-1] < 2**31 else pa.LargeListArray
    return make.from_arrays(pa.array(offsets), pa.array(ids, pa.int64())), overflow
