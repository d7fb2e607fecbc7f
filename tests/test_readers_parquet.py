"""The "parquet" format: list columns straight through, compatible types converted, wrong types named."""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparse_io import CorruptFileError, DeadLetterSink, FeatureSpec, Schema, read_logs

SCHEMA = Schema(
    [
        FeatureSpec("label", "label", "int64", label_type="integer"),
        FeatureSpec("price", "dense", "float32"),
        FeatureSpec("items", "sparse", "int64", weighted=True, vocabulary_size=100),
        FeatureSpec("tags", "sparse", "string"),
    ]
)


def _write(tmp_path, table, name="x.parquet", **kw):
    path = os.path.join(str(tmp_path), name)
    pq.write_table(table, path, **kw)
    return path


def _read(path, **kw):
    sink = DeadLetterSink()
    batches = list(read_logs(path, "parquet", SCHEMA, errors=sink, error_budget=1.0, **kw))
    return batches, sink


def _table(**overrides):
    columns = {
        "label": pa.array([1, 0, 1], pa.int64()),
        "price": pa.array([1.5, None, 3.0], pa.float32()),
        "items": pa.array([[1, 2], [], None], pa.list_(pa.int64())),
        "items__weights": pa.array([[0.5, 1.0], [], None], pa.list_(pa.float32())),
        "tags": pa.array([["a"], ["b", "c"], []], pa.list_(pa.string())),
        "unused": pa.array(["x", "y", "z"]),
    }
    columns.update(overrides)
    return pa.table(columns)


def test_list_columns_pass_straight_through_in_bounded_batches(tmp_path):
    path = _write(tmp_path, pa.concat_tables([_table()] * 5), row_group_size=4)
    batches, sink = _read(path, batch_size=4)
    assert all(b.num_rows <= 4 and b.schema == SCHEMA.arrow_schema() for b in batches)
    rows = pa.Table.from_batches(batches).to_pylist()
    assert len(rows) == 15 and sink.records == 15 and sink.bad == 0
    assert rows[:3] == [
        {"label": 1, "price": 1.5, "items": [1, 2], "items__weights": [0.5, 1.0], "tags": ["a"]},
        {"label": 0, "price": None, "items": [], "items__weights": [], "tags": ["b", "c"]},
        {"label": 1, "price": 3.0, "items": [], "items__weights": [], "tags": []},
    ]


def test_compatible_types_are_converted(tmp_path):
    table = _table(
        label=pa.array([1, 0, 1], pa.int32()),
        price=pa.array([1.5, None, 3], pa.float64()),
        items=pa.array([[1, 2], [], [7]], pa.large_list(pa.int32())),
        items__weights=pa.array([[0.5, 1], [], [2]], pa.list_(pa.float64())),
        tags=pa.array(["a", None, "c"]),  # a scalar column: one-id rows
    )
    batches, sink = _read(_write(tmp_path, table))
    rows = pa.Table.from_batches(batches).to_pylist()
    assert sink.bad == 0
    assert [r["items"] for r in rows] == [[1, 2], [], [7]]
    assert [r["tags"] for r in rows] == [["a"], [], ["c"]]
    assert [r["label"] for r in rows] == [1, 0, 1]


@pytest.mark.parametrize(
    "column, array, pattern",
    [
        ("label", pa.array([[1], [0], [1]]), "column label: expected a scalar int64, got list<"),
        ("price", pa.array(["1", "2", "3"]), "column price: expected numbers for float32, got string"),
        (
            "items",
            pa.array([[1.0], [], []]).cast(pa.list_(pa.string())),
            "column items: expected numbers for int64",
        ),
    ],
)
def test_unusable_column_types_are_errors_naming_file_and_column(tmp_path, column, array, pattern):
    path = _write(tmp_path, _table(**{column: array}))
    with pytest.raises(ValueError, match=pattern) as info:
        _read(path)
    assert path in str(info.value)


def test_missing_column_is_an_error(tmp_path):
    path = _write(tmp_path, _table().drop_columns(["tags"]))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['tags'\]"):
        _read(path)


def test_bad_values_are_dead_letters_numbered_by_row(tmp_path):
    table = _table(
        label=pa.array([1, None, 1], pa.int64()),
        items=pa.array([[1, 2], [], [100]], pa.list_(pa.int64())),
        items__weights=pa.array([[0.5, 1.0], [], [1.0]], pa.list_(pa.float32())),
    )
    batches, sink = _read(_write(tmp_path, pa.concat_tables([table, table])), batch_size=4)
    assert sum(b.num_rows for b in batches) == 2
    assert [(d.line, d.reason) for d in sink] == [
        (2, "label: missing label"),
        (3, "items: id 100 is >= vocabulary size 100"),
        (5, "label: missing label"),
        (6, "items: id 100 is >= vocabulary size 100"),
    ]
    assert '"items": [100]' in sink.letters[1].raw


