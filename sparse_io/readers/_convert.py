"""Raw columns to the schema's Arrow types, with bad rows recorded instead of raised.

Readers hand over whole columns: strings from text formats (criteo, csv),
typed Arrow arrays from JSON and Parquet. Each conversion is vectorised;
a value that cannot be converted marks its row bad in a `RowProblems` with
a reason naming the feature and the check, and Python only runs per bad row
to format that reason. A column whose Arrow type cannot become the feature's
type at all raises `ColumnTypeError`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.arrow import _offsets_and_values
from sparse_io.schema import FeatureSpec

__all__ = [
    "ColumnTypeError",
    "RowProblems",
    "empty_to_null",
    "scalar_column",
    "sparse_column",
    "weights_column_values",
    "list_parts",
    "scalar_parts",
    "np_mask",
    "check_binary_label",
    "FLOAT32_EXACT",
]

_FLOAT_TEXT = r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$"
_INT_TEXT = r"^[+-]?\d+(?:\.0*)?$"  # "260.0" (pandas' way of writing 260) is an integer
_ARROW_TYPES = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
}
FLOAT32_EXACT = 2.0**24  # every integer up to this is exact in float32; above it, only some are
_ISO_TEXT = r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?$"
_ZONE_TEXT = r"(?:Z|[+-]\d{2}:?\d{2})$"
_UNIT_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3}


class ColumnTypeError(ValueError):
    """A column's Arrow type cannot hold the feature's values (e.g. a list for a label)."""


class RowProblems:
    """Which rows of a block are bad, and why (the first reason per row wins).

    Attributes:
      bad: bool `[num_rows]`.
      reasons: row -> reason, for the bad rows.
      padded: bool `[num_rows]` of rows read with trailing fields missing, or None.
    """

    def __init__(self, num_rows: int):
        self.bad = np.zeros(num_rows, dtype=bool)
        self.reasons: dict[int, str] = {}
        self.padded: np.ndarray | None = None

    def add(self, mask: np.ndarray, describe: Callable[[int], str]) -> None:
        """Marks rows where `mask` holds; `describe(row)` is called for newly bad rows only."""
        for row in np.flatnonzero(mask & ~self.bad).tolist():
            self.reasons[row] = describe(row)
        self.bad |= mask


def np_mask(array: pa.Array, *, null_as) -> np.ndarray:
    """A computed Arrow array as numpy, nulls replaced by `null_as`."""
    return pc.fill_null(array, null_as).to_numpy(zero_copy_only=False)


def empty_to_null(values: pa.Array) -> pa.Array:
    """Strings: "" becomes null (an empty field is a missing value)."""
    if not (pa.types.is_string(values.type) or pa.types.is_binary(values.type)):
        keep = pc.not_equal(values, pa.scalar("", values.type))
        return pc.if_else(keep, values, pa.scalar(None, values.type))
    # Only the validity bitmap changes: the offsets and the bytes are shared, not copied.
    n, start = len(values), values.offset
    _, offsets, data = values.buffers()
    ends = np.frombuffer(offsets, dtype=np.int32)[start : start + n + 1]
    valid = ends[1:] != ends[:-1]
    if values.null_count:
        valid &= values.is_valid().to_numpy(zero_copy_only=False)
    elif valid.all():
        return values
    bits = np.packbits(np.concatenate([np.zeros(start, dtype=bool), valid]), bitorder="little")
    return pa.Array.from_buffers(values.type, n, [pa.py_buffer(bits), offsets, data], offset=start)


def _nulled(values: pa.Array, bad: np.ndarray) -> pa.Array:
    if not bad.any():
        return values
    return pc.if_else(pa.array(~bad), values, pa.scalar(None, values.type))


def _show(values: pa.Array, i: int) -> str:
    try:
        text = repr(values[i].as_py())
    except UnicodeDecodeError:  # a string column parsed without UTF-8 validation: show the bytes
        text = repr(values.cast(pa.binary())[i].as_py())
    return text if len(text) <= 60 else text[:57] + "..."


# --- element conversion: returns (typed values, bad mask, why(i)) -------------------------------


def _not_hex32(values: pa.StringArray) -> np.ndarray:
    """True where a (non-null) value is not exactly 8 hex digits; checked on the bytes, no regex."""
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset : values.offset + n + 1]
    data = values.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    lengths = np.diff(offsets)
    eight = valid & (lengths == 8)
    bad = valid & ~eight
    if eight.any():
        if not lengths[~eight].any():  # the 8-byte values lie back to back: no gather needed
            chars = data[offsets[0] : offsets[-1]].reshape(-1, 8)
        else:
            chars = data[offsets[:-1][eight, None] + np.arange(8)]
        # uint8 arithmetic wraps, so one comparison checks each range; then eight one-byte
        # booleans read as one uint64 are all true exactly when it is 0x0101010101010101.
        digit = ((chars - np.uint8(48)) < 10) | (((chars | np.uint8(0x20)) - np.uint8(97)) < 6)
        all_hex = np.ascontiguousarray(digit).view(np.uint64).ravel() == 0x0101010101010101
        bad[eight] = ~all_hex
    return bad


def _from_text(values: pa.Array, spec: FeatureSpec, *, hex32: bool):
    """Strings (nulls stay null) to `spec.dtype`."""
    values = values.cast(pa.string())
    n = len(values)
    if spec.time_unit is not None:
        return _timestamps_from_text(values, spec, spec.time_unit)
    if spec.dtype == "string":
        if not hex32:
            return values, np.zeros(n, dtype=bool), None
        return values, _not_hex32(values), lambda i: f"{_show(values, i)} is not an 8-digit hex string"
    integral = spec.dtype in ("int64", "int32")
    target = _ARROW_TYPES[spec.dtype]
    kind = "an integer" if integral else "a number"
    why = lambda i: (  # noqa: E731
        f"{_show(values, i)} is not {kind} (or is out of {spec.dtype} range"
        + (", or an integer float32 would round)" if spec.dtype == "float32" else ")")
    )
    # Fast path: Arrow's own parser takes the whole column when every value is well formed.
    try:
        typed = pc.cast(values, target)
    except pa.ArrowInvalid:
        pass
    else:
        if not integral:
            return typed, _not_float(values, typed, spec), why
        # Arrow's integer parser also takes hex ("0x1F"); decimal text is the contract, whatever the
        # neighbouring values are, so such a value is bad here exactly as on the pattern path below.
        hexadecimal = np_mask(pc.match_substring(values, "x", ignore_case=True), null_as=False)
        if not hexadecimal.any():
            return typed, hexadecimal, why
    # Some value is not: find which with a strict pattern ("260.0" and "+5" are integers, "nan" no number).
    ok = np_mask(pc.match_substring_regex(values, _INT_TEXT if integral else _FLOAT_TEXT), null_as=True)
    clean = _nulled(values, ~ok)
    if integral:
        clean = pc.replace_substring_regex(pc.replace_substring_regex(clean, r"\.0*$", ""), r"^\+", "")
        ok &= ~_out_of_range(clean, spec.dtype)
        clean = _nulled(clean, ~ok)
    try:
        typed = pc.cast(clean, target)
    except pa.ArrowInvalid as e:  # not expected: every value left is well formed and in range
        raise ValueError(f"{spec.name}: cannot parse a value: {e}") from None
    bad = ~ok
    if not integral:
        bad |= _not_float(clean, typed, spec)
    return typed, bad, why


def _not_float(text: pa.Array, typed: pa.Array, spec: FeatureSpec) -> np.ndarray:
    """Bad float values: not finite, or an integer (written as one: `123`, `123.0`) float32 would round."""
    bad = ~np_mask(pc.is_finite(typed), null_as=True)
    magnitudes = np.abs(_floats(typed)) if spec.dtype == "float32" else np.zeros(0)
    if np.any(magnitudes[np.isfinite(magnitudes)] > FLOAT32_EXACT):
        integer = np_mask(pc.match_substring_regex(text, _INT_TEXT), null_as=False) & ~bad
        if integer.any():
            bad |= _rounded_integers(_floats(pc.cast(_nulled(text, ~integer), pa.float64())), typed)
    return bad


def _floats(values: pa.Array) -> np.ndarray:
    return pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _rounded_integers(exact: np.ndarray, typed: pa.Array) -> np.ndarray:
    """Where an integral value (float64 `exact`) changed on its way into float32 `typed`.

    A decimal fraction (0.1) is inexact in any binary float and is taken as
    such; an integer count or id is not, so one float32 would round (2**24 + 1
    and above) is refused instead of silently becoming its neighbour. The
    integer is known at float64 precision (exact up to 2**53). Values written
    as floats (`1.5e9`, a float column) are floats and narrow as floats do.
    """
    with np.errstate(invalid="ignore"):
        integral = np.isfinite(exact) & (np.floor(exact) == exact) & (np.abs(exact) > FLOAT32_EXACT)
    if not integral.any():
        return integral
    narrowed = pc.fill_null(typed, 0).to_numpy(zero_copy_only=False).astype(np.float64)
    return integral & (narrowed != exact)


def _timestamps_from_text(values: pa.Array, spec: FeatureSpec, unit: str):
    """Unix numbers (already in `unit`, the spec's time unit) or ISO-8601 text to int64 in that unit."""
    n = len(values)
    why = lambda i: f"{_show(values, i)} is not a timestamp (unix {unit}, or ISO-8601 in whole {unit})"  # noqa: E731
    numeric = np_mask(pc.match_substring_regex(values, r"^[+-]?\d+$"), null_as=False)
    iso = np_mask(pc.match_substring_regex(values, _ISO_TEXT), null_as=False)
    present = values.is_valid().to_numpy(zero_copy_only=False)
    bad = present & ~numeric & ~iso
    if numeric.any():
        bad |= numeric & _out_of_range(pc.replace_substring_regex(values, r"^\+", ""), "int64")
    out = np.zeros(n, dtype=np.int64)
    if numeric.any():
        digits = pc.replace_substring_regex(_nulled(values, ~numeric | bad), r"^\+", "")
        out[numeric & ~bad] = pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False)[numeric & ~bad]
    if iso.any():
        zoned = iso & np_mask(pc.match_substring_regex(values, _ZONE_TEXT), null_as=False)
        nanos = np.zeros(n, dtype=np.int64)
        for mask, target in ((zoned, pa.timestamp("ns", "UTC")), (iso & ~zoned, pa.timestamp("ns"))):
            if not mask.any():
                continue
            subset = values.filter(pa.array(mask))
            try:
                parsed = pc.cast(subset, target).cast(pa.int64()).to_numpy(zero_copy_only=False)
            except pa.ArrowInvalid:  # a well-formed but impossible date (month 13): find it value by value
                parsed, wrong = np.zeros(len(subset), dtype=np.int64), np.zeros(len(subset), dtype=bool)
                for j in range(len(subset)):
                    try:
                        parsed[j] = pc.cast(subset.slice(j, 1), target).cast(pa.int64())[0].as_py()
                    except pa.ArrowInvalid:
                        wrong[j] = True
                bad[np.flatnonzero(mask)[wrong]] = True
            nanos[mask] = parsed
        scale = _UNIT_NANOS[unit]
        finer = iso & ~bad & (nanos % scale != 0)
        bad |= finer
        out[iso & ~bad] = (nanos // scale)[iso & ~bad]

        def why(i, base=why):
            if finer[i]:
                return f"{_show(values, i)} is finer than the timestamp unit {unit!r} (declare a finer unit)"
            return base(i)

    typed = pa.array(out, pa.int64(), mask=~present | bad)
    return typed, bad, why


def _out_of_range(text: pa.Array, dtype: str) -> np.ndarray:
    """Where decimal integer text ("-" optional, digits only) lies outside `dtype`, compared digit by digit."""
    info = np.iinfo(np.dtype(dtype))
    negative = np_mask(pc.starts_with(text, "-"), null_as=False)
    digits = pc.utf8_ltrim(pc.replace_substring_regex(text, r"^-", ""), characters="0")
    lengths = np_mask(pc.utf8_length(digits), null_as=0)
    width = len(str(info.max))  # the same for -min: 19 digits for int64, 10 for int32
    limits = pa.array(np.where(negative, str(-int(info.min)), str(info.max)))
    above = np_mask(pc.greater(digits, limits), null_as=False)  # text order is number order at equal length
    return (lengths > width) | ((lengths == width) & above)


def _from_arrow(values: pa.Array, spec: FeatureSpec, column: str):
    """Typed Arrow values (nulls stay null) to `spec.dtype`; ColumnTypeError (naming `column`) if impossible."""
    if pa.types.is_dictionary(values.type):  # e.g. pandas categoricals written to Parquet
        values = values.dictionary_decode()
    t = values.type
    n = len(values)
    target = _ARROW_TYPES[spec.dtype]
    no_bad = np.zeros(n, dtype=bool)
    if pa.types.is_null(t):
        return pa.nulls(n, target), no_bad, None
    if spec.dtype == "string":
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t):
            return values.cast(target), no_bad, None
        raise ColumnTypeError(f"{column}: expected strings, got {t}")
    if spec.time_unit is not None:
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return _timestamps_from_text(values, spec, spec.time_unit)
        if pa.types.is_timestamp(t):
            nanos = pc.cast(values, pa.timestamp("ns", tz=t.tz)).cast(pa.int64())
            raw = pc.fill_null(nanos, 0).to_numpy(zero_copy_only=False)
            scale = _UNIT_NANOS[spec.time_unit]
            bad = raw % scale != 0
            typed = pa.array(raw // scale, pa.int64(), mask=~values.is_valid().to_numpy(zero_copy_only=False) | bad)
            return typed, bad, lambda i: f"{_show(values, i)} is finer than the timestamp unit {spec.time_unit!r}"
    if pa.types.is_timestamp(t) and spec.dtype == "int64":
        # ISO-8601 text that JSON inference turned into timestamps: seconds since the epoch.
        seconds = pc.cast(values, pa.timestamp("s", tz=t.tz), safe=False)
        return seconds.cast(pa.int64()), no_bad, None
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise ColumnTypeError(f"{column}: expected numbers for {spec.dtype}, got {t}")
    if spec.dtype in ("float32", "float64"):
        typed = pc.cast(values, target, safe=False)
        bad = ~np_mask(pc.is_finite(typed), null_as=True)
        if pa.types.is_integer(t):
            # An integer column the float type would round is refused (floats narrow as floats do).
            ints = pc.fill_null(values, 0).to_numpy(zero_copy_only=False)
            narrowed = pc.fill_null(typed, 0).to_numpy(zero_copy_only=False)
            # Compared back in the integers' own type, over the floats that type holds: [-2^63, 2^63) for
            # signed (-2^63 itself is exact), [0, 2^64) for unsigned.
            unsigned = ints.dtype.kind == "u"
            low, high = (0.0, 2.0**64) if unsigned else (-(2.0**63), 2.0**63)
            fits = (narrowed >= low) & (narrowed < high)
            with np.errstate(invalid="ignore"):
                back = np.where(fits, narrowed, 0).astype(ints.dtype if unsigned else np.int64)
            bad |= (back != ints) | ~fits
            bad &= values.is_valid().to_numpy(zero_copy_only=False)
        return typed, bad, lambda i: f"{_show(values, i)} is not a finite {spec.dtype} (or {spec.dtype} would round it)"
    info = np.iinfo(np.dtype(spec.dtype))
    raw = pc.fill_null(values, 0).to_numpy(zero_copy_only=False)
    if raw.dtype.kind == "i":
        raw = raw.astype(np.int64, copy=False)
    if pa.types.is_floating(t):
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(raw) | (np.floor(raw) != raw) | (raw < info.min) | (raw >= 2.0**63)
            if spec.dtype == "int32":
                bad |= raw > info.max
    else:
        bad = raw > info.max if raw.dtype.kind == "u" else (raw < info.min) | (raw > info.max)
    typed = pc.cast(_nulled(values, bad), target, safe=False)
    return typed, bad, lambda i: f"{_show(values, i)} is not an {spec.dtype} integer"


def _convert(values: pa.Array, spec: FeatureSpec, *, text: bool, hex32: bool = False, column: str | None = None):
    return _from_text(values, spec, hex32=hex32) if text else _from_arrow(values, spec, column or spec.name)


# --- columns ---------------------------------------------------------------------------------------


# The columns of a history ingest's events that grouping consumes (`FeatureSpec.history_role`), in words.
_GROUPED_ROLES = {"key": "key", "time": "time", "item": "item", "weight": "weight", "item_column": "item's value"}


def scalar_column(values: pa.Array, spec: FeatureSpec, problems: RowProblems, *, text: bool) -> pa.Array:
    """A dense or label column; nulls are missing values (a missing label is a bad row)."""
    if isinstance(values.type, (pa.ListType, pa.LargeListType, pa.FixedSizeListType, pa.StructType)):
        raise ColumnTypeError(f"{spec.name}: expected a scalar {spec.dtype}, got {values.type}")
    if text:
        values = empty_to_null(values)
    typed, bad, why = _convert(values, spec, text=text)
    problems.add(bad, lambda r: f"{spec.name}: {why(r)}")
    if spec.kind == "label":
        problems.add(
            ~values.is_valid().to_numpy(zero_copy_only=False), lambda r: f"{spec.name}: missing label"
        )
        if spec.binary_label:
            check_binary_label(typed, spec, problems)
    elif spec.history_role in _GROUPED_ROLES:  # histories are grouped, ordered and listed by these
        needed = _GROUPED_ROLES[spec.history_role]
        problems.add(
            ~values.is_valid().to_numpy(zero_copy_only=False),
            lambda r: f"{spec.name}: missing (every event of a history needs its {needed})",
        )
    return typed


def check_binary_label(typed: pa.Array, spec: FeatureSpec, problems: RowProblems) -> None:
    """Marks rows whose click label is not 0 or 1 (declare `label_type` for other values)."""
    labels = pc.fill_null(typed, 0).to_numpy(zero_copy_only=False)
    problems.add(
        (labels != 0) & (labels != 1),
        lambda r: f"{spec.name}: label {labels[r]} is not 0 or 1 (a click label; declare label_type "
        "'integer' or 'real' for other values)",
    )


def list_parts(column: pa.Array, spec: FeatureSpec) -> tuple[np.ndarray, pa.Array]:
    """(row_splits int64 [n+1], element values) of a list column; a null list is empty."""
    if isinstance(column.type, pa.FixedSizeListType):
        column = column.cast(pa.list_(column.type.value_type))
    if not isinstance(column.type, (pa.ListType, pa.LargeListType)):
        raise ColumnTypeError(f"{spec.name}: expected a list, got {column.type}")
    return _offsets_and_values(column, spec.name)


def scalar_parts(column: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(row_splits, values) of a scalar column read as 0- or 1-element lists (null -> empty)."""
    present = column.is_valid().to_numpy(zero_copy_only=False)
    splits = np.zeros(len(column) + 1, dtype=np.int64)
    np.cumsum(present, out=splits[1:])
    return splits, column.filter(pa.array(present)) if not present.all() else column


def _rows_and_first(mask: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, dict[int, int]]:
    """Rows holding a masked element, and the first such element of each row."""
    positions = np.flatnonzero(mask)
    rows, first = np.unique(parents[positions], return_index=True)
    return rows, dict(zip(rows.tolist(), positions[first].tolist()))


def _mark_elements(problems, mask, parents, num_rows, describe) -> None:
    if not mask.any():
        return
    rows, first = _rows_and_first(mask, parents)
    row_mask = np.zeros(num_rows, dtype=bool)
    row_mask[rows] = True
    problems.add(row_mask, lambda r: describe(first[r]))


def _list_array(splits: np.ndarray, values: pa.Array) -> pa.ListArray:
    if splits[-1] > np.iinfo(np.int32).max:
        raise ValueError("a block holds more than 2**31 ids; lower batch_size")
    return pa.ListArray.from_arrays(pa.array(splits.astype(np.int32)), values)


def sparse_column(
    splits: np.ndarray,
    elements: pa.Array,
    spec: FeatureSpec,
    problems: RowProblems,
    *,
    text: bool,
    hex32: bool = False,
) -> pa.ListArray:
    """An id list column from row splits and raw elements, ids checked.

    Bad rows: an element that does not convert, a null or empty id, a
    negative id, an id >= `spec.vocabulary_size`.
    """
    num_rows = len(splits) - 1
    if text:
        elements = empty_to_null(elements)
    parents = np.repeat(np.arange(num_rows), np.diff(splits))
    typed, bad, why = _convert(elements, spec, text=text, hex32=hex32)
    _mark_elements(problems, bad, parents, num_rows, lambda e: f"{spec.name}: id {why(e)}")
    missing = ~elements.is_valid().to_numpy(zero_copy_only=False)
    _mark_elements(problems, missing, parents, num_rows, lambda e: f"{spec.name}: empty or null id in list")
    if spec.dtype != "string" and len(typed):
        ids = pc.fill_null(typed, 0).to_numpy(zero_copy_only=False)
        _mark_elements(
            problems, ids < 0, parents, num_rows, lambda e: f"{spec.name}: id {ids[e]} is negative"
        )
        if spec.vocabulary_size is not None:
            _mark_elements(
                problems,
                ids >= spec.vocabulary_size,
                parents,
                num_rows,
                lambda e: f"{spec.name}: id {ids[e]} is >= vocabulary size {spec.vocabulary_size}",
            )
    return _list_array(splits, typed)


def weights_column_values(
    splits: np.ndarray,
    elements: pa.Array,
    id_splits: np.ndarray,
    spec: FeatureSpec,
    problems: RowProblems,
    *,
    text: bool,
) -> pa.ListArray:
    """The float32 weights list column of `spec`; rows whose lengths differ from the ids' are bad."""
    name = f"{spec.name}__weights"
    weight_spec = FeatureSpec(spec.name, "dense", "float32")
    num_rows = len(splits) - 1
    if text:
        elements = empty_to_null(elements)
    typed, bad, why = _convert(elements, weight_spec, text=text, column=name)
    parents = np.repeat(np.arange(num_rows), np.diff(splits))
    _mark_elements(problems, bad, parents, num_rows, lambda e: f"{name}: weight {why(e)}")
    missing = ~elements.is_valid().to_numpy(zero_copy_only=False)
    _mark_elements(problems, missing, parents, num_rows, lambda e: f"{name}: empty or null weight")
    n_weights, n_ids = np.diff(splits), np.diff(id_splits)
    problems.add(n_weights != n_ids, lambda r: f"{name}: {n_weights[r]} weights for {n_ids[r]} ids")
    return _list_array(splits, typed)
