"""Columns read as real logs lay them out: a renamed header column, many columns as one list, derived labels.

Every expected value is worked out from the file's text with Python's csv module or by hand.
"""

import csv
import random

import pytest
from conftest import SHARED_DATA

from sparse_io import DeadLetterSink, FeatureSpec, Schema, read_file
from sparse_io.errors import LayoutError
from sparse_io.readers import ColumnRange, ColumnSource

MOVIELENS = SHARED_DATA / "movielens1m_deepctr_sample.csv"
HISTORY = 50


def _rows(path, schema, sources=(), fmt="csv", **kwargs):
    sink = DeadLetterSink()
    batches = list(read_file(str(path), fmt, schema, dead_letters=sink, column_sources=list(sources), **kwargs))
    for b in batches:
        assert b.schema == schema.arrow_schema()
    return [r for b in batches for r in b.to_pylist()], sink


# --- column: one header column under the entry's name ----------------------------------------------


def _typed_movielens(tmp_path):
    """The MovieLens sample with RecBole's typed header (`user_id:token`, ...), tab-separated."""
    if not MOVIELENS.exists():
        pytest.skip(f"real sample {MOVIELENS.name} not present at {SHARED_DATA}")
    with open(MOVIELENS, newline="", encoding="utf-8") as f:
        records = list(csv.DictReader(f))
    typed = {"user_id": "user_id:token", "movie_id": "item_id:token", "rating": "rating:float",
             "timestamp": "timestamp:float", "genres": "genre:token_seq"}
    path = tmp_path / "ml.inter"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(typed.values())
        writer.writerows([r[k] for k in typed] for r in records)
    return path, records


def test_a_typed_movielens_header_reads_under_plain_names_with_a_derived_label(tmp_path):
    path, records = _typed_movielens(tmp_path)
    schema = Schema([
        FeatureSpec("liked", "label", "int64"),
        FeatureSpec("user_id", "sparse", "string"),
        FeatureSpec("movie_id", "sparse", "int64"),
        FeatureSpec("genres", "sparse", "string"),
    ])
    sources = [
        ColumnSource("liked", label_from="rating:float", at_least=4),
        ColumnSource("user_id", column="user_id:token"),
        ColumnSource("movie_id", column="item_id:token"),
        ColumnSource("genres", column="genre:token_seq"),
    ]
    rows, sink = _rows(path, schema, sources, fmt="tsv")
    assert sink.bad == 0 and sink.records == len(records) == 200
    assert rows == [
        {"liked": int(int(r["rating"]) >= 4), "user_id": [r["user_id"]], "movie_id": [int(r["movie_id"])],
         "genres": r["genres"].split("|")}
        for r in records
    ]
    assert sum(r["liked"] for r in rows) == 65 + 48  # the README's rating counts: 65 fours, 48 fives


def test_the_typed_header_is_refused_as_a_name_without_column(tmp_path):
    path, _ = _typed_movielens(tmp_path)
    schema = Schema([FeatureSpec("user_id", "sparse", "string")])
    with pytest.raises(LayoutError, match=r"lacks column\(s\) \['user_id'\]"):
        _rows(path, schema, fmt="tsv")


# --- columns: many cells as one list, padding and mask -----------------------------------------------


def _alimama(path, rows, seed, header=True):
    """Alimama-like rows: label, user, cate_id, 50 `his_cate` cells (padded with "0"), 50 `his_mask` cells.

    Returns the expected history per row, computed cell by cell: kept where the mask is 1 and the cell
    is not the padding "0".
    """
    rng = random.Random(seed)
    expected = []
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        if header:
            writer.writerow(["label", "user", "cate_id"] + ["his_cate"] * HISTORY + ["his_mask"] * HISTORY)
        for _ in range(rows):
            length = rng.randint(0, HISTORY)
            cells = [str(rng.randint(1, 30)) for _ in range(length)] + ["0"] * (HISTORY - length)
            mask = ["1"] * length + ["0"] * (HISTORY - length)
            for j in rng.sample(range(HISTORY), 3):  # a masked-out real id, a kept padding cell, a stray pad
                mask[j] = "0" if j < length and rng.random() < 0.5 else mask[j]
                if j >= length and rng.random() < 0.3:
                    cells[j] = "77"  # garbage under a 0 mask is dropped unread
            if length and rng.random() < 0.2:
                cells[0] = "0"  # padding inside the history, mask 1: still dropped
            writer.writerow([str(rng.randint(0, 1)), f"u{rng.randint(0, 9)}", str(rng.randint(1, 30))] + cells
                            + mask)
            expected.append([int(c) for c, m in zip(cells, mask) if m == "1" and c != "0"])
    return expected


