"""The "jsonl" format: scalars or lists, parallel weights, timestamps, and bad lines."""

import json
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse_io import DeadLetterSink, FeatureSpec, Schema, read_logs

SCHEMA = Schema(
    [
        FeatureSpec("clicked", "label", "int64", label_type="integer"),
        FeatureSpec("ts", "dense", "int64"),
        FeatureSpec("price", "dense", "float32"),
        FeatureSpec("items", "sparse", "int64", weighted=True),
        FeatureSpec("tags", "sparse", "string"),
    ]
)


def _write(tmp_path, lines, name="x.jsonl"):
    path = os.path.join(str(tmp_path), name)
    with open(path, "wb") as f:
        f.write(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines) + b"\n")
    return path


def _read(path, **kw):
    sink = DeadLetterSink()
    batches = list(read_logs(path, "jsonl", SCHEMA, errors=sink, error_budget=1.0, **kw))
    return pa.Table.from_batches(batches, schema=SCHEMA.arrow_schema()).to_pylist(), sink


_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
_row = st.fixed_dictionaries(
    {
        "clicked": st.integers(0, 1),
        "ts": st.one_of(st.none(), st.integers(-(2**62), 2**62)),
        "price": st.one_of(st.none(), _f32),
        "pairs": st.lists(st.tuples(st.integers(0, 2**62), _f32), max_size=4),
        "tags": st.lists(st.text(st.characters(codec="utf-8"), max_size=4), max_size=3),
        "scalar_ids": st.booleans(),
        "absent": st.booleans(),
    }
)


def _json_line(r, foreign) -> str:
    obj = {"clicked": r["clicked"], "tags": r["tags"], "other": foreign}
    if not r["absent"]:
        obj["ts"], obj["price"] = r["ts"], r["price"]
    ids, weights = [i for i, _ in r["pairs"]], [w for _, w in r["pairs"]]
    if r["scalar_ids"] and len(ids) == 1:
        obj["items"], obj["items__weights"] = ids[0], weights[0]
    elif ids or not r["absent"]:
        obj["items"], obj["items__weights"] = ids, weights
    return json.dumps(obj)


@settings(max_examples=30)
@given(st.lists(_row, max_size=12), st.booleans())
def test_round_trip_of_plain_python_json(tmp_path_factory, rows, lists_only):
    # A key outside the schema: of one type, or of mixed types (read through the slower fallback).
    foreign = {"nested": [1, 2]} if lists_only else {"nested": [1, "x"]}
    if lists_only:
        rows = [dict(r, scalar_ids=False) for r in rows]
    path = _write(tmp_path_factory.mktemp("jsonl"), [_json_line(r, foreign) for r in rows] or [])
    if not rows:
        open(path, "w").close()
    got, sink = _read(path, batch_size=5)
    assert sink.bad == 0 and sink.records == len(rows)
    expected = [
        {
            "clicked": r["clicked"],
            "ts": None if r["absent"] else r["ts"],
            "price": None if r["absent"] or r["price"] is None else float(np.float32(r["price"])),
            "items": [i for i, _ in r["pairs"]],
            "items__weights": [float(np.float32(w)) for _, w in r["pairs"]],
            "tags": r["tags"],
        }
        for r in rows
    ]
    assert got == expected


def test_scalars_lists_nulls_and_absent_keys(tmp_path):
    path = _write(
        tmp_path,
        [
            '{"clicked": 1, "items": 7, "items__weights": 0.5, "tags": "a"}',
            '{"clicked": 0, "items": [1, 2], "items__weights": [1, 2], "tags": ["x", "y"], "price": 3}',
            '{"clicked": 0, "items": null, "tags": null, "price": null}',
            '{"clicked": 1.0}',
        ],
    )
    rows, sink = _read(path)
    assert sink.bad == 0
    assert [(r["items"], r["items__weights"], r["tags"], r["price"]) for r in rows] == [
        ([7], [0.5], ["a"], None),
        ([1, 2], [1.0, 2.0], ["x", "y"], 3.0),
        ([], [], [], None),
        ([], [], [], None),
    ]
    assert [r["clicked"] for r in rows] == [1, 0, 0, 1]


def test_timestamps_are_int64_exact_or_iso_seconds(tmp_path):
    path = _write(
        tmp_path,
        [
            f'{{"clicked": 1, "ts": {2**53 + 1}}}',
            '{"clicked": 1, "ts": 1700000000123}',
        ],
    )
    rows, _ = _read(path)
    assert [r["ts"] for r in rows] == [2**53 + 1, 1700000000123]
    path = _write(
        tmp_path, ['{"clicked": 1, "ts": "2020-01-01T00:00:01", "tags": ["2020-01-01"]}'], "iso.jsonl"
    )
    (row,), sink = _read(path)
    assert sink.bad == 0 and row["ts"] == 1577836801
    assert row["tags"] == ["2020-01-01"]  # text that looks like a date stays text for a string feature


def test_numbers_for_a_string_feature_become_text(tmp_path):
    (row,), _ = _read(_write(tmp_path, ['{"clicked": 0, "tags": [12, 7]}']))
    assert row["tags"] == ["12", "7"]


