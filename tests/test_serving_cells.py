"""Raw cells read in the graph (`transforms.tfdata.logs.cells`) exactly as the ingest's CSV reader reads them.

The reference is `sparse_io.read_file` on a log whose rows are the same cells: every row it keeps must
parse to the same values here, and every row it sends to the dead letters must be refused here, naming the
column.
"""

import csv

import numpy as np
import pytest
import tensorflow as tf

from sparse_io import DeadLetterSink, FeatureSpec, Schema, read_file
from transforms.tfdata.core.columns import MISSING_INT
from transforms.tfdata.logs.cells import CellRules, parse_cells

SCHEMA = Schema([
    FeatureSpec("clicked", "label", "int64"),
    FeatureSpec("tags", "sparse", "string"),
    FeatureSpec("item", "sparse", "int64"),
    FeatureSpec("price", "dense", "float32"),
    FeatureSpec("wide", "dense", "float64"),
    FeatureSpec("count", "dense", "int64"),
])
COLUMNS = [s for s in SCHEMA if s.kind != "label"]


def _reference(tmp_path, rows, separator, nulls):
    path = tmp_path / "log.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([["clicked", *[s.name for s in COLUMNS]],
                                                     *[["1", *r] for r in rows]])
    sink = DeadLetterSink()
    kept = [r for b in read_file(str(path), "csv", SCHEMA, list_separator=separator, null_values=list(nulls),
                                 dead_letters=sink) for r in b.to_pylist()]
    return kept, sink


def _parse(rows, rules):
    cells = {s.name: tf.constant([r[j] for r in rows], tf.string) for j, s in enumerate(COLUMNS)}
    return parse_cells(cells, COLUMNS, rules)


GOOD = [  # tags, item, price, wide, count
    ["a b", "7", "1.5", "2.25", "3"],
    ["NA", "+5", "", "NA", "-4"],
    ["é 日本", "260.0", "1e-3", "0.1", "260.0"],
    ["x", "", "16777217", "-1.5e300", ""],  # 16777217: the reader keeps it as 16777216.0, so does serving
    ["", "0 1 2", "NA", "", "NA"],
    ["Z", "9223372036854775807", ".5", "1", "9223372036854775807"],
]


@pytest.mark.parametrize("separator", [" ", "^", "|"])
def test_good_cells_parse_to_the_readers_values(separator, tmp_path):
    rows = [[c.replace(" ", separator) if j < 2 else c for j, c in enumerate(r)] for r in GOOD]
    kept, sink = _reference(tmp_path, rows, separator, ("", "NA"))
    assert sink.bad == 0 and len(kept) == len(rows)
    got = _parse(rows, CellRules(list_separator=separator, null_values=("", "NA")))
    for name in ("tags", "item"):
        values = got[name].to_list()
        expected = [r[name] or [] for r in kept]
        assert [[v.decode() if isinstance(v, bytes) else v for v in row] for row in values] == expected, name
    for name, dtype, missing in (("price", np.float32, np.nan), ("wide", np.float64, np.nan),
                                 ("count", np.int64, MISSING_INT)):
        expected = np.array([missing if r[name] is None else r[name] for r in kept], dtype)
        assert got[name].dtype == tf.as_dtype(dtype)
        np.testing.assert_array_equal(got[name].numpy(), expected, err_msg=name)


@pytest.mark.parametrize("column, cell", [
    ("tags", "a||b"),          # an empty id inside a list
    ("item", "-1"),            # a negative id
    ("item", "x7"),            # not an integer
    ("item", "99999999999999999999"),  # out of int64 range
    ("price", "abc"),          # not a number
    ("price", "33554433"),     # an integer float32 would round (2**25 + 1)
    ("price", "1e999"),        # not finite
    ("wide", "nan"),
    ("count", "1.5"),          # not an integer
])
def test_a_cell_the_reader_sends_to_the_dead_letters_is_refused_naming_its_column(column, cell, tmp_path):
    row = list(GOOD[0])
    row[[s.name for s in COLUMNS].index(column)] = cell
    kept, sink = _reference(tmp_path, [row], "|", ("", "NA"))
    assert kept == [] and sink.bad == 1
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)) as err:
        _parse([row], CellRules(null_values=("", "NA")))
    if column != "item" or cell != "99999999999999999999":  # TensorFlow's own out-of-range message
        assert f"column '{column}'" in str(err.value)


def test_a_column_of_its_own_null_tokens_and_criteo_hex_ids():
    rules = CellRules(null_values=("",), feature_null_values=(("tags", ("-", "")),))
    got = parse_cells({"tags": tf.constant(["-", "a|b", "NA"])}, [FeatureSpec("tags", "sparse", "string")], rules)
    assert got["tags"].to_list() == [[], [b"a", b"b"], [b"NA"]]
    criteo = CellRules(format="criteo")
    spec = FeatureSpec("C1", "sparse", "string")
    assert parse_cells({"C1": tf.constant(["05db9164", ""])}, [spec], criteo)["C1"].to_list() == [[b"05db9164"], []]
    with pytest.raises(tf.errors.InvalidArgumentError, match="column 'C1'"):
        parse_cells({"C1": tf.constant(["05db916"])}, [spec], criteo)


def test_columns_not_asked_for_are_ignored():
    got = parse_cells({"tags": tf.constant(["a"]), "clicked": tf.constant(["?"])},
                      [FeatureSpec("tags", "sparse", "string")], CellRules())
    assert list(got) == ["tags"]


def test_the_docstring_example_runs():
    import doctest

    import transforms.tfdata.logs.cells as cells

    assert doctest.testmod(cells, extraglobs={"tf": tf}).failed == 0
