"""Keras-compatible id hashing over Arrow arrays, vectorised in numpy.

`keras.layers.Hashing(num_bins)` maps a string to
`Fingerprint64(utf8 bytes) % num_bins` (`tf.strings.to_hash_bucket_fast`), and
with a `salt` to `SipHash-2-4(key=salt, bytes) % num_bins`
(`tf.strings.to_hash_bucket_strong`); integers are hashed through their
decimal text (`tf.strings.as_string`). This module computes the same buckets
without TensorFlow (the hashes come from `sparse_io.string_hashes`), so a Beam
worker hashes a batch at numpy speed and a model hashes the same raw values
at serving time with the stock Keras layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.string_hashes import STRING_TYPES, fingerprint64, remembered_fingerprints, siphash24

__all__ = ["fingerprint64", "siphash24", "hash_strings", "hash_ids_arrow", "hash_columns", "normalize_salt", "IdColumn"]

_U64 = np.uint64


def normalize_salt(salt: int | Sequence[int] | None) -> tuple[int, int] | None:
    """Keras's reading of `salt`: None, one int (used twice) or two ints, each int64.

    Raises:
      ValueError: any other shape, or a value outside uint64.
    """
    if salt is None:
        return None
    if isinstance(salt, (int, np.integer)) and not isinstance(salt, bool):
        pair = (int(salt), int(salt))
    elif (
        isinstance(salt, (tuple, list))
        and len(salt) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in salt)
    ):
        pair = (int(salt[0]), int(salt[1]))
    else:
        raise ValueError(f"salt must be None, an integer or two integers, got {salt!r}")
    for v in pair:
        # TensorFlow takes the key as int64 attributes and reads their bits as uint64.
        if not -(1 << 63) <= v < (1 << 63):
            raise ValueError(f"salt values must fit in int64 (as Keras passes them to TensorFlow), got {v}")
    return pair


def _check_bins(num_bins: int) -> None:
    if isinstance(num_bins, bool) or not isinstance(num_bins, (int, np.integer)) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")


def hash_strings(
    values: pa.Array,
    num_bins: int,
    salt: int | Sequence[int] | None = None,
    *,
    mask_value: str | int | None = None,
    feature: str | None = None,
) -> np.ndarray:
    """Buckets of flat string or integer values, as `keras.layers.Hashing` computes them.

    Args:
      values: a flat Arrow array of strings/binary, or of integers (hashed via
        their decimal text, like `tf.strings.as_string`). No nulls.
      num_bins: number of buckets (including the mask bucket when `mask_value` is set).
      salt: None (Fingerprint64, "fast") or a Keras salt (SipHash, "strong").
      mask_value: as in Keras: this value maps to 0 and others to 1 + hash % (num_bins - 1).
      feature: named in error messages.

    Returns:
      int64 `[len(values)]` in `[0, num_bins)`.

    Raises:
      ValueError: nulls among the values (naming the first position), a value
        type that is neither string nor integer, or a bad num_bins/salt.

    Example:
      >>> hash_strings(pa.array(["a", "b"]), 10).dtype
      dtype('int64')
    """
    _check_bins(num_bins)
    key = normalize_salt(salt)
    where = f"feature {feature!r}" if feature else "hash_strings"
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    hashes = _hash64(values, key, where)
    return _to_buckets(hashes, num_bins, _mask(values, mask_value, num_bins))


def _hash64(values: pa.Array, key: tuple[int, int] | None, where: str) -> np.ndarray:
    """uint64 Fingerprint64 (key None) or SipHash of each value's text; ValueError on nulls or bad types."""
    if values.null_count:
        pos = int(np.argmax(~values.is_valid().to_numpy(zero_copy_only=False)))
        raise ValueError(f"{where}: ids must not be null; first null at position {pos}")
    if pa.types.is_integer(values.type):
        text = pc.cast(values, pa.string())
    elif values.type in STRING_TYPES or values.type in (pa.string_view(), pa.binary_view()):
        text = values
    else:
        raise ValueError(f"{where}: ids must be strings or integers to hash, got {values.type}")
    return fingerprint64(text) if key is None else siphash24(text, key)


def _mask(values: pa.Array, mask_value, num_bins: int) -> np.ndarray | None:
    if mask_value is None or num_bins <= 1:
        return None
    return pc.equal(values, pa.scalar(mask_value, type=values.type)).to_numpy(zero_copy_only=False)


def _to_buckets(hashes: np.ndarray, num_bins: int, mask: np.ndarray | None) -> np.ndarray:
    """int64 buckets of uint64 hashes, Keras's way (bucket 0 reserved for `mask` when given)."""
    bins = num_bins - 1 if mask is not None else num_bins
    if bins & (bins - 1) == 0:
        hashes = hashes & _U64(bins - 1)  # a power of two: no 64-bit division (about 40x faster)
    else:
        hashes = hashes % _U64(bins)
    buckets = hashes.view(np.int64)
    if mask is not None:
        buckets += 1
        buckets[mask] = 0
    return buckets