def test_empty_parquet_file_yields_nothing(tmp_path):
    batches, sink = _read(_write(tmp_path, _table().slice(0, 0)))
    assert batches == [] and sink.records == 0


def test_a_file_of_no_rows_with_an_unusable_column_type_is_still_an_error(tmp_path):
    path = _write(tmp_path, _table(label=pa.array([[1], [0], [1]])).slice(0, 0))
    with pytest.raises(ValueError, match="column label: expected a scalar int64") as info:
        _read(path)
    assert path in str(info.value)


def test_an_unusable_weights_column_is_named_as_such(tmp_path):
    path = _write(tmp_path, _table(items__weights=pa.array([["1"], [], []], pa.list_(pa.string()))))
    with pytest.raises(ValueError, match="column items__weights: expected numbers for float32, got string"):
        _read(path)


def test_dictionary_encoded_strings_are_read(tmp_path):
    tags = pa.array([["a", "b"], [], ["a"]], pa.list_(pa.string()))
    tags = pa.ListArray.from_arrays(tags.offsets, tags.values.dictionary_encode())
    batches, sink = _read(_write(tmp_path, _table(tags=tags, price=pa.array([1.0, 2.0, 3.0]).dictionary_encode())))
    rows = pa.Table.from_batches(batches).to_pylist()
    assert sink.bad == 0 and [r["tags"] for r in rows] == [["a", "b"], [], ["a"]]
    assert [r["price"] for r in rows] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("ints, exact", [
    (pa.array([-2**63, 2**62, -(2**24), 7], pa.int64()), [True, True, True, True]),  # powers of two are exact
    (pa.array([2**63 - 1, 2**24 + 1, -(2**63) + 1], pa.int64()), [False, False, False]),  # float32 rounds these
    (pa.array([2**63, 2**64 - 2**40, 3], pa.uint64()), [True, True, True]),
    (pa.array([2**64 - 1], pa.uint64()), [False]),
])
def test_integers_read_as_float32_are_kept_exactly_when_float32_holds_them(tmp_path, ints, exact):
    n = len(ints)
    table = _table(label=pa.array([1] * n, pa.int64()), price=ints, items=pa.array([[1]] * n, pa.list_(pa.int64())),
                   items__weights=pa.array([[1.0]] * n, pa.list_(pa.float32())),
                   tags=pa.array([["a"]] * n, pa.list_(pa.string())), unused=pa.array(["x"] * n))
    batches, sink = _read(_write(tmp_path, table))
    kept = [r["price"] for b in batches for r in b.to_pylist()]
    assert kept == [float(v) for v, ok in zip(ints.to_pylist(), exact) if ok]
    assert sorted(d.line for d in sink) == [i + 1 for i, ok in enumerate(exact) if not ok]


def test_lists_of_dictionary_strings_are_read_across_row_groups(tmp_path):
    # pyarrow cannot join such a column's row groups into one batch; a batch larger than a row group must still
    # read (the file is not damaged), every row once, in order.
    tags = [["a"], None, ["b", "c"], [], ["a", "d"]] * 3
    table = _table(label=pa.array([1] * 15, pa.int64()), price=pa.array([1.0] * 15, pa.float32()),
                   items=pa.array([[1]] * 15, pa.list_(pa.int64())),
                   items__weights=pa.array([[1.0]] * 15, pa.list_(pa.float32())),
                   tags=pa.array(tags, pa.list_(pa.dictionary(pa.int32(), pa.string()))),
                   unused=pa.array(["x"] * 15))
    path = _write(tmp_path, table, row_group_size=2)
    batches, sink = _read(path, batch_size=5)
    assert all(b.num_rows <= 5 for b in batches)
    rows = pa.Table.from_batches(batches).to_pylist()
    assert [r["tags"] for r in rows] == [t or [] for t in tags]
    assert sink.records == 15 and sink.bad == 0


@pytest.mark.parametrize("damage", ["empty", "truncated", "not parquet"])
def test_a_damaged_file_is_a_corrupt_file_error_naming_it(tmp_path, damage):
    path = _write(tmp_path, _table())
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write({"empty": b"", "truncated": data[: len(data) // 2], "not parquet": b"label,price\n1,2\n"}[damage])
    with pytest.raises(CorruptFileError, match="damaged Parquet file") as info:
        _read(path)
    assert info.value.path == path and str(info.value).startswith(path)