ALIMAMA_SCHEMA = Schema([
    FeatureSpec("label", "label", "int64"),
    FeatureSpec("user", "sparse", "string"),
    FeatureSpec("cate_id", "sparse", "int64"),
    FeatureSpec("his_cate", "sparse", "int64"),
])


def test_fifty_repeated_his_cate_columns_and_their_mask_read_as_one_list(tmp_path):
    path = tmp_path / "alimama.csv"
    expected = _alimama(path, 300, seed=1)
    source = ColumnSource("his_cate", columns=ColumnRange(name="his_cate"), padding="0",
                          mask=ColumnRange(name="his_mask"))
    rows, sink = _rows(path, ALIMAMA_SCHEMA, [source], batch_size=64)
    assert sink.bad == 0 and sink.records == 300
    assert [r["his_cate"] for r in rows] == expected
    with open(path, newline="") as f:
        plain = list(csv.reader(f))[1:]
    assert [(r["label"], r["user"], r["cate_id"]) for r in rows] == [(int(p[0]), [p[1]], [int(p[2])]) for p in plain]


def test_positions_read_the_same_lists_from_a_file_without_a_header(tmp_path):
    path = tmp_path / "alimama.csv"
    expected = _alimama(path, 120, seed=2, header=False)
    source = ColumnSource("his_cate", columns=ColumnRange(first=3, count=HISTORY), padding="0",
                          mask=ColumnRange(first=3 + HISTORY, count=HISTORY))
    rows, sink = _rows(path, ALIMAMA_SCHEMA, [source], skip_header=False)
    assert sink.bad == 0 and [r["his_cate"] for r in rows] == expected


