"""Raw log cells to typed columns in the graph, by the ingest's own reading rules.

A cell is one field of a log row as its text (a CSV field after unquoting, a
Criteo field): what a serving client sends. `CellRules` holds the rules the
ingest read its log with (the `input:` section its `_MANIFEST.json`
records), and `parse_cells` applies them, as the sparse_io readers do:

* a cell equal to one of the column's null tokens (`null_values`, or the
  column's own) is missing: an empty id list, a NaN (float) or
  `MISSING_INT` (integer) dense value; an empty dense cell is always missing;
* a sparse cell is split on `list_separator` (Criteo: one id, 8 hex digits);
  an empty id inside a list is refused, as the ingest refuses its row;
* integers are decimal (`+5`, `260.0` as pandas writes 260), non-negative
  for ids; floats are finite decimals (`1e-3`), and a float32 column refuses
  an integer text float32 would round (above 2**24), as the ingest does.

A cell the ingest would have sent to the dead letters fails the call with
an InvalidArgumentError naming the column and the cell, never a quiet id.

Example:
  >>> rules = CellRules(list_separator=" ", null_values=("", "NA"))
  >>> spec = FeatureSpec("tags", "sparse", "string")
  >>> parse_cells({"tags": tf.constant(["a b", "NA"])}, [spec], rules)["tags"].to_list()
  [[b'a', b'b'], []]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import tensorflow as tf

from sparse_io.schema import FeatureSpec
from transforms.tfdata.core.columns import MISSING_INT, dense_dtype
from transforms.tfdata.logs.parsing import FLOAT_TEXT, HEX32_TEXT, INT_TEXT

__all__ = ["CellRules", "parse_cells", "parse_number_cells"]

_FLOAT32_EXACT = 2.0**24
_UNSIGNED_INT_TEXT = r"\+?\d+(?:\.0*)?"


@dataclasses.dataclass(frozen=True)
class CellRules:
    """How the ingest read its log's cells (the `input:` keys of its config).

    Attributes:
      format: the log format ("criteo": one 8-hex-digit id a sparse cell).
      list_separator: between the ids of a list cell.
      null_values: whole cells that mean missing.
      feature_null_values: (column, tokens) pairs: a column's own null tokens, in place of `null_values`.
      feature_list_separators: (column, separator) pairs: a column's own list separator (a column joined
        from a side table is read with the table's), in place of `list_separator`.
    """

    format: str = "csv"
    list_separator: str = "|"
    null_values: tuple[str, ...] = ("",)
    feature_null_values: tuple[tuple[str, tuple[str, ...]], ...] = ()
    feature_list_separators: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config_record(cls, config: Mapping) -> CellRules:
        """The rules of an ingest config as `_MANIFEST.json`'s "config" records it.

        A column joined from a side table (`joins`) takes the table's list separator, and its null tokens
        when the table is csv/tsv.
        """
        nulls = config.get("null_values")
        own = [(name, tuple(tokens)) for name, tokens in config.get("feature_null_values") or ()]
        separators = []
        for join in config.get("joins") or ():
            table_own = dict(join.get("feature_null_values") or ())
            for column in join["columns"]:
                separators.append((column, join.get("list_separator") or "|"))
                tokens = table_own.get(column, join.get("null_values"))
                if tokens is not None:
                    own.append((column, tuple(tokens)))
        return cls(
            format=config.get("format") or "csv",
            list_separator=config.get("list_separator") or "|",
            null_values=("",) if nulls is None else tuple(nulls),
            feature_null_values=tuple(own),
            feature_list_separators=tuple(separators),
        )

    def nulls_of(self, column: str) -> tuple[str, ...]:
        """The null tokens of `column`."""
        return dict(self.feature_null_values).get(column, self.null_values)

    def separator_of(self, column: str) -> str:
        """The list separator of `column`."""
        return dict(self.feature_list_separators).get(column, self.list_separator)


def _refuse_unless(ok: tf.Tensor, cells: tf.Tensor, column: str, rule: str) -> None:
    """Fails the call, naming the column, the rule and the first bad cell, unless every `ok`."""
    bad = tf.boolean_mask(cells, tf.logical_not(ok))
    tf.debugging.Assert(
        tf.reduce_all(ok),
        [f"column {column!r}: a cell is not {rule} by the ingest's rules; first bad cell:", bad[:1]],
        summarize=1,
    )


def _is_null(cells: tf.Tensor, tokens: Sequence[str]) -> tf.Tensor:
    null = tf.zeros(tf.shape(cells), tf.bool)
    for token in tokens:
        null = tf.logical_or(null, tf.equal(cells, token))
    return null


def _integers(text: tf.Tensor) -> tf.Tensor:
    """int64 of well-formed integer text ("+5", "260.0"); an out-of-range value fails the op."""
    digits = tf.strings.regex_replace(tf.strings.regex_replace(text, r"\.0*$", ""), r"^\+", "")
    return tf.strings.to_number(digits, tf.int64)


def parse_number_cells(cells: tf.Tensor, missing: tf.Tensor, spec: FeatureSpec) -> tf.Tensor:
    """A dense column `[B]` from its text cells (`missing`: bool `[B]`), typed as `make_dataset` gives it.

    float32 / float64 with NaN where missing; int64 (and int32) columns
    int64 with `MISSING_INT` where missing.
    """
    dtype = dense_dtype(spec.dtype)
    present = tf.logical_not(missing)
    if dtype == "int64":
        ok = tf.logical_or(missing, tf.strings.regex_full_match(cells, INT_TEXT))
        _refuse_unless(ok, cells, spec.name, "an integer")
        values = _integers(tf.where(present, cells, "0"))
        return tf.where(present, values, tf.constant(MISSING_INT, tf.int64))
    ok = tf.logical_or(missing, tf.strings.regex_full_match(cells, FLOAT_TEXT))
    _refuse_unless(ok, cells, spec.name, "a number")
    text = tf.where(present, cells, "0")
    values = tf.strings.to_number(text, getattr(tf, dtype))
    finite = tf.logical_or(missing, tf.math.is_finite(values))
    _refuse_unless(finite, cells, spec.name, "a finite number")
    if dtype == "float32":
        # An integer written out that float32 cannot hold exactly is a bad record at ingest, not a rounded one.
        exact = tf.strings.to_number(text, tf.float64)
        integral = tf.strings.regex_full_match(text, INT_TEXT)
        # The magnitude tested is float32's, as the readers test it (sparse_io.readers._convert._not_float).
        narrowed = tf.cast(values, tf.float64)
        rounded = integral & (tf.abs(narrowed) > _FLOAT32_EXACT) & tf.not_equal(narrowed, exact)
        _refuse_unless(tf.logical_or(missing, tf.logical_not(rounded)), cells, spec.name,
                       "an integer float32 holds exactly")
    return tf.where(present, values, tf.constant(float("nan"), values.dtype))


def _list_cells(cells: tf.Tensor, missing: tf.Tensor, separator: str) -> tf.RaggedTensor:
    """`[B, None]` strings: each present cell split on `separator`, a missing one empty."""
    parts = tf.strings.split(tf.where(missing, "", cells), sep=separator)
    keep = tf.logical_not(missing)
    lengths = tf.where(keep, parts.row_lengths(), tf.zeros_like(parts.row_lengths()))
    return tf.RaggedTensor.from_row_lengths(tf.boolean_mask(parts.flat_values, tf.repeat(keep, parts.row_lengths())),
                                            lengths)


def _sparse(cells: tf.Tensor, spec: FeatureSpec, rules: CellRules) -> tf.RaggedTensor:
    missing = _is_null(cells, rules.nulls_of(spec.name))
    joined = spec.name in dict(rules.feature_list_separators)  # a side table's column: a list cell, whatever the log
    if rules.format == "criteo" and not joined:  # one id a cell, 8 hex digits; an empty cell is no id
        missing = tf.logical_or(missing, tf.equal(cells, ""))
        ok = tf.logical_or(missing, tf.strings.regex_full_match(cells, HEX32_TEXT))
        _refuse_unless(ok, cells, spec.name, "an 8-digit hex id")
        ids = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(cells, ~missing), tf.cast(~missing, tf.int64))
    else:
        ids = _list_cells(cells, missing, rules.separator_of(spec.name))
        empty_id = tf.reduce_any(tf.equal(ids, ""), axis=1)
        _refuse_unless(tf.logical_not(empty_id), cells, spec.name,
                       f"a list of ids joined by {rules.separator_of(spec.name)!r} (it holds an empty id)")
    if spec.dtype == "string":
        return ids
    flat = ids.flat_values
    ok = tf.strings.regex_full_match(flat, _UNSIGNED_INT_TEXT)
    _refuse_unless(ok, flat, spec.name, "a non-negative integer id")
    numbers = _integers(flat)
    return ids.with_flat_values(tf.cast(numbers, tf.int32) if spec.dtype == "int32" else numbers)


def _weights(cells: tf.Tensor, ids: tf.RaggedTensor, spec: FeatureSpec, rules: CellRules) -> tf.RaggedTensor:
    name = f"{spec.name}__weights"
    missing = _is_null(cells, rules.nulls_of(spec.name))
    parts = _list_cells(cells, missing, rules.separator_of(spec.name))
    _refuse_unless(tf.equal(parts.row_lengths(), ids.row_lengths()), cells, name, "one weight per id")
    ok = tf.strings.regex_full_match(parts.flat_values, FLOAT_TEXT)
    _refuse_unless(ok, parts.flat_values, name, "a number")
    return parts.with_flat_values(tf.strings.to_number(parts.flat_values, tf.float32))


def parse_cells(cells: Mapping[str, tf.Tensor], specs: Sequence[FeatureSpec], rules: CellRules) -> dict:
    """Typed columns of the raw cells of `specs` (each `cells[name]` a string `[B]`), by the ingest's rules.

    Returns:
      name -> `[B, None]` ragged ids (strings, or int64/int32 for integer
      columns) for sparse columns, plus float32 `<f>__weights` for weighted
      ones (cells `cells["<f>__weights"]`); `[B]` values for dense columns
      (see `parse_number_cells`). Columns of `cells` not in `specs` are ignored.

    Raises:
      KeyError: a column of `specs` missing from `cells`.
      tf.errors.InvalidArgumentError: (when run) a cell the ingest would refuse, naming its column.
    """
    out = {}
    for spec in specs:
        column = cells[spec.name]
        if spec.is_sparse:
            out[spec.name] = _sparse(column, spec, rules)
            if spec.weighted:
                weights = f"{spec.name}__weights"
                out[weights] = _weights(cells[weights], out[spec.name], spec, rules)
        else:
            missing = tf.logical_or(_is_null(column, rules.nulls_of(spec.name)), tf.equal(column, ""))
            out[spec.name] = parse_number_cells(column, missing, spec)
    return out
