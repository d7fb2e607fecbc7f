"""Log records of known status, for fuzzing the readers.

Every strategy here draws a record as the bytes of one line (or one Parquet
row) together with what a correct reader must make of it: the row it stands
for, or None when the record is bad. The expectation is worked out in plain
Python from how the record was built (int(), fractions.Fraction, json), never
by calling sparse_io, so it is an independent oracle.
"""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

INT64 = (-(2**63), 2**63 - 1)
INT32 = (-(2**31), 2**31 - 1)
VOCAB = 1000  # vocabulary_size of "items" in the fuzz schema
MIB = 1 << 20

_F32_OVERFLOW = Fraction(2**128 - 2**103)  # FLT_MAX + half an ulp: from here on, rounding gives inf


def f32(exact) -> float | None:
    """The float32 nearest to an exact number (int, decimal text or Fraction), ties to even; None on overflow."""
    q = Fraction(exact)
    if abs(q) >= _F32_OVERFLOW:
        return None
    guess = np.float32(float(q))
    best = None
    for candidate in (np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))):
        if not np.isfinite(candidate):
            continue
        key = (abs(Fraction(float(candidate)) - q), int(np.array(candidate).view(np.uint32)) & 1)
        if best is None or key < best[0]:
            best = (key, float(candidate))
    return best[1]


@dataclasses.dataclass(repr=False)
class Record:
    """One generated record: its bytes, the row a correct reader yields (None: a dead letter), and what was done."""

    line: bytes
    row: dict | None
    note: str = ""

    def __repr__(self) -> str:  # short, so a failing example with a 1 MiB line stays readable
        line = self.line if len(self.line) <= 160 else self.line[:160] + b"...[%d bytes]" % len(self.line)
        return f"Record({line!r}, good={self.row is not None}, note={self.note!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


@dataclasses.dataclass
class Cell:
    """One field: its text, its value when good, and whether it is good."""

    text: str | bytes
    value: object = None
    ok: bool = True


def _b(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


# --- numbers as text --------------------------------------------------------------------------------

_BAD_INT_TEXT = ["2.5", "1e3", "0x10", "0X1f", "abc", "1_0", " 5", "5 ", "--1", "+-1", "nan", "inf", "\u0661", "1.5e0"]
_BAD_FLOAT_TEXT = [
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "1e39",
    "-4e38",
    "abc",
    "1.2.3",
    "0x1p3",
    "1e",
    ".",
    "e5",
    "1f",
    " 1",
    "1 ",
]


@st.composite
def int_text(draw, lo: int, hi: int) -> Cell:
    """A well-formed decimal integer in [lo, hi], in one of the spellings readers accept."""
    n = draw(st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, max(lo, min(hi, 0))])))
    digits = str(abs(n))
    sign = "-" if n < 0 else draw(st.sampled_from(["", "+"]))
    spelling = draw(st.sampled_from(["plain", "zeros", "dot"]))
    if spelling == "zeros":
        digits = "000" + digits
    elif spelling == "dot":
        digits += draw(st.sampled_from([".0", ".", ".000"]))
    return Cell(sign + digits, n)


@st.composite
def bad_int_text(draw, lo: int, hi: int) -> Cell:
    """Text that is not an integer in [lo, hi]: malformed, or out of range."""
    kind = draw(st.sampled_from(["malformed", "above", "below"]))
    if kind == "malformed":
        return Cell(draw(st.sampled_from(_BAD_INT_TEXT)), ok=False)
    if kind == "above":
        return Cell(str(hi + draw(st.integers(1, 10**25))), ok=False)
    return Cell(str(lo - draw(st.integers(1, 10**25))), ok=False)


@st.composite
def float_text(draw) -> Cell:
    """A finite float32 number as text: exact float32 values, big integers, decimal exponents."""
    kind = draw(st.sampled_from(["f32", "int", "exp", "short"]))
    if kind == "f32":
        x = float(np.float32(draw(st.floats(width=32, allow_nan=False, allow_infinity=False))))
        return Cell(repr(x), x)
    if kind == "int":  # integers float32 holds exactly (others are bad: see bad_float_text)
        n = draw(st.integers(-(2**24), 2**24)) * 2 ** draw(st.integers(0, 76))
        return Cell(str(n), f32(n))
    if kind == "short":
        text = draw(st.sampled_from([".5", "5.", "+1.25", "-0", "0.0", "1E-5", "+.5e1", "1e-50"]))
        return Cell(text, f32(Fraction(text.replace("+", ""))))
    mantissa, exponent = draw(st.integers(-(10**12), 10**12)), draw(st.integers(-60, 25))
    text = f"{mantissa}e{exponent}"
    return Cell(text, f32(Fraction(mantissa) * Fraction(10) ** exponent))


