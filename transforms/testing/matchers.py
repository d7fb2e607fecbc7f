"""Matchers for `apache_beam.testing.util.assert_that` over our PCollections.

Beam's `equal_to` compares elements, and our elements are `pa.RecordBatch`es
whose split into batches is the runner's choice; these matchers compare what
the batches hold instead: their rows, their columns and types, and the dead
letters beside them. A mismatch raises `BeamAssertException` with a message
that names the difference (the row and column, the type, the missing reason).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
from apache_beam.testing.util import BeamAssertException

from sparse_io.dead_letters import DeadLetter
from sparse_io.schema import Schema

__all__ = ["equal_to_rows", "has_schema", "dead_letters"]

_SHOWN = 5  # differences listed in a message


def _tables(actual: Iterable, matcher: str) -> list[pa.RecordBatch | pa.Table]:
    found = list(actual)
    for i, element in enumerate(found):
        if not isinstance(element, (pa.RecordBatch, pa.Table)):
            raise BeamAssertException(
                f"{matcher}: element {i} is a {type(element).__name__}, not a pa.RecordBatch"
            )
    return found


def _frozen(value):
    # A hashable, order-preserving form of one cell, NaN equal to NaN.
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def _row_key(row: Mapping) -> tuple:
    return tuple(sorted((k, _frozen(v)) for k, v in row.items()))


def _columns_differing(expected: Mapping, got: Mapping) -> list[str]:
    return [c for c in expected if _frozen(expected[c]) != _frozen(got.get(c))]


def _describe_pair(expected: Mapping, got: Mapping) -> str:
    return "; ".join(
        f"column {c!r}: expected {expected[c]!r}, got {got.get(c)!r}" for c in _columns_differing(expected, got)
    )


# Matchers are named in lower case, as Beam's own (equal_to, is_empty): they read as the assertion.
class equal_to_rows:
    """Matches a PCollection of `pa.RecordBatch` whose rows, all batches together, equal `expected`.

    Args:
      expected: the rows, as dicts column -> value (`RecordBatch.to_pylist()`
        form: lists for list columns, None for nulls). Floats compare
        exactly, NaN equal to NaN.
      columns: compare only these columns (default: every column, and each
        expected dict must name exactly the batches' columns).
      ordered: compare in order (batches in arrival order, rows in batch
        order); only meaningful when the rows arrive as one batch, since a
        runner keeps no order between elements. Default: as a multiset.

    Raises (when called by `assert_that`): `BeamAssertException` naming the
    count difference, the column(s) missing or extra, and for each expected
    row not found the closest output row and the columns where it differs.

    Example:
      >>> import apache_beam as beam
      >>> from apache_beam.testing.util import assert_that
      >>> from transforms.testing import test_pipeline
      >>> with test_pipeline() as p:
      ...     batches = p | beam.Create([pa.record_batch({"label": [1], "C1": [[42]], "I1": [0.5]})])
      ...     _ = assert_that(batches, equal_to_rows([{"label": 1, "C1": [42]}], columns=["label", "C1"]))
    """

    def __init__(self, expected: Sequence[Mapping], *, columns: Sequence[str] | None = None, ordered: bool = False):
        self._expected = [dict(row) for row in expected]
        self._columns = list(columns) if columns is not None else None
        self._ordered = ordered

    def __call__(self, actual: Iterable) -> None:
        """Checks the PCollection's contents (what `assert_that` hands a matcher); raises on a difference."""
        tables = _tables(actual, "equal_to_rows")
        if not tables and self._expected:
            raise BeamAssertException(f"equal_to_rows: expected {len(self._expected)} rows, the PCollection is empty")
        names = self._columns
        present: list[str] = []
        for t in tables:
            present += [n for n in t.schema.names if n not in present]
        if names is None:
            names = present
        else:
            missing = [n for n in names if n not in present] if tables else []
            if missing:
                raise BeamAssertException(f"equal_to_rows: the output has no column(s) {missing}; it has {present}")
        got = [{n: row.get(n) for n in names} for t in tables for row in t.to_pylist()]
        for i, row in enumerate(self._expected):
            extra, lacking = sorted(set(row) - set(names)), [n for n in names if n not in row]
            if extra or lacking:
                what = f"names column(s) {extra} the output lacks" if extra else f"lacks column(s) {lacking}"
                hint = "" if self._columns is not None else "; pass columns=[...] to compare some columns only"
                raise BeamAssertException(f"equal_to_rows: expected row {i} {what} (compared: {names}){hint}")
        if self._ordered:
            self._check_ordered(got)
        else:
            self._check_unordered(got)

    def _check_ordered(self, got: list[dict]) -> None:
        for i, (want, have) in enumerate(zip(self._expected, got)):
            if _row_key(want) != _row_key(have):
                raise BeamAssertException(f"equal_to_rows: row {i} differs: {_describe_pair(want, have)}")
        if len(got) != len(self._expected):
            raise BeamAssertException(
                f"equal_to_rows: expected {len(self._expected)} rows, got {len(got)}; "
                f"the first {min(len(got), len(self._expected))} agree"
            )

    def _check_unordered(self, got: list[dict]) -> None:
        want_keys = Counter(_row_key(r) for r in self._expected)
        got_keys = Counter(_row_key(r) for r in got)
        if want_keys == got_keys:
            return
        by_key = {_row_key(r): r for r in [*self._expected, *got]}
        missing = [by_key[k] for k in (want_keys - got_keys).elements()]
        unexpected = [by_key[k] for k in (got_keys - want_keys).elements()]
        lines = [
            f"equal_to_rows: expected {len(self._expected)} rows, got {len(got)}: "
            f"{len(missing)} expected row(s) not in the output, {len(unexpected)} output row(s) not expected"
        ]
        for row in missing[:_SHOWN]:
            closest = min(unexpected, key=lambda r: len(_columns_differing(row, r)), default=None)
            if closest is not None:
                differs = _describe_pair(row, closest)
                lines.append(f"  expected {row} not found; the closest output row differs in {differs}")
            else:
                lines.append(f"  expected {row} not found")
        for row in unexpected[:_SHOWN]:
            lines.append(f"  unexpected output row {row}")
        raise BeamAssertException("\n".join(lines))


def _type_names(t: pa.DataType) -> set[str]:
    # Arrow writes list types as "list<item: int64>"; also accept the short "list<int64>".
    full = str(t)
    return {full, full.replace("<item: ", "<")}


def _expected_columns(expected) -> tuple[list[str], dict[str, object]]:
    if isinstance(expected, Schema):
        expected = expected.arrow_schema()
    if isinstance(expected, pa.Schema):
        return list(expected.names), {f.name: f.type for f in expected}
    if isinstance(expected, Mapping):
        return list(expected), dict(expected)
    if isinstance(expected, Sequence) and not isinstance(expected, str):
        return list(expected), {}
    raise TypeError(
        "has_schema: expected a pa.Schema, a sparse_io.Schema, a mapping column -> type, or a list of "
        f"column names; got {type(expected).__name__}"
    )


class has_schema:
    """Matches a PCollection of `pa.RecordBatch` every batch of which has the expected columns and types.

    Args:
      expected: a `pa.Schema` or `sparse_io.Schema` (its `arrow_schema()`),
        a mapping column -> type (a `pa.DataType` or its name: "int64",
        "list<item: int64>" or "list<int64>"), or a list of column names
        (names only).
      exact: the batches hold exactly these columns in this order (default);
        False: at least these columns, others allowed.
      allow_empty: an empty PCollection matches (default False: a schema
        check over no batch is a test that checks nothing).

    Field nullability and metadata are not compared.

    Raises (when called by `assert_that`): `BeamAssertException` naming the
    batch and the missing, extra or mistyped column (with both types) or
    the order found.

    Example:
      >>> import apache_beam as beam
      >>> from apache_beam.testing.util import assert_that
      >>> from transforms.beam import HashIds
      >>> from transforms.testing import test_pipeline
      >>> with test_pipeline() as p:
      ...     hashed = p | beam.Create([pa.record_batch({"C1": [["a"]], "I1": [1.0]})]) | HashIds(["C1"], 100)
      ...     _ = assert_that(hashed, has_schema({"C1": "list<int64>"}, exact=False))
    """

    def __init__(self, expected, *, exact: bool = True, allow_empty: bool = False):
        self._names, self._types = _expected_columns(expected)
        self._exact = exact
        self._allow_empty = allow_empty

    def __call__(self, actual: Iterable) -> None:
        """Checks the PCollection's contents (what `assert_that` hands a matcher); raises on a difference."""
        tables = _tables(actual, "has_schema")
        if not tables and not self._allow_empty:
            raise BeamAssertException("has_schema: the PCollection holds no batch to check")
        for i, t in enumerate(tables):
            names = t.schema.names
            missing = [n for n in self._names if n not in names]
            if missing:
                raise BeamAssertException(f"has_schema: batch {i} lacks column(s) {missing}; it has {names}")
            if self._exact:
                extra = [n for n in names if n not in self._names]
                if extra:
                    raise BeamAssertException(f"has_schema: batch {i} has unexpected column(s) {extra}")
                if names != self._names:
                    raise BeamAssertException(
                        f"has_schema: batch {i} has the columns in the order {names}, expected {self._names}"
                    )
            for name, want in self._types.items():
                got = t.schema.field(name).type
                ok = got == want if isinstance(want, pa.DataType) else str(want) in _type_names(got)
                if not ok:
                    raise BeamAssertException(f"has_schema: batch {i}: column {name!r} is {got}, expected {want}")


def _reason_of(letter) -> str:
    if isinstance(letter, DeadLetter):
        return letter.reason
    if isinstance(letter, Mapping) and "reason" in letter:
        return str(letter["reason"])
    raise BeamAssertException(f"dead_letters: element {letter!r} is neither a DeadLetter nor a dict with a 'reason'")


def _matches(pattern, reason: str) -> bool:
    return bool(pattern.search(reason)) if isinstance(pattern, re.Pattern) else pattern in reason


def _assign(patterns: list, reasons: list[str]) -> list[int | None]:
    """For each pattern, the index of a distinct reason it matches (None where none is left); augmenting paths."""
    owner: dict[int, int] = {}  # reason index -> pattern index

    def place(p: int, seen: set[int]) -> bool:
        for r, reason in enumerate(reasons):
            if r in seen or not _matches(patterns[p], reason):
                continue
            seen.add(r)
            if r not in owner or place(owner[r], seen):
                owner[r] = p
                return True
        return False

    for p in range(len(patterns)):
        place(p, set())
    found: list[int | None] = [None] * len(patterns)
    for r, p in owner.items():
        found[p] = r
    return found


class dead_letters:
    r"""Matches a PCollection of dead letters (`sparse_io.DeadLetter`, or their dicts) by count and reasons.

    Args:
      reasons: one entry per expected dead letter, each a substring (or a
        compiled `re.Pattern`, searched) of a different letter's reason, in
        any order.
      count: how many dead letters there must be; default `len(reasons)`.

    Raises (when called by `assert_that`): `BeamAssertException` giving the
    expected and actual counts, and each expected reason that no (remaining)
    dead letter has, with the reasons found.

    Example:
      >>> from apache_beam.testing.util import assert_that
      >>> from transforms.testing import CreateLogs, test_pipeline
      >>> lines = ["1\tnot a count", "0" + "\t1" * 13 + "\t05db9164" * 26]  # a bad I1, then a good line
      >>> with test_pipeline() as p:
      ...     batches, dead = p | CreateLogs(lines, "criteo", error_budget=None, with_dead_letters=True)
      ...     _ = assert_that(dead, dead_letters(["I1"]), label="dead")
    """

    def __init__(self, reasons: Sequence[str | re.Pattern] = (), *, count: int | None = None):
        if isinstance(reasons, (str, re.Pattern)):
            reasons = [reasons]
        self._reasons = list(reasons)
        self._count = len(self._reasons) if count is None else count
        if self._count < len(self._reasons):
            raise ValueError(f"dead_letters: count {self._count} is less than the {len(self._reasons)} reasons given")

    def __call__(self, actual: Iterable) -> None:
        """Checks the PCollection's contents (what `assert_that` hands a matcher); raises on a difference."""
        letters = list(actual)
        reasons = [_reason_of(d) for d in letters]
        shown = "; ".join(str(d) for d in letters[:_SHOWN]) or "none"
        if len(letters) != self._count:
            raise BeamAssertException(
                f"dead_letters: expected {self._count} dead letter(s), got {len(letters)}: {shown}"
            )
        unmatched = [p for p, r in zip(self._reasons, _assign(self._reasons, reasons)) if r is None]
        if unmatched:
            wanted = ", ".join(repr(getattr(p, "pattern", p)) for p in unmatched)
            raise BeamAssertException(
                f"dead_letters: no dead letter (left) whose reason has {wanted}; the reasons: {reasons[:_SHOWN]}"
            )
