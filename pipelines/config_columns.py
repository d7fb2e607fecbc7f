"""The keys of a schema entry that say where its values lie in the file: `column`, `columns`, `from`.

Entries of `input.schema` (csv/tsv only) may carry, beside the feature spec::

    {name: user_id, dtype: string, column: "user_id:token"}        # a header column under another name
    {name: his_cate, dtype: string, columns: {name: his_cate},      # every header column of that name...
     padding: "0", mask: {name: his_mask}}                          # ...less padding and masked-out cells
    {name: hist, columns: {first: 17, count: 50}}                   # 0-based positions (files without a header)
    {name: liked, kind: label, from: rating, at_least: 4}           # 1 when rating >= 4, else 0
    {name: watched, kind: label, from: event, in: [view, buy]}      # 1 when the value is one of them

`pop_column_source` takes these keys out of an entry and returns the
`sparse_io.readers.ColumnSource` they describe; the reader
(`sparse_io.readers.columns`) gives their meaning.
"""

from __future__ import annotations

from typing import Any

from sparse_io.readers.columns import ColumnRange, ColumnSource

__all__ = ["SOURCE_KEYS", "pop_column_source"]

SOURCE_KEYS = ("column", "columns", "padding", "mask", "from", "at_least", "in")
_RANGE_KEYS = ("name", "first", "count")


class SourceKeyError(ValueError):
    """A column-source key is misused; `key` is the one to name, relative to the entry ("": the entry)."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(message)


def _range(value: Any, key: str) -> ColumnRange:
    if not isinstance(value, dict):
        raise SourceKeyError(key, f"must be {{name: ...}} or {{first: ..., count: ...}}, got {value!r}")
    unknown = sorted(set(value) - set(_RANGE_KEYS))
    if unknown:
        raise SourceKeyError(f"{key}.{unknown[0]}", f"unknown key (allowed: {', '.join(_RANGE_KEYS)})")
    try:
        return ColumnRange(**value)
    except ValueError as e:
        raise SourceKeyError(key, str(e)) from None


def pop_column_source(entry: dict) -> tuple[dict, ColumnSource | None]:
    """The entry without its column-source keys, and the `ColumnSource` they describe (None: none given).

    Raises:
      SourceKeyError: naming the key: a range that is not a mapping of name or
        first and count, padding that is not a string or integer, keys that do
        not go together (column and columns, mask without columns, from
        without at_least or in, ...).
    """
    given = {k: entry[k] for k in SOURCE_KEYS if k in entry}
    if not given:
        return entry, None
    rest = {k: v for k, v in entry.items() if k not in SOURCE_KEYS}
    name = rest.get("name")
    padding = given.get("padding")
    if isinstance(padding, int) and not isinstance(padding, bool):
        padding = str(padding)  # YAML reads `padding: 0` as a number; the cell is the text "0"
    elif padding is not None and not isinstance(padding, str):
        raise SourceKeyError("padding", f"must be the text of a padding cell, e.g. \"0\", got {padding!r}")
    one_of = given.get("in")
    if one_of is not None and not isinstance(one_of, list):
        raise SourceKeyError("in", f"must be a list of values, got {one_of!r}")
    if not isinstance(name, str):
        return rest, None  # the spec itself refuses a missing name
    try:
        source = ColumnSource(
            name,
            column=given.get("column"),
            columns=_range(given["columns"], "columns") if "columns" in given else None,
            padding=padding,
            mask=_range(given["mask"], "mask") if "mask" in given else None,
            label_from=given.get("from"),
            at_least=given.get("at_least"),
            one_of=tuple(one_of) if one_of is not None else None,
        )
    except SourceKeyError:
        raise
    except ValueError as e:  # keys that do not go together: the message names them
        raise SourceKeyError("", str(e)) from None
    return rest, source