def bad_float_text() -> st.SearchStrategy[Cell]:
    # An odd integer between 2**24 and 2**53 is exact in float64 and never in float32.
    rounded = st.integers(2**23, 2**52 - 1).map(lambda k: Cell(str(2 * k + 1), ok=False))
    return st.one_of(st.sampled_from(_BAD_FLOAT_TEXT).map(lambda t: Cell(t, ok=False)), rounded)


# --- Criteo TSV --------------------------------------------------------------------------------------
# A record has at most one fault (one bad field, or a damaged line), so most records are good and a
# bug that loses or alters good records has plenty of them to show on.

CRITEO_FIELDS = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
_BAD_HEX = ["05db916", "05db91640", "zzzzzzzz", "05db 164", "0x5db916", "05db916g", "\u00e95db9164", "-5db9164"]
_LINE_FAULTS = ["random", "blank", "utf8", "huge_good", "huge_bad"]


def _fault(draw, field_faults: list[str], line_faults: list[str]) -> str | None:
    """None (a good record) about half the time, else one fault."""
    return draw(st.sampled_from([None] * (len(field_faults) + len(line_faults)) + field_faults + line_faults))


@st.composite
def _criteo_cell(draw, name: str, bad: bool) -> Cell:
    if name == "label":  # a click: 0 or 1
        if bad:
            not_a_click = st.one_of(int_text(2, INT64[1]), int_text(INT64[0], -1)).map(lambda c: Cell(c.text, ok=False))
            return draw(st.one_of(bad_int_text(*INT64), st.just(Cell("", ok=False)), not_a_click))
        return draw(int_text(0, 1))
    if name.startswith("I"):
        if bad:
            return draw(bad_float_text())
        return draw(
            st.one_of(
                st.just(Cell("", None)),
                float_text(),
                int_text(-(10**6), 2**24).map(lambda c: Cell(c.text, f32(c.value))),  # exact in float32
            )
        )
    if bad:
        return Cell(draw(st.sampled_from(_BAD_HEX)), ok=False)
    if draw(st.booleans()):
        return Cell("", [])
    text = format(draw(st.integers(0, 2**32 - 1)), "08x")
    text = text.upper() if draw(st.booleans()) else text
    return Cell(text, [text])


def _missing(name: str):
    return [] if name.startswith("C") else None


def _huge_criteo(good: bool) -> Record:
    if good:  # a 1 MiB number: leading zeros are still a well-formed decimal
        fields = ["1", "0" * MIB + "7"] + [""] * 38
        row = {name: _missing(name) for name in CRITEO_FIELDS}
        row.update(label=1, I1=7.0)
        return Record(_b("\t".join(fields)), row, "1 MiB number")
    fields = ["0"] + [""] * 13 + ["a" * MIB] + [""] * 25
    return Record(_b("\t".join(fields)), None, "1 MiB categorical value")


@st.composite
def criteo_record(draw, strict: bool) -> Record:
    fault = _fault(draw, ["field", "field", "extra", "cr"], _LINE_FAULTS)
    if fault == "random":  # '#' keeps the label from ever reading as an integer
        return Record(b"#" + draw(st.binary(max_size=60)).replace(b"\n", b" "), None, fault)
    if fault == "blank":
        return Record(draw(st.sampled_from([b"", b" ", b"\t", b" \t\t "])), None, fault)
    if fault in ("huge_good", "huge_bad"):
        return _huge_criteo(fault == "huge_good")
    bad_at = draw(st.integers(0, len(CRITEO_FIELDS) - 1)) if fault == "field" else None
    cells = [draw(_criteo_cell(name, i == bad_at)) for i, name in enumerate(CRITEO_FIELDS)]
    keep = len(cells)
    if fault != "extra" and draw(st.integers(0, 4)) == 0:  # real dumps drop trailing empty fields: not bad
        keep = draw(st.integers(1 if bad_at is None else bad_at + 1, len(cells)))
    cells = cells[:keep]
    texts = [_b(c.text) for c in cells]
    ok = fault is None
    note = fault or ""
    if strict and keep < len(CRITEO_FIELDS):
        ok, note = False, note + " short (strict)"
    if fault == "extra":
        texts.append(_b(draw(st.sampled_from(["", "1", "05db9164"]))))
    elif fault == "cr":  # a carriage return inside the label, never at the end of the line
        texts[0] += b"\r0"
    elif fault == "utf8":
        at = draw(st.integers(0, len(texts) - 1))
        texts[at] += draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80"]))
    row = None
    if ok:
        row = {name: _missing(name) for name in CRITEO_FIELDS}
        row.update({name: c.value for name, c in zip(CRITEO_FIELDS, cells)})
    return Record(b"\t".join(texts), row, note.strip())


# --- CSV / TSV ---------------------------------------------------------------------------------------

TABLE_COLUMNS = ["label", "price", "ts", "items", "items__weights", "cats", "tags"]
_TAG_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="|\r\n"), min_size=1, max_size=6)