def test_a_key_whose_type_changes_between_lines_still_reads_every_line(tmp_path):
    lines = [f'{{"clicked": 1, "items": {i}, "items__weights": 1}}' for i in range(6)]
    lines[3] = '{"clicked": 1, "items": [30, 31], "items__weights": [1, 1]}'
    rows, sink = _read(_write(tmp_path, lines), batch_size=100)
    assert sink.bad == 0 and [r["items"] for r in rows] == [[0], [1], [2], [30, 31], [4], [5]]


BAD = [
    ("invalid JSON", "{not json", "invalid JSON"),
    ("not an object", "[1, 2]", "invalid JSON"),
    ("label as text", '{"clicked": "yes"}', "clicked: expected numbers for int64, got string"),
    ("label missing", '{"items": [1]}', "clicked: missing label"),
    ("label fractional", '{"clicked": 0.5}', "clicked: 0.5 is not an int64 integer"),
    ("boolean number", '{"clicked": 1, "price": true}', "price: expected numbers for float32, got bool"),
    (
        "null id",
        '{"clicked": 1, "items": [1, null], "items__weights": [1, 1]}',
        "items: empty or null id in list",
    ),
    (
        "fractional id",
        '{"clicked": 1, "items": [1.5], "items__weights": [1]}',
        "items: id 1.5 is not an int64 integer",
    ),
    ("nested list", '{"clicked": 1, "items": [[1]]}', "items: expected numbers for int64, got list"),
    ("negative id", '{"clicked": 1, "items": [-3], "items__weights": [1]}', "items: id -3 is negative"),
    (
        "weights too short",
        '{"clicked": 1, "items": [1, 2], "items__weights": [1]}',
        "items__weights: 1 weights for 2 ids",
    ),
    ("weights missing", '{"clicked": 1, "items": [1]}', "items__weights: 0 weights for 1 ids"),
    ("duplicate key", '{"clicked": 1, "clicked": 0}', "invalid JSON"),
    ("whitespace line", "   ", "empty line"),
    ("null line", "null", "invalid JSON: a line must hold one JSON object"),
    ("number line", "17", "invalid JSON: a line must hold one JSON object"),
    ("list line", "[1, 2]", "invalid JSON: a line must hold one JSON object"),
    ("two objects", '{"clicked": 1} {"clicked": 0}', "expected one JSON object per line"),
    (
        "float beyond 2**53 for an integer",
        '{"clicked": 1, "ts": 9007199254740993.0}',
        "ts: 9007199254740992 is an integer too large to be read exactly",
    ),
    ("bad utf-8", b'{"clicked": 1, "tags": ["\xff"]}', "invalid UTF-8 at byte 25"),
]


@pytest.mark.parametrize("case, line, reason", BAD, ids=[b[0] for b in BAD])
def test_bad_line_is_a_dead_letter_with_its_line_number(tmp_path, case, line, reason):
    good = '{"clicked": 1, "items": [1], "items__weights": [1.0]}'
    rows, sink = _read(_write(tmp_path, [good, good, line, good]), batch_size=3)
    assert len(rows) == 3 and sink.records == 4 and sink.bad == 1
    (letter,) = sink.letters
    assert letter.line == 3 and reason in letter.reason, letter.reason


@pytest.mark.parametrize("first", ["null", " null", "nullx"])
def test_a_block_starting_with_null_is_read_not_crashed_on(tmp_path, first):
    # pyarrow.json aborts the process on a block that starts with a bare null
    rows, sink = _read(_write(tmp_path, [first, '{"clicked": 1}']))
    assert len(rows) == 1 and [d.line for d in sink] == [1]


def test_integers_stay_exact_beside_floats_of_the_same_key(tmp_path):
    # One float literal makes the whole block's key float64, which would round 2**53 + 1.
    lines = ['{"clicked": 1, "ts": 9007199254740993}', '{"clicked": 1, "ts": 2.0}', '{"clicked": 1, "ts": 2.5}']
    rows, sink = _read(_write(tmp_path, lines))
    assert [r["ts"] for r in rows] == [2**53 + 1, 2] and [d.line for d in sink] == [3]
    lines = [
        '{"clicked": 1, "items": [9007199254740993, 1], "items__weights": [1, 1]}',
        '{"clicked": 9223372036854775807}',
        '{"clicked": 1e30}',
    ]
    rows, sink = _read(_write(tmp_path, lines))
    assert [r["items"] for r in rows] == [[2**53 + 1, 1], []] and [r["clicked"] for r in rows] == [1, 2**63 - 1]
    assert [d.line for d in sink] == [3]


def test_empty_file_yields_nothing(tmp_path):
    path = os.path.join(str(tmp_path), "x.jsonl")
    open(path, "w").close()
    rows, sink = _read(path)
    assert rows == [] and sink.records == 0


def test_keys_outside_the_schema_may_hold_values_of_mixed_types(tmp_path):
    lines = [
        '{"clicked": 1, "ts": "2020-01-01T00:00:01", "tags": "2020-01-01", "meta": [1, "x", {"a": null}]}',
        '{"clicked": 0, "ts": 5, "price": 2, "items": [3], "items__weights": [0.5], "meta": "text"}',
    ]
    rows, sink = _read(_write(tmp_path, lines))
    assert sink.bad == 0
    assert [(r["clicked"], r["ts"], r["price"], r["items"], r["tags"]) for r in rows] == [
        (1, 1577836801, None, [], ["2020-01-01"]),
        (0, 5, 2.0, [3], []),
    ]
