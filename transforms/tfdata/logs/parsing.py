"""Parsing batches of raw log lines in the graph: validate, split, convert.

The rules follow the sparse_io readers: Criteo lines are tab-separated
(label, I1..I13, C1..C26), categorical values 8-digit hex, an empty field
missing, a line short of trailing fields padded with missing values (or bad
in strict mode); CSV lines hold one column per schema column (found by the
header when there is one), id lists joined by a separator (`a|b|c`), a
weighted feature's `f__weights` list beside it.

Validation is one RE2 full match per line against a pattern built from the
schema (fast, and exactly the per-field rules), plus a row-length check for
weights; `tf.io.decode_csv` is not used because one malformed field fails
its whole batch, so bad lines could not be counted and skipped one by one.
Quoted CSV fields are accepted when they hold no delimiter, separator or
quote (the graph splits on the delimiter; anything else is a bad line).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import tensorflow as tf

from sparse_io.schema import FeatureSpec, Schema, weights_column
from transforms.tfdata.core.columns import MISSING_INT, dense_dtype

__all__ = ["LineFormat", "LineParser", "INT_TEXT", "FLOAT_TEXT", "HEX32_TEXT"]

INT_TEXT = r"[+-]?\d+(?:\.0*)?"  # "260.0" (as pandas writes 260) is an integer
FLOAT_TEXT = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
HEX32_TEXT = r"[0-9a-fA-F]{8}"
ID_TEXT = r"\d+"


def _escape(text: str) -> str:
    """RE2-safe literal (Python's re.escape emits escapes such as a backslashed tab that RE2 rejects)."""
    return "".join("\\t" if c == "\t" else "\\" + c if c in "\\.^$|?*+()[]{}-/" else c for c in text)


@dataclasses.dataclass(frozen=True)
class LineFormat:
    r"""How fields are laid out on a line.

    Attributes:
      delimiter: between fields ("\t" for Criteo).
      list_separator: between the ids of a list field.
      pad_short: a line short of trailing fields has them missing (else bad).
      hex32: string ids must be 8-digit hex (Criteo).
      quotes: a field may be wrapped in double quotes (CSV).
      null_values: whole fields that mean missing (besides ""): a feature's
        such field is read as empty; the label's is a bad line.
    """

    delimiter: str
    list_separator: str = "|"
    pad_short: bool = False
    hex32: bool = False
    quotes: bool = False
    null_values: tuple[str, ...] = ("",)

    @property
    def null_tokens(self) -> list[str]:
        """The non-empty `null_values`: what a feature's field pattern must also accept (it matches "" already)."""
        return [t for t in self.null_values if t]


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str  # column name in the file ("" for a column nobody reads)
    pattern: str  # RE2 pattern of the field's text (without quotes)
    check: str  # what the pattern demands, for error messages


class LineParser:
    """Turns a batch of lines into columns, given the file's column order.

    Args:
      schema: the features the lines hold (sparse ids as strings or ints).
      file_columns: the column names in field order (from the header, or
        `schema.arrow_schema().names`); columns not in the schema are ignored.
      line_format: the layout.
    """

    def __init__(self, schema: Schema, file_columns: Sequence[str], line_format: LineFormat):
        self.schema = schema
        self.format = line_format
        self.file_columns = list(file_columns)
        specs = {f.name: f for f in schema}
        weighted = {weights_column(f.name): f for f in schema if f.is_sparse and f.weighted}
        fields = []
        for name in self.file_columns:
            if name in specs:
                fields.append(self._field(specs[name]))
            elif name in weighted:
                fields.append(_Field(name, self._list(FLOAT_TEXT), "a list of numbers"))
            else:
                fields.append(_Field("", self._any(), "any text"))
        self.fields = fields
        wanted = set(specs) | set(weighted)
        missing = [n for n in schema.arrow_schema().names if n not in self.file_columns]
        if missing:
            raise ValueError(f"the log lacks column(s) {missing} that the schema needs")
        self.positions = {name: self.file_columns.index(name) for name in wanted}
        self.line_pattern = self._line_pattern()

    # ------------------------------------------------------------- patterns

    def _any(self) -> str:
        return f'[^{_escape(self.format.delimiter)}"]*'

    def _token(self) -> str:
        return f'[^{_escape(self.format.delimiter)}{_escape(self.format.list_separator)}"\\r\\n]+'

    def _list(self, item: str) -> str:
        sep = _escape(self.format.list_separator)
        return f"(?:{item}(?:{sep}{item})*)?"

    def _field(self, spec: FeatureSpec) -> _Field:
        field = self._value_field(spec)
        tokens = self.format.null_tokens
        if spec.kind == "label" or not tokens:
            return field
        nulls = "|".join(_escape(t) for t in tokens)
        return _Field(field.name, f"(?:{nulls}|{field.pattern})", f"{field.check} (or a null token)")

    def _value_field(self, spec: FeatureSpec) -> _Field:
        if spec.kind == "label":
            text = INT_TEXT if spec.dtype in ("int64", "int32") else FLOAT_TEXT
            return _Field(spec.name, text, "a number (required)")
        if spec.kind == "dense":
            if dense_dtype(spec.dtype) == "int64":
                return _Field(spec.name, f"(?:{INT_TEXT})?", "an integer or empty")
            return _Field(spec.name, f"(?:{FLOAT_TEXT})?", "a number or empty")
        if spec.dtype == "string":
            if self.format.hex32:
                return _Field(spec.name, f"(?:{HEX32_TEXT})?", "an 8-digit hex string or empty")
            return _Field(spec.name, self._list(self._token()), "a list of ids")
        return _Field(spec.name, self._list(ID_TEXT), "a list of non-negative integer ids")

    def _quoted(self, pattern: str) -> str:
        if not self.format.quotes:
            return pattern
        return f'(?:{pattern}|"{pattern}")'

    def _line_pattern(self) -> str:
        delim = _escape(self.format.delimiter)
        parts = [self._quoted(f.pattern) for f in self.fields]
        if self.format.pad_short:
            # f0 (?: D f1 (?: D f2 ... )?)? : trailing fields may be absent.
            pattern = ""
            for part in reversed(parts[1:]):
                pattern = f"(?:{delim}{part}{pattern})?"
            return parts[0] + pattern
        return delim.join(parts)

    # -------------------------------------------------------------- parsing

    def split(self, lines: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`(fields [n, F] strings, field_count [n])`; short lines padded with "", quotes removed."""
        ragged = tf.strings.split(lines, self.format.delimiter)
        counts = ragged.row_lengths()
        fields = ragged.to_tensor(default_value="", shape=[lines.shape[0], len(self.fields)])
        if self.format.quotes:
            fields = tf.strings.regex_replace(fields, '^"(.*)"$', r"\1")
        tokens = self.format.null_tokens
        if tokens:
            null = tf.reduce_any(tf.stack([tf.equal(fields, t) for t in tokens]), axis=0)
            label = self.schema.label
            if label is not None and label.name in self.file_columns:
                # A label is never missing: its null token stays, and the line fails validation.
                keep = [c != label.name for c in self.file_columns]
                null = tf.logical_and(null, tf.constant([keep + [True] * (len(self.fields) - len(keep))]))
            fields = tf.where(null, "", fields)
        return fields, counts

    def validate(self, lines: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`(ok [n] bool, padded [n] bool)` for a batch of lines: valid, and valid but short."""
        ok = tf.strings.regex_full_match(lines, self.line_pattern)
        counts = tf.strings.length(lines) - tf.strings.length(
            tf.strings.regex_replace(lines, _escape(self.format.delimiter), "")
        )
        padded = tf.logical_and(ok, counts + 1 < len(self.fields))
        weighted = [spec for spec in self.schema.sparse if spec.weighted]
        if weighted:
            fields, _ = self.split(lines)
            for spec in weighted:
                ids = self._lengths(fields[:, self.positions[spec.name]])
                weights = self._lengths(fields[:, self.positions[weights_column(spec.name)]])
                ok = tf.logical_and(ok, tf.equal(ids, weights))
        return ok, padded

    def _lengths(self, column: tf.Tensor) -> tf.Tensor:
        seps = tf.strings.length(column) - tf.strings.length(
            tf.strings.regex_replace(column, _escape(self.format.list_separator), "")
        )
        return tf.where(tf.equal(column, ""), tf.zeros_like(seps), seps + 1)

    def _list_ids(self, column: tf.Tensor) -> tf.RaggedTensor:
        """A `[n]` column of separator-joined lists ("" = empty) as a `[n, None]` ragged of strings."""
        present = tf.not_equal(column, "")
        parts = tf.strings.split(tf.boolean_mask(column, present), self.format.list_separator)
        where = tf.where(present)
        lengths = tf.scatter_nd(where, parts.row_lengths(), tf.shape(column, out_type=tf.int64))
        return tf.RaggedTensor.from_row_lengths(parts.flat_values, lengths, validate=False)

    def _single_ids(self, block: tf.Tensor) -> list[tf.RaggedTensor]:
        """A `[n, r]` block of zero-or-one-id fields as r `[n, None]` ragged columns, in a few ops."""
        by_column = tf.transpose(block)  # [r, n]
        present = tf.not_equal(by_column, "")
        values = tf.boolean_mask(tf.reshape(by_column, [-1]), tf.reshape(present, [-1]))  # column after column
        counts = tf.reduce_sum(tf.cast(present, tf.int64), axis=1)
        splits = tf.concat(
            [tf.zeros([block.shape[1], 1], tf.int64), tf.cumsum(tf.cast(present, tf.int64), axis=1)], axis=1
        )
        parts = tf.split(values, counts, num=block.shape[1])
        rows = tf.unstack(splits, num=block.shape[1])
        return [tf.RaggedTensor.from_row_splits(v, r, validate=False) for v, r in zip(parts, rows)]

    def columns(self, fields: tf.Tensor) -> dict:
        """Columns of valid lines' fields (`[n, F]` strings, from `split`), by name.

        Sparse: `[n, None]` ragged ids, strings or the schema's integer dtype
        (int64, or int32 for an int32 column), with float32 weights under
        `<f>__weights`; with `hex32` (Criteo) every sparse column is read as
        zero-or-one string id a row. Dense: `[n]` float32 with
        NaN where missing, float64 for float64 columns, int64 with
        `MISSING_INT` for integer columns. Label: `[n]`, int64 or int32 as
        the schema says, else float32.

        Dense fields are converted as one block, and so are zero-or-one-id
        (Criteo hex) fields: the graph has a few ops per kind, not per column.
        """
        out = {}
        for dtype, missing in (("float32", float("nan")), ("float64", float("nan")), ("int64", MISSING_INT)):
            dense = [spec.name for spec in self.schema.dense if dense_dtype(spec.dtype) == dtype]
            if not dense:
                continue
            block = tf.gather(fields, [self.positions[n] for n in dense], axis=1)
            empty = tf.equal(block, "")
            if dtype == "int64":  # "260.0" is 260, as the readers take it
                block = tf.strings.regex_replace(block, r"\.0*$", "")
            values = tf.strings.to_number(tf.where(empty, "0", block), getattr(tf, dtype))
            values = tf.where(empty, tf.fill(tf.shape(values), tf.constant(missing, values.dtype)), values)
            for j, column in enumerate(tf.unstack(values, num=len(dense), axis=1)):
                out[dense[j]] = column
        single = [s.name for s in self.schema.sparse if self.format.hex32]
        if single:
            block = tf.gather(fields, [self.positions[n] for n in single], axis=1)
            out.update(zip(single, self._single_ids(block)))
        for spec in self.schema:
            column = fields[:, self.positions[spec.name]]
            if spec.kind == "label":
                if spec.dtype in ("int64", "int32"):
                    value = tf.strings.to_number(tf.strings.regex_replace(column, r"\.0*$", ""), tf.int64)
                    out[spec.name] = tf.cast(value, tf.int32) if spec.dtype == "int32" else value
                else:
                    out[spec.name] = tf.strings.to_number(column, tf.float32)
            elif spec.is_sparse and spec.name not in out:
                ids = self._list_ids(column)
                if spec.dtype != "string":
                    ids = ids.with_flat_values(tf.strings.to_number(ids.flat_values, tf.int64))
                    if spec.dtype == "int32":
                        ids = ids.with_flat_values(tf.cast(ids.flat_values, tf.int32))
                out[spec.name] = ids
                if spec.weighted:
                    w = self._list_ids(fields[:, self.positions[weights_column(spec.name)]])
                    out[weights_column(spec.name)] = tf.RaggedTensor.from_row_splits(
                        tf.strings.to_number(w.flat_values, tf.float32), ids.row_splits, validate=False
                    )
        return out

    def explain(self, line: tf.Tensor) -> tf.Tensor:
        """A scalar string saying why one bad line fails: the first failing field and its rule."""
        fields, counts = self.split(tf.reshape(line, [1]))
        count = counts[0]
        # One regex op per distinct rule (a handful), not one per field.
        by_rule: dict[str, list[int]] = {}
        for j, f in enumerate(self.fields):
            by_rule.setdefault(self._quoted(f.pattern), []).append(j)
        oks = tf.zeros([len(self.fields)], tf.bool)
        for pattern, where in by_rule.items():
            matched = tf.strings.regex_full_match(tf.gather(fields[0], where), pattern)
            oks = tf.tensor_scatter_nd_update(oks, [[j] for j in where], matched)
        first = tf.argmin(tf.cast(oks, tf.int32), output_type=tf.int32)
        names = tf.constant([f.name or f"column {j}" for j, f in enumerate(self.fields)])
        checks = tf.constant([f.check for f in self.fields])
        expected = len(self.fields)
        field_reason = tf.strings.join(
            [
                "field ",
                tf.gather(names, first),
                " is not ",
                tf.gather(checks, first),
                ": '",
                tf.strings.substr(fields[0, first], 0, 80),
                "'",
            ]
        )
        count_reason = tf.strings.join([f"expected {expected} fields, got ", tf.strings.as_string(count)])
        wrong_count = count > expected if self.format.pad_short else tf.not_equal(count, expected)
        reason = tf.where(
            wrong_count,
            count_reason,
            tf.where(tf.reduce_all(oks), "a weights list and its ids differ in length", field_reason),
        )
        return reason
