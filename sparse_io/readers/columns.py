r"""Where a feature's values lie in a delimited log, when that is not the header column of its own name.

A `ColumnSource` names one feature of the schema and says how it is read:

* `column="user_id:token"`: that one header column, under the feature's name
  (MovieLens' typed headers, names with characters a feature name cannot take);
* `columns=ColumnRange(name="his_cate")` (every header column of that exact
  name, in file order) or `columns=ColumnRange(first=17, count=50)` (0-based
  field positions, for files without a header): one id per cell, the cells of
  a row read as one id list (a sparse feature). `padding="0"` drops the cells
  equal to it; `mask=ColumnRange(...)` (as many columns as `columns`) drops
  the positions whose mask cell is 0 (a mask cell must be a number equal to 0
  or 1, anything else is a dead letter). Cells that are missing (a null token)
  are dropped too;
* `label_from="rating"` (a header column, or a 0-based position) with
  `at_least=4` (1 where the value is >= 4, else 0) or `one_of=(4, 5)` (1 where
  it is one of them; all numbers, compared as numbers, or all strings,
  compared as the cell's text): a derived 0/1 label. The source column is kept
  only if a feature of the schema reads it too. A source value that is missing
  or is not a number (for `at_least` and numeric `one_of`) is a dead letter.

A header may name a column more than once when every feature that reads it
says so (`columns: {name: ...}` or `mask: {name: ...}`); reading such a name
by a feature's own name, `column` or `label_from` is an error.

Without a header, positions given by `columns`, `mask` and an integer
`label_from` are taken first; the schema's other columns (a feature's own
name, and its weights) take the remaining positions from 0 in schema order.

`plan_columns` resolves the sources against one file's header (or the lack of
one) into a `ColumnPlan`: the field position(s) each column is read from.

Example:
  >>> from sparse_io.schema import FeatureSpec, Schema
  >>> src = ColumnSource("his_cate", columns=ColumnRange(name="his_cate"), padding="0")
  >>> schema = Schema([FeatureSpec("label", "label"), FeatureSpec("his_cate", dtype="string")])
  >>> plan = plan_columns(schema, [src], ["label", "his_cate", "his_cate"], "x.csv")
  >>> plan.lists["his_cate"].positions
  (1, 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sparse_io.errors import LayoutError
from sparse_io.schema import Schema, weights_column

__all__ = ["ColumnRange", "ColumnSource", "ColumnPlan", "ListColumns", "DerivedLabel", "check_sources",
           "plan_columns"]


def _count(value, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{what} must be an integer >= {low}, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class ColumnRange:
    """Several columns: every header column called `name`, or `count` fields from position `first` (0-based).

    Raises:
      ValueError: both a name and positions, neither, or a position that is
        not an integer >= 0 (a count >= 1).
    """

    name: str | None = None
    first: int | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if self.name is not None:
            if self.first is not None or self.count is not None:
                raise ValueError("give a name, or first and count, not both")
            if not isinstance(self.name, str) or not self.name:
                raise ValueError(f"name must be a non-empty string, got {self.name!r}")
            return
        if self.first is None or self.count is None:
            raise ValueError("give a name, or first and count (0-based positions)")
        _count(self.first, "first", 0)
        _count(self.count, "count", 1)

    @property
    def positions(self) -> tuple[int, ...] | None:
        """The field positions, or None when the range is a header name."""
        if self.name is not None:
            return None
        assert self.first is not None and self.count is not None
        return tuple(range(self.first, self.first + self.count))

    def describe(self) -> str:
        """The range as a config writes it."""
        return f"{{name: {self.name}}}" if self.name is not None else f"{{first: {self.first}, count: {self.count}}}"


@dataclasses.dataclass(frozen=True)
class ColumnSource:
    """How feature `feature` is read (see the module docstring); only one of column, columns, label_from.

    Raises:
      ValueError: keys that do not go together (naming them), or of the wrong type.
    """

    feature: str
    column: str | None = None
    columns: ColumnRange | None = None
    padding: str | None = None
    mask: ColumnRange | None = None
    label_from: str | int | None = None
    at_least: float | None = None
    one_of: tuple | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("column", "columns", "label_from") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"feature {self.feature!r}: give one of column, columns, from; got {', '.join(given)}")
        if self.column is not None and (not isinstance(self.column, str) or not self.column):
            raise ValueError(f"feature {self.feature!r}: column must be a header column name, got {self.column!r}")
        for key in ("columns", "mask"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), ColumnRange):
                raise ValueError(f"feature {self.feature!r}: {key} must be a ColumnRange")
        if self.columns is None and (self.padding is not None or self.mask is not None):
            raise ValueError(f"feature {self.feature!r}: padding and mask apply to columns")
        if self.padding is not None and not isinstance(self.padding, str):
            raise ValueError(f"feature {self.feature!r}: padding must be a string, got {self.padding!r}")
        if self.columns is not None and self.mask is not None:
            cols, mask = self.columns.positions, self.mask.positions
            if cols is not None and mask is not None:
                if len(cols) != len(mask):
                    raise ValueError(f"feature {self.feature!r}: the mask has {len(mask)} columns, "
                                     f"columns has {len(cols)}")
                if set(cols) & set(mask):
                    raise ValueError(f"feature {self.feature!r}: the mask's positions overlap the columns'")
        self._check_label()

    def _check_label(self) -> None:
        name = self.feature
        if self.label_from is None:
            if self.at_least is not None or self.one_of is not None:
                raise ValueError(f"feature {name!r}: at_least and in apply to a label derived with from")
            return
        if isinstance(self.label_from, bool) or not isinstance(self.label_from, (str, int)) or (
                isinstance(self.label_from, int) and self.label_from < 0) or self.label_from == "":
            raise ValueError(f"feature {name!r}: from must be a header column name or a position >= 0, "
                             f"got {self.label_from!r}")
        if (self.at_least is None) == (self.one_of is None):
            raise ValueError(f"feature {name!r}: a label derived with from needs at_least or in (one of them)")
        if self.at_least is not None and (isinstance(self.at_least, bool)
                                          or not isinstance(self.at_least, (int, float))
                                          or self.at_least != self.at_least):
            raise ValueError(f"feature {name!r}: at_least must be a number, got {self.at_least!r}")
        if self.one_of is not None:
            values = self.one_of
            if isinstance(values, list):
                values = tuple(values)
                object.__setattr__(self, "one_of", values)
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            strings = all(isinstance(v, str) for v in values)
            if not isinstance(values, tuple) or not values or not (numbers or strings):
                raise ValueError(f"feature {name!r}: in must be a non-empty list of numbers or of strings, "
                                 f"got {self.one_of!r}")

    @property
    def numeric_set(self) -> bool:
        """`one_of` holds numbers (compared as numbers), not strings."""
        return self.one_of is not None and not isinstance(self.one_of[0], str)

    def header_names(self) -> list[str]:
        """The header column names this source reads (empty when it reads positions only)."""
        names = [self.column] if self.column is not None else []
        names += [r.name for r in (self.columns, self.mask) if r is not None and r.name is not None]
        if isinstance(self.label_from, str):
            names.append(self.label_from)
        return names


def check_sources(schema: Schema, sources: Sequence[ColumnSource]) -> tuple[ColumnSource, ...]:
    """Checks each source against its feature's spec; returns them as a tuple.

    Raises:
      ValueError: a source for a feature the schema lacks, two for one feature,
        `columns` for a feature that is not an unweighted sparse one, `column`
        for a weighted one, `from` for a feature that is not a numeric label.
    """
    sources = tuple(sources)
    seen: set[str] = set()
    for src in sources:
        if not isinstance(src, ColumnSource):
            raise TypeError(f"column sources must be ColumnSource, got {type(src).__name__}")
        if src.feature not in schema:
            raise ValueError(f"a column source names feature {src.feature!r}, which is not in the schema")
        if src.feature in seen:
            raise ValueError(f"feature {src.feature!r} has two column sources")
        seen.add(src.feature)
        spec = schema[src.feature]
        if src.columns is not None and (not spec.is_sparse or spec.weighted):
            raise ValueError(f"feature {src.feature!r}: columns makes an id list: the feature must be sparse "
                             f"and not weighted (it is {spec.kind}{', weighted' if spec.weighted else ''})")
        if src.column is not None and spec.weighted:
            raise ValueError(f"feature {src.feature!r}: column cannot rename a weighted feature (its weights "
                             "column is found by the feature's name)")
        if src.label_from is not None and (spec.kind != "label" or spec.dtype == "string"):
            raise ValueError(f"feature {src.feature!r}: from derives a label: the entry must be kind: label with "
                             f"a numeric dtype (it is {spec.kind}, {spec.dtype})")
    return sources


@dataclasses.dataclass(frozen=True)
class ListColumns:
    """The field positions of a list feature read from several columns, and of its mask (or None)."""

    positions: tuple[int, ...]
    mask: tuple[int, ...] | None
    padding: str | None


@dataclasses.dataclass(frozen=True)
class DerivedLabel:
    """A 0/1 label computed from the field at `position` (named `column` in reasons)."""

    position: int
    column: str
    at_least: float | None
    one_of: tuple | None
    numeric_set: bool


@dataclasses.dataclass(frozen=True)
class ColumnPlan:
    """Where each column of `schema.arrow_schema()` is read from in one file.

    Attributes:
      num_fields: the fields in a line (the header's count, or what the positions need without one).
      single: arrow column name (a feature, or `f__weights`) -> the field position of its one column.
      lists: sparse feature -> `ListColumns` (from `columns`).
      labels: label feature -> `DerivedLabel` (from `label_from`).
    """

    num_fields: int
    single: dict[str, int]
    lists: dict[str, ListColumns]
    labels: dict[str, DerivedLabel]

    @property
    def field_names(self) -> list[str]:
        """A distinct name per field (headers may repeat names; the CSV parser needs distinct ones)."""
        return [f"f{i}" for i in range(self.num_fields)]

    @property
    def used(self) -> list[int]:
        """The positions any column reads, ascending."""
        used = set(self.single.values())
        for lst in self.lists.values():
            used.update(lst.positions)
            used.update(lst.mask or ())
        used.update(label.position for label in self.labels.values())
        return sorted(used)


def _plain_columns(schema: Schema, sources: dict[str, ColumnSource]) -> list[tuple[str, str]]:
    """(arrow column, the header name it is read from) of the columns no `columns`/`from` reads."""
    out = []
    for spec in schema:
        src = sources.get(spec.name)
        if src is not None and (src.columns is not None or src.label_from is not None):
            continue
        out.append((spec.name, src.column if src is not None and src.column is not None else spec.name))
        if spec.weighted:
            out.append((weights_column(spec.name), weights_column(spec.name)))
    return out


def plan_columns(
    schema: Schema, sources: Sequence[ColumnSource], header: list[str] | None, path: str
) -> ColumnPlan:
    """Resolves `sources` (checked by `check_sources`) against one file's header, or its absence.

    Raises:
      LayoutError (naming `path`): a needed header column is missing, a name
        a feature reads by itself (its own name, `column`, `from`) appears more
        than once, a mask has another number of columns than its list, a
        position lies beyond the header, or (without a header) a source names
        a header column.
    """
    by_feature = {s.feature: s for s in sources}
    plain = _plain_columns(schema, by_feature)
    if header is None:
        return _plan_positions(schema, sources, plain, path)
    index: dict[str, list[int]] = {}
    for i, name in enumerate(header):
        index.setdefault(name, []).append(i)
    missing: list[str] = []
    repeated: list[str] = []

    def one(name: str) -> int:
        found = index.get(name, [])
        if not found:
            missing.append(name)
        elif len(found) > 1:
            repeated.append(name)
        return found[0] if found else -1

    def many(rng: ColumnRange) -> tuple[int, ...]:
        positions = rng.positions
        if positions is None:
            assert rng.name is not None
            found = index.get(rng.name, [])
            if not found:
                missing.append(rng.name)
            return tuple(found)
        if positions[-1] >= len(header):
            raise LayoutError(path, f"columns {rng.describe()} reach position {positions[-1]}, but the header "
                                    f"has {len(header)} columns")
        return positions

    single = {column: one(name) for column, name in plain}
    lists, labels = {}, {}
    for src in sources:
        if src.columns is not None:
            positions = many(src.columns)
            mask = many(src.mask) if src.mask is not None else None
            if src.mask is not None and mask and positions and len(mask) != len(positions):
                raise LayoutError(path, f"feature {src.feature!r}: the mask {src.mask.describe()} has {len(mask)} "
                                        f"columns, columns {src.columns.describe()} has {len(positions)}")
            lists[src.feature] = ListColumns(positions, mask, src.padding)
        elif src.label_from is not None:
            if isinstance(src.label_from, int):
                if src.label_from >= len(header):
                    raise LayoutError(path, f"feature {src.feature!r}: from {src.label_from} lies beyond the "
                                            f"header's {len(header)} columns")
                position, column = src.label_from, header[src.label_from]
            else:
                position, column = one(src.label_from), src.label_from
            labels[src.feature] = DerivedLabel(position, column, src.at_least, src.one_of, src.numeric_set)
    if repeated:
        raise LayoutError(path, f"the header names column(s) {sorted(set(repeated))} more than once, and a feature "
                                "reads one by its name; read repeated columns as a list with columns: {name: ...}")
    if missing:
        raise LayoutError(path, f"the header lacks column(s) {list(dict.fromkeys(missing))} that the schema "
                                f"needs; it has {header}")
    return ColumnPlan(len(header), single, lists, labels)


def _plan_positions(
    schema: Schema, sources: Sequence[ColumnSource], plain: list[tuple[str, str]], path: str
) -> ColumnPlan:
    named = [(s.feature, n) for s in sources for n in s.header_names()]
    if named:
        feature, name = named[0]
        raise LayoutError(path, f"feature {feature!r} reads header column {name!r}, but the file has no header "
                                "(give 0-based positions: columns: {first: ..., count: ...})")
    lists, labels = {}, {}
    claimed: set[int] = set()
    for src in sources:
        if src.columns is not None:
            positions = src.columns.positions
            mask = src.mask.positions if src.mask is not None else None
            assert positions is not None
            lists[src.feature] = ListColumns(positions, mask, src.padding)
            claimed.update(positions)
            claimed.update(mask or ())
        elif isinstance(src.label_from, int):
            labels[src.feature] = DerivedLabel(src.label_from, f"field {src.label_from}", src.at_least, src.one_of,
                                               src.numeric_set)
            claimed.add(src.label_from)
    single, position = {}, 0
    for column, _ in plain:
        while position in claimed:
            position += 1
        single[column] = position
        position += 1
    num_fields = max([position, *(p + 1 for p in claimed)])
    return ColumnPlan(num_fields, single, lists, labels)