def hash_ids_arrow(
    list_array: pa.Array | pa.ChunkedArray,
    num_bins: int,
    salt: int | Sequence[int] | None = None,
    *,
    mask_value: str | int | None = None,
    feature: str | None = None,
) -> pa.Array:
    """Hashes a list column of ids (or a flat column) into int64 buckets, keeping its shape.

    Row structure (offsets, null rows) is kept; only the ids change. The result
    is bit-identical to `keras.layers.Hashing(num_bins, mask_value=mask_value,
    salt=salt)` applied to the same values.

    Args:
      list_array: `list<string>`, `list<int*>` (or large_list), or a flat
        string/integer array.
      num_bins: as in `hash_strings`.
      salt: as in `hash_strings`.
      mask_value: as in `hash_strings`.
      feature: as in `hash_strings`.

    Returns:
      `list<int64>` with the input's offsets (or flat int64 for a flat input).

    Example:
      >>> ids = pa.array([["a", "b"], [], None], type=pa.list_(pa.string()))
      >>> out = hash_ids_arrow(ids, 100)
      >>> out.type, [len(r) if r is not None else None for r in out.to_pylist()]
      (ListType(list<item: int64>), [2, 0, None])
    """
    return hash_columns([list_array], [num_bins], salt, mask_value=mask_value, features=[feature])[0]


class IdColumn:
    """A column taken apart: the ids it holds (`values`), and how to rebuild it around new ids.

    Raises (at construction): ValueError naming the feature and row of a null id inside a list.
    """

    def __init__(self, column: pa.Array, feature: str | None):
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        self.where = f"feature {feature!r}" if feature else "hash_ids_arrow"
        self.is_list = pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
        if not self.is_list:
            self.values = column
            return
        self.large = pa.types.is_large_list(column.type)
        offsets = column.offsets
        first, last = (offsets[0].as_py(), offsets[-1].as_py()) if len(column) else (0, 0)
        # Only the values the rows reference (a sliced array shares a larger child).
        self.values = column.values.slice(first, last - first)
        if self.values.null_count:
            pos = int(np.argmax(~self.values.is_valid().to_numpy(zero_copy_only=False)))
            row = int(np.searchsorted(offsets.to_numpy(), first + pos, side="right")) - 1
            raise ValueError(f"{self.where}: ids must not be null; first null in row {row} (value {pos})")
        self.offsets = pc.subtract(offsets, pa.scalar(first, offsets.type)) if first else offsets
        self.mask = column.is_null() if column.null_count else None

    def rebuild(self, ids: np.ndarray) -> pa.Array:
        """The column's shape (offsets, null rows) around `ids`, one per value: `list<int64>` or flat int64."""
        ids = pa.array(ids, pa.int64())
        if not self.is_list:
            return ids
        make = pa.LargeListArray if self.large else pa.ListArray
        return make.from_arrays(self.offsets, ids, mask=self.mask)


def hash_columns(
    columns: Sequence[pa.Array],
    num_bins: Sequence[int],
    salt: int | Sequence[int] | None = None,
    *,
    mask_value: str | int | None = None,
    features: Sequence[str | None] | None = None,
    hashes: list | None = None,
) -> list[pa.Array]:
    """`hash_ids_arrow` of several columns at once (one hashing pass over all their ids).

    Hashing costs a few dozen numpy passes whatever the number of ids, so
    the ids of all columns of one value type are hashed together and split
    afterwards; each column keeps its own bucket count.

    Example:
      >>> a = pa.array([["x"], []], pa.list_(pa.string()))
      >>> b = pa.array([["x", "y"]], pa.list_(pa.string()))
      >>> ha, hb = hash_columns([a, b], [10, 10])
      >>> ha[0][0] == hb[0][0]
      True

    With a list as `hashes`, each column's `(ids, hashes)` is appended to it in column order: its flat ids
    (strings or integers, as hashed) and their uint64 hashes (Fingerprint64, or SipHash with a salt) before
    the bucket count is applied, for callers that count the ids without hashing them again.
    """
    features = list(features) if features is not None else [None] * len(columns)
    if not (len(columns) == len(num_bins) == len(features)):
        raise ValueError("hash_columns: columns, num_bins and features must have the same length")
    for bins in num_bins:
        _check_bins(bins)
    key = normalize_salt(salt)
    shapes = [IdColumn(c, f) for c, f in zip(columns, features)]
    groups: dict[pa.DataType, list[int]] = {}
    for i, shape in enumerate(shapes):
        groups.setdefault(shape.values.type, []).append(i)
    out: list[pa.Array | None] = [None] * len(shapes)
    kept: list = [None] * len(shapes)
    for members in groups.values():
        # Fingerprints computed already (a crossed column's, `string_hashes.remembered_fingerprints`) are reused.
        known = {i: remembered_fingerprints(shapes[i].values) if key is None else None for i in members}
        todo = [i for i in members if known[i] is None]
        arrays = [shapes[i].values for i in todo]
        where = shapes[todo[0]].where if len(todo) == 1 else "hash_columns"
        try:
            computed = _hash64(arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays), key, where) \
                if arrays else np.zeros(0, np.uint64)
        except ValueError:
            if len(todo) == 1:
                raise
            for i in todo:  # name the column at fault
                _hash64(shapes[i].values, key, shapes[i].where)
            raise
        start = 0
        for i in members:
            array = shapes[i].values
            found = known[i]
            if found is not None:
                part = found
            else:
                part = computed[start : start + len(array)]
                start += len(array)
            mask = _mask(array, mask_value, num_bins[i])
            out[i] = shapes[i].rebuild(_to_buckets(part, num_bins[i], mask))
            kept[i] = (array, part)
    if hashes is not None:
        hashes.extend(kept)
    return out
