"""KeyedTable: the Arrow lookup behind side-table joins, against a plain dict join of the same rows."""

import random

import pyarrow as pa
import pytest

from sparse_io.errors import LayoutError
from transforms.beam.keyed_table import KeyedTable, fill_missing, key_values


def _reference(table_rows: list[dict], key: str, columns: list[str], event_keys: list) -> list[dict]:
    """The join worked out row by row with a dict: missing lists are [], missing scalars None."""
    by_key = {row[key]: row for row in table_rows}
    out = []
    for k in event_keys:
        row = by_key.get(k) if k is not None else None
        out.append({c: (row[c] if row is not None else ([] if c == "tags" else None)) for c in columns})
    return out


def _table(rows: list[dict], key_type) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=pa.schema(
        [("k", key_type), ("age", pa.float32()), ("tags", pa.list_(pa.string()))]))


MAKE_KEYS = {
    "scattered ints": (pa.int64(), lambda i: i * 7919 - 50_000),  # binary search over the sorted keys
    "dense ints": (pa.int64(), lambda i: i + 100),  # looked up by position over the keys' range
    "extreme ints": (pa.int64(), lambda i: (i - 1200) * (2**62 // 1300)),  # a range wider than int64 holds
    "strings": (pa.string(), lambda i: f"user-{i}"),  # Fingerprint64, then the bytes compared
}


@pytest.mark.parametrize("keys", sorted(MAKE_KEYS))
def test_join_matches_a_dict_join_on_random_keys(keys):
    key_type, make = MAKE_KEYS[keys]
    rng = random.Random(3)
    keys = rng.sample(range(2000), 600)
    rows = [{"k": make(i), "age": float(rng.randint(18, 70)) if rng.random() < 0.9 else None,
             "tags": [f"t{rng.randint(0, 9)}" for _ in range(rng.randint(0, 3))]} for i in keys]
    # Spread over three batches, as a reader hands them out.
    batches = [_table(rows[:200], key_type), _table(rows[200:450], key_type), _table(rows[450:], key_type)]
    table = KeyedTable.from_batches(batches, "k", ["age", "tags"], where="t.csv")
    events = [make(rng.randrange(-150, 2400)) if rng.random() < 0.95 else None for _ in range(5000)]
    joined, matched = table.join(pa.array(events, type=key_type))
    assert joined.to_pylist() == _reference(rows, "k", ["age", "tags"], events)
    present = {r["k"] for r in rows}
    assert matched.to_pylist() == [k is not None and k in present for k in events]
    # Unmatched list cells are empty lists, not nulls: a missing sparse cell as the readers give it.
    assert joined.column("tags").null_count == 0


def test_equal_hashes_of_unequal_strings_never_join(monkeypatch):
    import transforms.beam.keyed_table as keyed

    # Every string hashes alike: only the byte comparison (or the exact fallback) tells them apart.
    monkeypatch.setattr(keyed, "fingerprint64", lambda strings: __import__("numpy").zeros(len(strings), "uint64"))
    rows = [{"k": "a", "age": 1.0, "tags": ["x"]}, {"k": "b", "age": 2.0, "tags": []}]
    table = KeyedTable.from_batches([_table(rows, pa.string())], "k", ["age", "tags"], where="t.csv")
    joined, matched = table.join(pa.array(["b", "c", "a", None]))
    assert joined.column("age").to_pylist() == [2.0, None, 1.0, None]
    assert matched.to_pylist() == [True, False, True, False]
    # One key: no collision inside the table, so the hash lookup runs and the bytes must refuse "c".
    single = KeyedTable.from_batches([_table(rows[:1], pa.string())], "k", ["age"], where="t.csv")
    assert single.join(pa.array(["c", "a"]))[0].column("age").to_pylist() == [None, 1.0]


def test_a_duplicated_key_is_refused_naming_the_table_key_and_an_example():
    rows = [{"k": 1, "age": 1.0, "tags": []}, {"k": 2, "age": 2.0, "tags": []}]
    again = [{"k": 2, "age": 3.0, "tags": []}]
    with pytest.raises(LayoutError, match=r"users.tsv: join key 'k' is duplicated: 2 occurs in 2 rows"):
        KeyedTable.from_batches([_table(rows, pa.int64()), _table(again, pa.int64())], "k", ["age"],
                                where="users.tsv")


def test_a_table_row_without_a_key_is_refused():
    rows = [{"k": 1, "age": 1.0, "tags": []}, {"k": None, "age": 2.0, "tags": []}]
    with pytest.raises(LayoutError, match=r"users.tsv: a row of the table has no value in join key 'k'"):
        KeyedTable.from_batches([_table(rows, pa.int64())], "k", ["age"], where="users.tsv")


def test_a_list_key_takes_its_only_value_and_refuses_two():
    column = pa.array([["u1"], [], None, ["u3"]], type=pa.list_(pa.string()))
    assert key_values(column, "user", "e").to_pylist() == ["u1", None, None, "u3"]
    sliced = pa.array([["u0"], ["u1"], [], ["u3"]], type=pa.list_(pa.string())).slice(1)
    assert key_values(sliced, "user", "e").to_pylist() == ["u1", None, "u3"]
    with pytest.raises(LayoutError, match=r"e: join key 'user' holds 2 values in row 1"):
        key_values(pa.array([["a"], ["b", "c"]]), "user", "e")


def test_an_empty_table_leaves_every_event_unmatched_with_missing_values():
    types = pa.schema([("age", pa.float32()), ("tags", pa.list_(pa.string()))])
    table = KeyedTable.from_batches([], "k", ["age", "tags"], where="t.csv", types=types)
    joined, matched = table.join(pa.array([1, 2]))
    assert joined.to_pylist() == [{"age": None, "tags": []}, {"age": None, "tags": []}]
    assert matched.to_pylist() == [False, False]


def test_fill_missing_keeps_values_and_empties_null_lists():
    column = pa.array([["a"], None, ["b", "c"], None], type=pa.list_(pa.string()))
    filled = fill_missing(column)
    assert filled.to_pylist() == [["a"], [], ["b", "c"], []] and filled.null_count == 0


def test_keys_at_the_ends_of_int64_never_wrap_into_the_table():
    top = 2**63 - 1
    rows = [{"k": top - i, "age": float(i), "tags": []} for i in range(5)]
    table = KeyedTable.from_batches([_table(rows, pa.int64())], "k", ["age"], where="t.csv")
    events = [-(2**63), -(2**63) + 3, top, top - 4, top - 5, 0, -1]
    assert table.join(pa.array(events, pa.int64()))[0].column("age").to_pylist() == [
        None, None, 0.0, 4.0, None, None, None]