def quote(text: str, delimiter: str) -> str:
    """Minimal CSV quoting: only fields holding the delimiter or a quote are quoted."""
    if delimiter in text or '"' in text:
        return '"' + text.replace('"', '""') + '"'
    return text


@st.composite
def _id_list_cells(draw, lo: int, hi: int, good_hi: int, weighted: bool, separator: str, bad: bool):
    """(ids cell, weights cell or None): ids joined by `separator` (and parallel weights); one fault if `bad`."""
    n = draw(st.integers(0, 4))
    ids = [draw(int_text(0, good_hi)) for _ in range(n)]
    weights = [draw(float_text()) for _ in range(n)]
    fault = draw(st.sampled_from(["id", "empty_id"] + ["weight", "count"] * weighted)) if bad else None
    if fault == "id":
        kind = draw(st.sampled_from(["negative", "too_big", "malformed"]))
        if kind == "negative":
            wrong = Cell(str(draw(st.integers(lo, -1))), ok=False)
        elif kind == "too_big":
            wrong = Cell(str(draw(st.integers(good_hi + 1, hi + 10**20))), ok=False)
        else:
            wrong = draw(bad_int_text(lo, hi))
            if separator in wrong.text or not wrong.text.strip():
                wrong = Cell("abc", ok=False)
        at = draw(st.integers(0, len(ids)))
        ids.insert(at, wrong)
        weights.insert(at, Cell("1", 1.0))
    elif fault == "empty_id":  # "1||2", "|2", "2|"
        if not ids:
            ids, weights = [Cell("7", 7)], [Cell("1", 1.0)]
        ids.insert(draw(st.integers(0, len(ids))), Cell("", ok=False))
        weights.append(Cell("1", 1.0))
    elif fault == "weight":
        weights.append(draw(bad_float_text()))
        ids.append(Cell("1", 1))
    elif fault == "count":
        if weights and draw(st.booleans()):
            weights.pop(draw(st.integers(0, len(weights) - 1)))
        else:
            weights.append(Cell("1", 1.0))
    ok = fault is None
    id_cell = Cell(separator.join(c.text for c in ids), [c.value for c in ids], ok)
    if not weighted:
        return id_cell, None
    return id_cell, Cell(separator.join(c.text for c in weights), [c.value for c in weights], ok)


@st.composite
def _tags_cell(draw, separator: str, bad: bool) -> Cell:
    if bad:
        return Cell(draw(st.sampled_from(["a||b", separator, separator + "a", "a" + separator])), ok=False)
    tags = draw(st.lists(_TAG_TEXT, max_size=3))
    return Cell(separator.join(tags), tags)


@st.composite
def csv_values(draw, bad_column: str | None, separator: str = "|") -> dict[str, Cell]:
    """Cells for every column of the fuzz table schema; only `bad_column` (if any) holds a bad value."""
    cells = {}
    if bad_column == "label":
        cells["label"] = draw(st.one_of(bad_int_text(*INT64), st.just(Cell("", ok=False))))
    else:
        cells["label"] = draw(int_text(*INT64))
    if bad_column == "price":
        cells["price"] = draw(bad_float_text())
    else:
        cells["price"] = draw(st.one_of(st.just(Cell("", None)), float_text()))
    if bad_column == "ts":
        cells["ts"] = draw(bad_int_text(*INT64))
    else:
        cells["ts"] = draw(st.one_of(st.just(Cell("", None)), int_text(*INT64)))
    cells["items"], cells["items__weights"] = draw(
        _id_list_cells(*INT64, VOCAB - 1, True, separator, bad_column == "items")
    )
    cells["cats"], _ = draw(_id_list_cells(*INT32, INT32[1], False, separator, bad_column == "cats"))
    cells["tags"] = draw(_tags_cell(separator, bad_column == "tags"))
    return cells