def test_without_a_header_other_columns_take_the_positions_the_ranges_leave_free(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b,1,u1,c\n")  # the list in fields 0-1, then label, user, cate_id in schema order
    schema = Schema([FeatureSpec("label", "label"), FeatureSpec("user", dtype="string"),
                     FeatureSpec("cats", dtype="string"), FeatureSpec("cate", dtype="string")])
    rows, _ = _rows(path, schema, [ColumnSource("cats", columns=ColumnRange(first=0, count=2))], skip_header=False)
    assert rows == [{"label": 1, "user": ["u1"], "cats": ["a", "b"], "cate": ["c"]}]


def test_missing_cells_are_dropped_and_each_cell_is_one_id(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("k,h,h,h\n1,a|b,NA,c\n2,,,\n")
    schema = Schema([FeatureSpec("k", "label", label_type="integer"), FeatureSpec("h", dtype="string")])
    rows, sink = _rows(path, schema, [ColumnSource("h", columns=ColumnRange(name="h"))], null_values=["", "NA"])
    assert rows == [{"k": 1, "h": ["a|b", "c"]}, {"k": 2, "h": []}] and sink.bad == 0


@pytest.mark.parametrize("cell, reason", [
    ("2", "h: mask cell 1 is 2, not 0 or 1"),
    ("x", "h: mask cell 1: 'x' is not a number"),
    ("", "h: mask cell 1 is missing"),
])
def test_a_mask_cell_that_is_not_0_or_1_is_a_dead_letter(tmp_path, cell, reason):
    path = tmp_path / "x.csv"
    path.write_text(f"k,h,h,m,m\n1,a,b,1,0\n1,a,b,1,{cell}\n1,a,b,0.0,1.0\n")
    schema = Schema([FeatureSpec("k", "label"), FeatureSpec("h", dtype="string")])
    source = ColumnSource("h", columns=ColumnRange(name="h"), mask=ColumnRange(name="m"))
    rows, sink = _rows(path, schema, [source])
    assert [r["h"] for r in rows] == [["a"], ["b"]]
    (letter,) = sink.letters
    assert letter.line == 3 and reason in letter.reason


def test_bad_ids_in_the_list_are_dead_letters_as_in_any_list(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("k,h,h\n1,3,4\n1,3,x\n")
    schema = Schema([FeatureSpec("k", "label"), FeatureSpec("h", dtype="int64")])
    rows, sink = _rows(path, schema, [ColumnSource("h", columns=ColumnRange(name="h"))])
    assert [r["h"] for r in rows] == [[3, 4]] and "h: id 'x' is not an integer" in sink.letters[0].reason


# --- repeated names and misuse ------------------------------------------------------------------------


def test_a_repeated_name_read_by_a_features_own_name_is_still_an_error(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("k,h,h\n1,a,b\n")
    schema = Schema([FeatureSpec("k", "label"), FeatureSpec("h", dtype="string")])
    with pytest.raises(LayoutError, match=r"names column\(s\) \['h'\] more than once.*columns: \{name"):
        _rows(path, schema)
    with pytest.raises(LayoutError, match=r"names column\(s\) \['h'\] more than once"):
        _rows(path, Schema([FeatureSpec("k", "label"), FeatureSpec("g", dtype="string")]),
              [ColumnSource("g", column="h")])


def test_a_repeated_name_no_feature_reads_is_ignored_like_any_extra_column(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("k,h,h,g\n1,a,b,c\n")
    rows, _ = _rows(path, Schema([FeatureSpec("k", "label"), FeatureSpec("g", dtype="string")]))
    assert rows == [{"k": 1, "g": ["c"]}]


@pytest.mark.parametrize("source, header, message", [
    (ColumnSource("h", columns=ColumnRange(name="h"), mask=ColumnRange(name="m")), "k,h,h,m",
     r"feature 'h': the mask \{name: m\} has 1 columns, columns \{name: h\} has 2"),
    (ColumnSource("h", columns=ColumnRange(name="nope")), "k,h,h,m", r"lacks column\(s\) \['nope'\]"),
    (ColumnSource("h", columns=ColumnRange(first=2, count=5)), "k,h,h,m",
     r"columns \{first: 2, count: 5\} reach position 6, but the header has 4 columns"),
    (ColumnSource("h", column="nope"), "k,h,m", r"lacks column\(s\) \['nope'\]"),
])
def test_sources_that_do_not_fit_the_header_are_refused_naming_the_column(tmp_path, source, header, message):
    path = tmp_path / "x.csv"
    path.write_text(header + "\n" + ",".join("1" for _ in header.split(",")) + "\n")
    schema = Schema([FeatureSpec("k", "label"), FeatureSpec("h", dtype="string")])
    with pytest.raises(LayoutError, match=message):
        _rows(path, schema, [source])


def test_a_header_name_without_a_header_is_refused(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("1,a\n")
    schema = Schema([FeatureSpec("k", "label"), FeatureSpec("h", dtype="string")])
    with pytest.raises(LayoutError, match=r"feature 'h' reads header column 'a:b', but the file has no header"):
        _rows(path, schema, [ColumnSource("h", column="a:b")], skip_header=False)


@pytest.mark.parametrize("make, message", [
    (lambda: ColumnSource("h", column="a", columns=ColumnRange(name="a")), "give one of column, columns, from"),
    (lambda: ColumnSource("h", mask=ColumnRange(name="m")), "padding and mask apply to columns"),
    (lambda: ColumnSource("h", columns=ColumnRange(first=0, count=3), mask=ColumnRange(first=3, count=2)),
     "the mask has 2 columns, columns has 3"),
    (lambda: ColumnSource("h", columns=ColumnRange(first=0, count=3), mask=ColumnRange(first=2, count=3)),
     "overlap"),
    (lambda: ColumnRange(name="a", first=1, count=2), "a name, or first and count, not both"),
    (lambda: ColumnRange(first=-1, count=2), "first must be an integer >= 0"),
    (lambda: ColumnRange(first=0, count=0), "count must be an integer >= 1"),
    (lambda: ColumnSource("y", label_from="r"), "needs at_least or in"),
    (lambda: ColumnSource("y", label_from="r", at_least=4, one_of=(4,)), "needs at_least or in"),
    (lambda: ColumnSource("y", label_from="r", one_of=(4, "5")), "numbers or of strings"),
    (lambda: ColumnSource("y", at_least=4), "at_least and in apply to a label derived with from"),
])
def test_sources_that_do_not_go_together_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("spec, source, message", [
    (FeatureSpec("h", "dense", "float32"), ColumnSource("h", columns=ColumnRange(name="h")), "must be sparse"),
    (FeatureSpec("h", weighted=True), ColumnSource("h", columns=ColumnRange(name="h")), "not weighted"),
    (FeatureSpec("h", "dense", "float32"), ColumnSource("h", label_from="r", at_least=1), "kind: label"),
    (FeatureSpec("h", "dense", "float32"), ColumnSource("x", column="r"), "'x', which is not in the schema"),
])
def test_sources_that_do_not_fit_the_feature_are_refused(tmp_path, spec, source, message):
    path = tmp_path / "x.csv"
    path.write_text("h,r\n1,1\n")
    with pytest.raises(ValueError, match=message):
        _rows(path, Schema([spec]), [source])


def test_column_sources_apply_to_delimited_formats_only(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"h": 1}\n')
    with pytest.raises(ValueError, match="apply to .*not 'jsonl'"):
        _rows(path, Schema([FeatureSpec("h", "dense", "float32")]), [ColumnSource("h", column="g")], fmt="jsonl")


# --- derived labels ---------------------------------------------------------------------------------


def _ratings(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("user,rating,event\nu1,4,buy\nu2,3.5,view\nu3,5.0,click\nu4,1,buy\n")
    return path


def test_at_least_and_in_make_zero_one_labels_and_the_source_stays_a_feature_only_if_listed(tmp_path):
    path = _ratings(tmp_path)
    base = [FeatureSpec("user", dtype="string")]
    liked = [ColumnSource("liked", label_from="rating", at_least=4)]
    rows, _ = _rows(path, Schema([FeatureSpec("liked", "label"), *base]), liked)
    assert rows == [{"liked": 1, "user": ["u1"]}, {"liked": 0, "user": ["u2"]}, {"liked": 1, "user": ["u3"]},
                    {"liked": 0, "user": ["u4"]}]
    kept = Schema([FeatureSpec("liked", "label"), *base, FeatureSpec("rating", "dense", "float32")])
    rows, _ = _rows(path, kept, liked)
    assert [(r["liked"], r["rating"]) for r in rows] == [(1, 4.0), (0, 3.5), (1, 5.0), (0, 1.0)]
    rows, _ = _rows(path, Schema([FeatureSpec("top", "label"), *base]),
                    [ColumnSource("top", label_from="rating", one_of=(5, 1))])
    assert [r["top"] for r in rows] == [0, 0, 1, 1]  # "5.0" is the number 5
    rows, _ = _rows(path, Schema([FeatureSpec("bought", "label", "float32", label_type="real"), *base]),
                    [ColumnSource("bought", label_from="event", one_of=("buy", "click"))])
    assert [r["bought"] for r in rows] == [1.0, 0.0, 1.0, 1.0]


def test_a_missing_or_unparsable_source_value_is_a_dead_letter_with_its_reason(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("user,rating\nu1,4\nu2,\nu3,great\nu4,NA\n")
    schema = Schema([FeatureSpec("liked", "label"), FeatureSpec("user", dtype="string")])
    rows, sink = _rows(path, schema, [ColumnSource("liked", label_from="rating", at_least=4)],
                       null_values=["", "NA"])
    assert rows == [{"liked": 1, "user": ["u1"]}]
    assert [(d.line, d.reason) for d in sink.letters] == [
        (3, "liked: source column 'rating' is missing"),
        (4, "liked: source column 'rating': 'great' is not a number (or is out of float64 range)"),
        (5, "liked: source column 'rating' is missing"),
    ]


def test_from_a_position_in_a_file_without_a_header(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("u1,4\nu2,2\n")
    schema = Schema([FeatureSpec("liked", "label"), FeatureSpec("user", dtype="string")])
    rows, _ = _rows(path, schema, [ColumnSource("liked", label_from=1, at_least=4)], skip_header=False)
    assert rows == [{"liked": 1, "user": ["u1"]}, {"liked": 0, "user": ["u2"]}]


def test_quoted_cells_and_crlf_line_ends_read_as_the_csv_module_reads_them(tmp_path):
    rows = [["1", "a,b", 'say "hi"', "0", "1", "1", "1"], ["0", "", "c", "d", "0", "1", "1"]]
    path = tmp_path / "x.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
        writer.writerow(["k", "h", "h", "h", "m", "m", "m"])
        writer.writerows(rows)
    with open(path, newline="", encoding="utf-8") as f:
        parsed = list(csv.reader(f))[1:]
    expected = [[c for c, m in zip(r[1:4], r[4:7]) if m == "1" and c not in ("", "0")] for r in parsed]
    schema = Schema([FeatureSpec("k", "label"), FeatureSpec("h", dtype="string")])
    source = ColumnSource("h", columns=ColumnRange(name="h"), padding="0", mask=ColumnRange(name="m"))
    got, sink = _rows(path, schema, [source])
    assert expected == [["a,b", 'say "hi"'], ["c", "d"]]
    assert [r["h"] for r in got] == expected and sink.bad == 0
