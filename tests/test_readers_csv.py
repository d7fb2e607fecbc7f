"""The "csv"/"tsv" formats: header or schema order, id lists joined by a separator, bad rows."""

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import DeadLetterSink, FeatureSpec, Schema, read_file, read_logs

SCHEMA = Schema(
    [
        FeatureSpec("label", "label", "int64", label_type="integer"),
        FeatureSpec("price", "dense", "float32"),
        FeatureSpec("ts", "dense", "int64"),
        FeatureSpec("items", "sparse", "int64", weighted=True, vocabulary_size=1000),
        FeatureSpec("tags", "sparse", "string"),
    ]
)
COLUMNS = ["label", "price", "ts", "items", "items__weights", "tags"]


def _write(tmp_path, text, name="x.csv"):
    path = os.path.join(str(tmp_path), name)
    with open(path, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    return path


def _read(path, fmt="csv", **kw):
    sink = DeadLetterSink()
    batches = list(read_logs(path, fmt, SCHEMA, errors=sink, error_budget=1.0, **kw))
    return pa.Table.from_batches(batches, schema=SCHEMA.arrow_schema()).to_pylist(), sink


_row = st.fixed_dictionaries(
    {
        "label": st.integers(0, 1),
        "price": st.one_of(st.none(), st.floats(width=32, allow_nan=False, allow_infinity=False)),
        "ts": st.one_of(st.none(), st.integers(-(2**62), 2**62)),
        "pairs": st.lists(
            st.tuples(st.integers(0, 999), st.floats(width=32, allow_nan=False, allow_infinity=False)),
            max_size=4,
        ),
        "tags": st.lists(
            st.text(st.characters(codec="utf-8", exclude_characters='|,"\r\n'), min_size=1, max_size=5),
            max_size=3,
        ),
    }
)


@settings(max_examples=30)
@given(st.lists(_row, max_size=15), st.sampled_from([("csv", ","), ("tsv", "\t")]), st.sampled_from([4, 64]))
def test_round_trip_of_plain_python_csv(tmp_path_factory, rows, fmt_delim, batch_size):
    fmt, delim = fmt_delim
    tags_ok = all(delim not in t and not t.isspace() for r in rows for t in r["tags"])
    rows = [r for r in rows if tags_ok]
    lines = [delim.join(COLUMNS)]
    for r in rows:
        lines.append(
            delim.join(
                [
                    str(r["label"]),
                    "" if r["price"] is None else repr(r["price"]),
                    "" if r["ts"] is None else str(r["ts"]),
                    "|".join(str(i) for i, _ in r["pairs"]),
                    "|".join(repr(w) for _, w in r["pairs"]),
                    "|".join(r["tags"]),
                ]
            )
        )
    path = _write(tmp_path_factory.mktemp("csv"), "\n".join(lines) + "\n")
    got, sink = _read(path, fmt, batch_size=batch_size)
    assert sink.bad == 0 and sink.records == len(rows)
    expected = [
        {
            "label": r["label"],
            "price": None if r["price"] is None else float(np.float32(r["price"])),
            "ts": r["ts"],
            "items": [i for i, _ in r["pairs"]],
            "items__weights": [float(np.float32(w)) for _, w in r["pairs"]],
            "tags": r["tags"],
        }
        for r in rows
    ]
    assert got == expected


def test_header_picks_columns_by_name_and_ignores_extras(tmp_path):
    path = _write(tmp_path, "tags,extra,items__weights,items,ts,price,label\na|b,zz,0.5|2,3|4,17,2.5,1\n")
    (row,), sink = _read(path)
    assert row == {
        "label": 1,
        "price": 2.5,
        "ts": 17,
        "items": [3, 4],
        "items__weights": [0.5, 2.0],
        "tags": ["a", "b"],
    }


def test_without_header_columns_are_in_schema_order(tmp_path):
    path = _write(tmp_path, "1,,5,7,1.5,x\n")
    (row,), _ = _read(path, skip_header=False)
    assert row == {"label": 1, "price": None, "ts": 5, "items": [7], "items__weights": [1.5], "tags": ["x"]}


def test_quoted_fields_may_hold_the_delimiter(tmp_path):
    path = _write(tmp_path, ",".join(COLUMNS) + '\n1,,,,,"a,b|c"\n0,"3",,"1|2","1|1",\n')
    rows, sink = _read(path)
    assert sink.bad == 0
    assert rows[0]["tags"] == ["a,b", "c"] and rows[1]["price"] == 3.0 and rows[1]["items"] == [1, 2]


def test_other_list_separator(tmp_path):
    path = _write(tmp_path, ",".join(COLUMNS) + "\n1,,,1;2;3,1;1;1,a;b\n")
    (row,), _ = _read(path, list_separator=";")
    assert row["items"] == [1, 2, 3] and row["tags"] == ["a", "b"]


def test_integers_written_as_floats_are_integers(tmp_path):
    path = _write(tmp_path, ",".join(COLUMNS) + "\n1.0,,260.0,5.00,1,\n")
    (row,), sink = _read(path)
    assert sink.bad == 0 and (row["label"], row["ts"], row["items"]) == (1, 260, [5])


def test_signs_zeros_and_the_int64_limits_are_integers(tmp_path):
    lines = ["+5,,-9223372036854775808,,,", "0,,+0009223372036854775807.00,,,"]
    path = _write(tmp_path, ",".join(COLUMNS) + "\n" + "\n".join(lines) + "\n")
    rows, sink = _read(path)
    assert sink.bad == 0
    assert [(r["label"], r["ts"]) for r in rows] == [(5, -(2**63)), (0, 2**63 - 1)]


def test_a_value_is_good_or_bad_whatever_its_neighbours(tmp_path):
    # Arrow's integer parser takes "0x10" when the whole column parses; the pattern check does not.
    for neighbour in ("1", "abc"):
        path = _write(tmp_path, ",".join(COLUMNS) + f"\n0x10,,,,,\n{neighbour},,,,,\n")
        _, sink = _read(path)
        assert [d.line for d in sink][0] == 2


def test_quoted_fields_closed_on_their_line_are_kept(tmp_path):
    path = _write(tmp_path, ",".join(COLUMNS) + '\n1,,,,,"a""b"\n2,,,,,"p"q"r\n3,,,,,a"b\n')
    rows, sink = _read(path)
    assert sink.bad == 0 and [r["tags"] for r in rows] == [['a"b'], ['pq"r'], ['a"b']]


def test_large_int64_values_are_exact(tmp_path):
    path = _write(tmp_path, ",".join(COLUMNS) + f"\n1,,{2**62 + 1},,,\n")
    (row,), _ = _read(path)
    assert row["ts"] == 2**62 + 1


BAD = [
    ("too few fields", "1,2,3", "expected 6 fields, got 3"),
    ("too many fields", "1,,,,,,", "expected 6 fields, got 7"),
    ("non-numeric dense", "1,abc,,,,", "price: 'abc' is not a number"),
    ("non-integral int", "1,,1.5,,,", "ts: '1.5' is not an integer"),
    ("int64 overflow", "1,,99999999999999999999,,,", "ts: '99999999999999999999' is not an integer (or is out"),
    ("int64 underflow", "1,,-9223372036854775809,,,", "ts: '-9223372036854775809' is not an integer (or is out"),
    ("hexadecimal int", "0x10,,,,,", "label: '0x10' is not an integer"),
    ("unclosed quote", '1,,,,,"abc', "a quoted field is not closed before the end of the line"),
    ("unclosed quote with escaped quotes", '1,,,,,"a""', "a quoted field is not closed"),
    ("non-numeric id", "1,,,3|x,1|1,", "items: id 'x' is not an integer"),
    ("empty id in list", "1,,,3||4,1|1|1,", "items: empty or null id in list"),
    ("id beyond vocabulary", "1,,,1000,1,", "items: id 1000 is >= vocabulary size 1000"),
    ("negative id", "1,,,-2,1,", "items: id -2 is negative"),
    ("weights of other length", "1,,,1|2,1,", "items__weights: 1 weights for 2 ids"),
    ("non-numeric weight", "1,,,1,w,", "items__weights: weight 'w' is not a number"),
    ("missing label", ",,,,,", "label: missing label"),
    ("blank line", "", "empty line"),
    ("bad utf-8", b"1,,,,,\xc3\x28", "invalid UTF-8 at byte 6"),
]


@pytest.mark.parametrize("case, line, reason", BAD, ids=[b[0] for b in BAD])
def test_bad_row_is_a_dead_letter_with_its_line_number(tmp_path, case, line, reason):
    good = b"0,1,2,3,1,t"
    raw = line if isinstance(line, bytes) else line.encode()
    path = _write(tmp_path, b"\n".join([",".join(COLUMNS).encode(), good, raw, good]) + b"\n")
    rows, sink = _read(path, batch_size=2)
    assert len(rows) == 2 and sink.records == 3 and sink.bad == 1
    (letter,) = sink.letters
    assert letter.line == 3 and reason in letter.reason


def test_header_missing_a_needed_column_is_an_error(tmp_path):
    path = _write(tmp_path, "label,price\n1,2\n")
    with pytest.raises(
        ValueError, match=r"header lacks column\(s\) \['ts', 'items', 'items__weights', 'tags'\]"
    ):
        list(read_file(path, "csv", SCHEMA))


def test_header_naming_a_column_twice_is_an_error(tmp_path):
    path = _write(tmp_path, "label,label\n1,2\n")
    with pytest.raises(ValueError, match=r"names column\(s\) \['label'\] more than once"):
        list(read_file(path, "csv", SCHEMA))


def test_empty_and_header_only_files_yield_nothing(tmp_path):
    for text in ("", ",".join(COLUMNS) + "\n", ",".join(COLUMNS)):
        rows, sink = _read(_write(tmp_path, text))
        assert rows == [] and sink.records == 0


def test_arguments_are_checked_before_reading():
    with pytest.raises(ValueError, match="needs a schema"):
        read_logs("x", "csv")
    with pytest.raises(ValueError, match="list_separator ',' cannot separate ids"):
        read_logs("x", "csv", SCHEMA, list_separator=",")
    with pytest.raises(ValueError, match="format 'xml' is not one of"):
        read_logs("x", "xml", SCHEMA)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        read_file("x", "csv", SCHEMA, batch_size=0)
    with pytest.raises(FileNotFoundError, match="no input file matches"):
        read_logs("/nonexistent/*.csv", "csv", SCHEMA)


def test_header_after_a_byte_order_mark(tmp_path):
    path = _write(tmp_path, b"\xef\xbb\xbf" + ",".join(COLUMNS).encode() + b"\r\n1,,,,,\r\n")
    (row,), sink = _read(path)
    assert sink.bad == 0 and row["label"] == 1