def _huge_csv(columns: list[str], delimiter: str, good: bool) -> Record:
    tags = ["t" + str(i) for i in range(MIB // 7)]
    if not good:
        tags[-1] = ""  # an empty id at the very end of a 1 MiB list
    values = {c: "" for c in columns}
    values.update(label="1", tags="|".join(tags))
    row = None
    if good:
        row = {name: None for name in TABLE_COLUMNS}
        row.update(label=1, items=[], items__weights=[], cats=[], tags=tags)
    return Record(_b(delimiter.join(values[c] for c in columns)), row, "1 MiB list")


_CSV_COLUMNS_WITH_FAULTS = ["label", "price", "ts", "items", "cats", "tags"]


@st.composite
def csv_record(draw, columns: list[str], delimiter: str) -> Record:
    """One CSV/TSV line for a file whose header is `columns` (schema columns plus extras, any order)."""
    fault = _fault(draw, _CSV_COLUMNS_WITH_FAULTS + ["drop", "add", "open_quote", "cr"], _LINE_FAULTS)
    if fault == "random":  # one field only (no delimiter, no quote), so the field count is wrong
        junk = draw(st.binary(max_size=60))
        for byte in (b"\n", b"\r", _b(delimiter), b'"'):
            junk = junk.replace(byte, b"#")
        return Record(b"#" + junk, None, fault)
    if fault == "blank":
        return Record(draw(st.sampled_from([b"", b" ", b"   "])), None, fault)
    if fault in ("huge_good", "huge_bad"):
        return _huge_csv(columns, delimiter, fault == "huge_good")
    cells = draw(csv_values(fault if fault in _CSV_COLUMNS_WITH_FAULTS else None))
    for column in columns:
        if column not in cells:
            cells[column] = Cell(draw(st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=5)))
    fields = [_b(quote(str(cells[c].text), delimiter)) for c in columns]
    if fault == "drop":
        fields.pop(draw(st.integers(0, len(fields) - 1)))
    elif fault == "add":
        fields.insert(draw(st.integers(0, len(fields))), b"1")
    elif fault == "open_quote":  # a quoted field that never closes (no later quote could close it)
        free = [i for i in range(len(fields)) if not any(b'"' in f for f in fields[i + 1 :])]
        # In the last field it leaves the field count right, so only the open quote makes the line bad.
        at = draw(st.one_of(st.just(len(fields) - 1), st.sampled_from(free)))
        fields[at] = b'"' + draw(st.sampled_from([b"", b"abc", _b(delimiter) + b"x", b"1|2"]))
    elif fault == "cr":
        fields[columns.index("label")] = b"1\r0"
    elif fault == "utf8":
        at = draw(st.integers(0, len(fields) - 1))
        fields[at] = draw(st.sampled_from([b"\xff", b"x\xc3", b"\xe2\x82"])) + fields[at].lstrip(b'"')
    row = None
    if fault is None:
        row = {name: cells[name].value for name in TABLE_COLUMNS}
    return Record(_b(delimiter).join(fields), row, fault or "")


# --- JSON Lines --------------------------------------------------------------------------------------


def _j(value) -> str:
    return json.dumps(value)


@st.composite
def json_int(draw, lo: int, hi: int) -> Cell:
    """A JSON number holding an integer in [lo, hi]: an integer literal, or an integral float below 2**53."""
    choices = [st.integers(lo, hi), st.sampled_from([lo, hi])]
    if hi > 2**54:  # integers a double cannot hold exactly
        choices.append(st.integers(2**53 + 1, 2**60).map(lambda k: k | 1))
    n = draw(st.one_of(choices))
    if abs(n) < 2**53 and draw(st.integers(0, 2)) == 0:
        return Cell(draw(st.sampled_from([f"{n}.0", f"{n}e0", f"{n}.000"])), n)
    return Cell(str(n), n)


@st.composite
def json_bad_int(draw, lo: int, hi: int) -> Cell:
    kind = draw(st.sampled_from(["fraction", "above", "below", "text", "bool", "float_big", "nested"]))
    text = {
        "fraction": lambda: f"{draw(st.integers(-(2**40), 2**40))}.5",
        "above": lambda: str(hi + draw(st.integers(1, 10**25))),
        "below": lambda: str(lo - draw(st.integers(1, 10**25))),
        "text": lambda: _j(str(draw(st.integers(0, 9)))),
        "bool": lambda: draw(st.sampled_from(["true", "false"])),
        "float_big": lambda: draw(st.sampled_from(["1e20", "-1e20", "9.3e18", "1e400"])),
        "nested": lambda: "{}",
    }[kind]()
    return Cell(text, ok=False)


@st.composite
def _json_float(draw) -> Cell:
    if draw(st.booleans()):
        x = float(np.float32(draw(st.floats(width=32, allow_nan=False, allow_infinity=False))))
        return Cell(repr(x), x)
    # Exact in float32: an integer float32 would round is refused, or kept as a float beside floats.
    n = draw(st.integers(-(2**24), 2**24)) * 2 ** draw(st.integers(0, 29))
    return Cell(str(n), f32(n))


_JSON_BAD_FLOAT = ["NaN", "Infinity", "-Infinity", "1e39", "-1e39", "1e400", '"1.5"', "true", "{}"]
_JSON_TAGS = ["2021-03-04", "2021-03-04T05:06:07", "12:30", "", "null", "1", "\u00e9t\u00e9", "\U0001f600"]


@st.composite
def _json_ids(draw, lo: int, hi: int, good_hi: int, weighted: bool, bad: bool):
    """JSON fragments (or None for an absent key) of an id list and its weights, and the expected lists."""
    n = draw(st.integers(0, 4))
    ids = [draw(json_int(0, good_hi)) for _ in range(n)]
    weights = [draw(_json_float()) for _ in range(n)]
    faults = ["id", "null_id", "nested"] + ["weight", "count", "no_weights"] * weighted
    fault = draw(st.sampled_from(faults)) if bad else None
    if fault == "id":
        kind = draw(st.sampled_from(["negative", "too_big", "bad"]))
        if kind == "negative":
            wrong = Cell(str(draw(st.integers(lo, -1))), ok=False)
        elif kind == "too_big":
            wrong = Cell(str(draw(st.integers(good_hi + 1, hi + 10**6))), ok=False)
        else:
            wrong = draw(json_bad_int(lo, hi))
        ids.append(wrong)
        weights.append(Cell("1.0", 1.0))
    elif fault in ("null_id", "nested"):
        ids.append(Cell("null" if fault == "null_id" else "[1]", ok=False))
        weights.append(Cell("1.0", 1.0))
    elif fault == "weight":
        ids.append(Cell("1", 1))
        weights.append(Cell(draw(st.sampled_from(_JSON_BAD_FLOAT + ["null", "[1.0]"])), ok=False))
    elif fault == "count":
        weights.append(Cell("0.5", 0.5))
    elif fault == "no_weights":
        ids.append(Cell("1", 1))
    absent = not ids and not (weighted and weights) and draw(st.booleans())

    def fragment(cells):
        if absent:
            return draw(st.sampled_from([None, "null"]))
        # `"items": 5` is a one-id row; a lone bad element keeps its list so it stays an element
        if len(cells) == 1 and cells[0].ok and draw(st.booleans()):
            return cells[0].text
        return "[" + ", ".join(c.text for c in cells) + "]"

    id_text = fragment(ids)
    weight_text = fragment(weights) if weighted else None
    if fault == "no_weights":
        weight_text = draw(st.sampled_from([None, "null", "[]"]))
    return id_text, weight_text, [c.value for c in ids], [c.value for c in weights]


def _json_object(pairs: list[tuple[str, str]], space: str) -> str:
    return "{" + ("," + space).join(f"{_j(k)}:{space}{v}" for k, v in pairs) + "}"


def _huge_json(good: bool) -> Record:
    n = MIB // 8
    ids = [i % VOCAB for i in range(n)]
    weights = "[" + ",".join(["0.5"] * n) + "]"
    pairs = [("label", "1"), ("items", _j(ids)), ("items__weights", weights)]
    if not good:
        pairs.append(("tags", '["x", null]'))
    row = None
    if good:
        row = {"label": 1, "price": None, "ts": None, "items": ids, "items__weights": [0.5] * n, "cats": [], "tags": []}
    return Record(_b(_json_object(pairs, "")), row, "1 MiB list")


_JSON_KEYS_WITH_FAULTS = ["label", "price", "ts", "items", "cats", "tags"]


@st.composite
def jsonl_record(draw) -> Record:
    fault = _fault(
        draw,
        _JSON_KEYS_WITH_FAULTS + ["no_label", "truncated", "two_objects", "duplicate"],
        _LINE_FAULTS + ["not_object"],
    )
    if fault == "random":
        return Record(b"#" + draw(st.binary(max_size=60)).replace(b"\n", b" "), None, fault)
    if fault == "blank":
        return Record(draw(st.sampled_from([b"", b" ", b"\t "])), None, fault)
    if fault == "not_object":
        return Record(draw(st.sampled_from([b"null", b"nullx", b"1", b"[1]", b'"x"', b"true", b" null"])), None, fault)
    if fault in ("huge_good", "huge_bad"):
        return _huge_json(fault == "huge_good")
    pairs: list[tuple[str, str]] = []
    row = {}
    if fault == "label":
        pairs.append(("label", draw(st.one_of(json_bad_int(*INT64), st.just(Cell("null", ok=False)))).text))
    elif fault != "no_label":
        label = draw(json_int(*INT64))
        pairs.append(("label", label.text))
        row["label"] = label.value
    for name, good_values, bad_values in (
        ("price", _json_float(), st.sampled_from(_JSON_BAD_FLOAT + ["[1.0]"]).map(lambda t: Cell(t, ok=False))),
        ("ts", json_int(*INT64), json_bad_int(*INT64)),
    ):
        cell = draw(bad_values if fault == name else good_values)
        presence = draw(st.sampled_from(["value", "null", "absent"])) if cell.ok else "value"
        if presence != "absent":
            pairs.append((name, cell.text if presence == "value" else "null"))
        row[name] = cell.value if presence == "value" else None
    for name, lo, hi, good_hi, weighted in (("items", *INT64, VOCAB - 1, True), ("cats", *INT32, INT32[1], False)):
        id_text, weight_text, ids, weights = draw(_json_ids(lo, hi, good_hi, weighted, fault == name))
        if id_text is not None:
            pairs.append((name, id_text))
        if weight_text is not None:
            pairs.append((name + "__weights", weight_text))
        row[name] = ids
        if weighted:
            row[name + "__weights"] = weights
    tags = draw(st.lists(st.one_of(st.sampled_from(_JSON_TAGS), _TAG_TEXT), max_size=3))
    if fault == "tags":
        pairs.append(("tags", _j(tags + [None])))
    elif len(tags) == 1 and draw(st.booleans()):
        pairs.append(("tags", _j(tags[0])))
    elif tags or draw(st.booleans()):
        pairs.append(("tags", json.dumps(tags, ensure_ascii=draw(st.booleans()))))
    row["tags"] = tags
    extras = draw(
        st.lists(st.sampled_from(["1", "-2.5", '"x"', "[1, 2]", '["a", 1]', '{"k": [1]}', "null", "true"]), max_size=2)
    )
    pairs += [(f"x{i}", v) for i, v in enumerate(extras)]
    pairs = draw(st.permutations(pairs))
    line = _b(_json_object(pairs, draw(st.sampled_from(["", " ", "\t", "\r"]))))
    if fault == "truncated":  # any proper prefix of an object is not an object
        line = line[: draw(st.integers(1, len(line) - 1))]
    elif fault == "two_objects":
        line = line + b" " + line
    elif fault == "duplicate":  # a schema key given twice
        key, value = next(((k, v) for k, v in pairs if k in TABLE_COLUMNS), ("label", "1"))
        line = _b(_json_object([(key, value), (key, value), *[p for p in pairs if p[0] != key]], " "))
    elif fault == "utf8":
        line = b'{"x9": "\xff", ' + line[1:] if line != b"{}" else b'{"x9": "\xff"}'
    good = fault is None
    return Record(line, {name: row[name] for name in TABLE_COLUMNS} if good else None, fault or "")


# --- files -------------------------------------------------------------------------------------------


def line_count(data: bytes) -> int:
    """Records in a text file as the readers count lines: '\\n' ends a line, a last unended line counts.

    A file with a '\\r' and no '\\n' (classic Mac line ends; these files are smaller than one read) ends its
    lines at '\\r'.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\r" in data and b"\n" not in data:
        data = data.replace(b"\r", b"\n")
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


# --- Parquet -----------------------------------------------------------------------------------------
# Each column draws an Arrow type first (one the feature can be read from, or one it cannot), then per
# row a value that type can hold, good or bad, with the value a correct reader gives for it.

_BAD = object()  # marks a bad row value


def _f32_of_double(x: float) -> float | None:
    with np.errstate(over="ignore"):
        y = np.float32(x)  # one IEEE rounding of the exact double, as a C cast does
    return float(y) if np.isfinite(y) else None


_INT_SOURCES = ["int64", "int32", "uint64", "float64", "float32"]


@st.composite
def _int_value(draw, source: str, lo: int, hi: int, *, nullable: bool, extra_bad: bool = True):
    """(stored value, expected value or _BAD) for an integer feature stored as `source`."""
    if draw(st.integers(0, 5)) == 0:
        return None, (None if nullable else _BAD)
    bad = extra_bad and draw(st.integers(0, 5)) == 0
    if source in ("int64", "int32"):
        width = INT64 if source == "int64" else INT32
        lo_s, hi_s = max(lo, width[0]), min(hi, width[1])
        if bad and (lo_s > width[0] or hi_s < width[1]):
            n = draw(
                st.one_of(
                    st.integers(width[0], lo_s - 1) if lo_s > width[0] else st.nothing(),
                    st.integers(hi_s + 1, width[1]) if hi_s < width[1] else st.nothing(),
                )
            )
            return n, _BAD
        n = draw(st.integers(lo_s, hi_s))
        return n, n
    if source == "uint64":
        if bad:
            return draw(st.integers(max(hi + 1, 0), 2**64 - 1)), _BAD
        n = draw(st.integers(max(lo, 0), hi))
        return n, n
    if bad:
        return draw(st.sampled_from([0.5, -1.5, float("nan"), float("inf"), float("-inf"), 2.0**63, -(2.0**64)])), _BAD
    limit = 2**53 if source == "float64" else 2**24  # exact in the float type
    n = draw(st.integers(max(lo, -limit), min(hi, limit)))
    return float(n), n


def _arrow_type(name: str) -> pa.DataType:
    return {
        "int64": pa.int64(),
        "int32": pa.int32(),
        "uint64": pa.uint64(),
        "uint8": pa.uint8(),
        "float64": pa.float64(),
        "float32": pa.float32(),
        "string": pa.string(),
        "large_string": pa.large_string(),
        "bool": pa.bool_(),
        "binary": pa.binary(),
    }[name]


@dataclasses.dataclass
class ParquetColumn:
    name: str
    array: pa.Array
    expected: list  # per row: the value read back, or _BAD
    usable: bool  # False: the feature cannot be read from this Arrow type at all


@st.composite
def _scalar_int_column(draw, name: str, n: int, nullable: bool) -> ParquetColumn:
    source = draw(st.sampled_from(_INT_SOURCES + ["string", "bool", "list"]))
    if source == "string":
        return ParquetColumn(name, pa.array([str(i) for i in range(n)], pa.string()), [], False)
    if source == "bool":
        return ParquetColumn(name, pa.array([True] * n, pa.bool_()), [], False)
    if source == "list":
        return ParquetColumn(name, pa.array([[i] for i in range(n)], pa.list_(pa.int64())), [], False)
    pairs = [draw(_int_value(source, *INT64, nullable=nullable)) for _ in range(n)]
    return ParquetColumn(name, pa.array([p[0] for p in pairs], _arrow_type(source)), [p[1] for p in pairs], True)


@st.composite
def _price_column(draw, n: int) -> ParquetColumn:
    source = draw(st.sampled_from(["float32", "float64", "int64", "int32", "uint8", "string", "list"]))
    if source == "string":
        return ParquetColumn("price", pa.array(["1.5"] * n, pa.string()), [], False)
    if source == "list":
        return ParquetColumn("price", pa.array([[1.5]] * n, pa.list_(pa.float32())), [], False)
    values, expected = [], []
    for _ in range(n):
        if draw(st.integers(0, 5)) == 0:
            values.append(None)
            expected.append(None)
            continue
        bad = source.startswith("float") and draw(st.integers(0, 5)) == 0
        if source.startswith("float"):
            if bad:
                x = draw(
                    st.sampled_from(
                        [float("nan"), float("inf"), float("-inf")] + [1e39, -1e300] * (source == "float64")
                    )
                )
            elif source == "float32":
                x = float(np.float32(draw(st.floats(width=32, allow_nan=False, allow_infinity=False))))
            else:
                x = draw(st.floats(-3e38, 3e38, allow_nan=False))
            values.append(x)
            expected.append(_BAD if bad else _f32_of_double(x))
        else:
            lo, hi = {"int64": INT64, "int32": INT32, "uint8": (0, 255)}[source]
            k = draw(st.integers(lo, hi))
            values.append(k)
            expected.append(f32(k) if f32(k) == k else _BAD)  # an integer float32 would round is refused
    return ParquetColumn("price", pa.array(values, _arrow_type(source)), expected, True)


_STORABLE = {"int32": INT32[1], "int64": INT64[1], "uint64": 2**64 - 1, "float64": 2**53, "float32": 2**24}
_ID_SOURCES = ["list<int64>", "list<int32>", "large_list<int64>", "list<uint64>", "list<float64>", "int64"]


def _list_type(source: str) -> pa.DataType:
    if source.startswith("large_list<"):
        return pa.large_list(_arrow_type(source[len("large_list<") : -1]))
    if source.startswith("list<"):
        return pa.list_(_arrow_type(source[len("list<") : -1]))
    return _arrow_type(source)


@st.composite
def _id_lists(draw, name: str, n: int, lo: int, hi: int, vocab_hi: int):
    """(column, per-row id lists or _BAD, per-row id counts)."""
    source = draw(st.sampled_from(_ID_SOURCES + ["list<string>", "string", "list<bool>"]))
    if source in ("list<string>", "string", "list<bool>"):
        value = ["1"] if source == "list<string>" else "1" if source == "string" else [True]
        return ParquetColumn(name, pa.array([value] * n, _list_type(source)), [], False), [1] * n
    element = source.split("<")[-1].rstrip(">")
    values, expected, counts = [], [], []
    for _ in range(n):
        if source == "int64":  # a scalar column: one id per row, null for none
            stored, value = draw(_int_value("int64", 0, vocab_hi, nullable=True))
            if stored is not None and value is not _BAD and draw(st.integers(0, 6)) == 0:
                stored, value = -1 - stored, _BAD  # a negative id
            values.append(stored)
            expected.append(_BAD if value is _BAD else ([] if stored is None else [value]))
            counts.append(0 if stored is None else 1)
            continue
        if draw(st.integers(0, 6)) == 0:
            values.append(None)
            expected.append([])
            counts.append(0)
            continue
        k = draw(st.integers(0, 3))
        items = [draw(_int_value(element, 0, vocab_hi, nullable=False, extra_bad=False)) for _ in range(k)]
        items = [(s, v) for s, v in items if s is not None]
        fault = draw(st.sampled_from([None] * 4 + ["null", "negative", "range", "dtype"]))
        if fault == "null":
            items.insert(draw(st.integers(0, len(items))), (None, _BAD))
        elif fault == "negative" and element != "uint64":
            items.append((-draw(st.integers(1, 2**31)), _BAD))
        elif fault == "range" and vocab_hi < _STORABLE[element]:  # >= vocabulary size, or out of dtype range
            big = draw(st.integers(vocab_hi + 1, _STORABLE[element]))
            items.append((float(big) if element.startswith("float") else big, _BAD))
        elif fault == "dtype":
            items.append(draw(_int_value(element, lo, hi, nullable=False)))
            if element in ("int64", "int32") or items[-1][1] is not _BAD:
                items.pop()
        values.append([s for s, _ in items])
        counts.append(len(items))
        expected.append(_BAD if any(v is _BAD for _, v in items) else [v for _, v in items])
    return ParquetColumn(name, pa.array(values, _list_type(source)), expected, True), counts


@st.composite
def _weight_lists(draw, n: int, counts: list[int]) -> ParquetColumn:
    source = draw(
        st.sampled_from(
            ["list<float32>", "list<float64>", "large_list<float32>", "list<int64>", "float32", "list<string>"]
        )
    )
    if source == "list<string>":
        return ParquetColumn("items__weights", pa.array([["1"]] * n, _list_type(source)), [], False)
    element = source.split("<")[-1].rstrip(">")
    values, expected = [], []
    for count in counts:
        k = count
        if draw(st.integers(0, 8)) == 0:
            k = max(0, count + draw(st.sampled_from([-1, 1])))
        if source == "float32":  # scalar: 0 or 1 weight
            if k > 1:
                k = 1
            x = float(np.float32(draw(st.floats(width=32, allow_nan=False, allow_infinity=False)))) if k else None
            values.append(x)
            expected.append([x] if k else [])
            continue
        if k == 0 and draw(st.booleans()):
            values.append(None)
            expected.append([])
            continue
        row, out = [], []
        for _ in range(k):
            if element == "int64":
                w = draw(st.integers(-(2**40), 2**40))
                row.append(w)
                # An integer weight float32 would round is refused, as integer columns read as floats are.
                out.append(f32(w) if f32(w) == w else _BAD)
            elif draw(st.integers(0, 9)) == 0:
                row.append(draw(st.sampled_from([None, float("nan"), float("inf")] + [1e39] * (element == "float64"))))
                out.append(_BAD)
            else:
                if element == "float32":
                    w = draw(st.floats(width=32, allow_nan=False, allow_infinity=False))
                else:
                    w = draw(st.floats(-3e38, 3e38, allow_nan=False))
                row.append(w)
                out.append(_f32_of_double(w))
        values.append(row)
        expected.append(_BAD if any(v is _BAD or v is None for v in out) else out)
    return ParquetColumn("items__weights", pa.array(values, _list_type(source)), expected, True)


@st.composite
def _tag_lists(draw, n: int) -> ParquetColumn:
    source = draw(
        st.sampled_from(
            [
                "list<string>",
                "large_list<large_string>",
                "string",
                "list<int64>",
                "dict",
                "list<float64>",
                "list<binary>",
            ]
        )
    )
    if source in ("list<float64>", "list<binary>"):
        value = [1.5] if source == "list<float64>" else [b"x"]
        return ParquetColumn("tags", pa.array([value] * n, _list_type(source)), [], False)
    values, expected = [], []
    for _ in range(n):
        if source == "string":
            tag = draw(st.one_of(st.none(), _TAG_TEXT))
            values.append(tag)
            expected.append([] if tag is None else [tag])
            continue
        if source == "list<int64>":
            row = draw(st.lists(st.integers(*INT64), max_size=3))
            out = [str(v) for v in row]
        else:
            row = draw(st.lists(st.text(max_size=4), max_size=3))
            out = list(row)
        if draw(st.integers(0, 7)) == 0:
            row = row + [None]
            out = _BAD
        values.append(None if not row and draw(st.booleans()) else row)
        expected.append(out)
    if source == "dict":
        array = pa.array(values, pa.list_(pa.string()))
        array = pa.ListArray.from_arrays(array.offsets, array.values.dictionary_encode(), mask=array.is_null())
        return ParquetColumn("tags", array, expected, True)
    return ParquetColumn("tags", pa.array(values, _list_type(source)), expected, True)


@st.composite
def parquet_table(draw):
    """(table, rows expected back (None for a dead letter), the first schema column the reader must refuse)."""
    n = draw(st.integers(0, 12))
    columns = [
        draw(_scalar_int_column("label", n, nullable=False)),
        draw(_price_column(n)),
        draw(_scalar_int_column("ts", n, nullable=True)),
    ]
    items, counts = draw(_id_lists("items", n, *INT64, VOCAB - 1))
    columns += [items, draw(_weight_lists(n, counts))]
    cats, _ = draw(_id_lists("cats", n, *INT32, INT32[1]))
    columns += [cats, draw(_tag_lists(n))]
    refused = next((c.name for c in columns if not c.usable), None)
    arrays = {c.name: c.array for c in columns}
    if draw(st.booleans()):
        arrays["extra"] = pa.array([{"a": i} for i in range(n)])
    order = draw(st.permutations(list(arrays)))
    table = pa.table({name: arrays[name] for name in order})
    rows = []
    if refused is None:
        for r in range(n):
            values = {c.name: c.expected[r] for c in columns}
            ids, weights = values["items"], values["items__weights"]
            lengths_differ = ids is not _BAD and weights is not _BAD and len(ids) != len(weights)
            bad = any(v is _BAD for v in values.values()) or lengths_differ
            rows.append(None if bad else {name: values[name] for name in TABLE_COLUMNS})
    return table, rows, refused
