"""The native batch kernels read from Arrow buffers (`transforms.tfdata.columnar.native_batch`).

Each kernel is checked against a plain reference written here from the
contract (`tests/oracles.py` for the COO rule; `to_pylist` for the dense
columns), on tables built to reach every branch: one id a row (the copied
spans, 16 rows a step and the tails), several ids with neighbouring
duplicates (merges), null rows, sliced arrays whose bits start mid-byte,
list and large_list offsets, int32 and int64 ids, weights, every combiner,
contiguous and shuffled pieces. The kernels also run as built for a CPU
without AVX-512 (`portable`), and damaged offsets are refused.
"""

from __future__ import annotations

import ctypes
import subprocess
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sparse_io.csr import SparseValidationError
from tests import oracles
from transforms.tfdata.columnar import native_batch
from transforms.tfdata.core.columns import MISSING_INT, Column

pytestmark = pytest.mark.skipif(
    not native_batch.native_batches_available(), reason="the native kernels do not build or load here"
)

KERNELS = Path(__file__).resolve().parents[1] / "ops" / "native"


@pytest.fixture(scope="module")
def portable_kernels(tmp_path_factory):
    """The kernels compiled for x86-64-v2 (no AVX-512), bound like the library's."""
    out = tmp_path_factory.mktemp("portable") / "arrow_batch_v2.so"
    command = ["g++", "-O2", "-std=c++17", "-march=x86-64-v2", "-shared", "-fPIC", f"-I{KERNELS}",
               str(KERNELS / "arrow_batch_kernels.cc"), "-o", str(out)]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot build the portable kernels here: {e}")
    return native_batch.bind_kernels(ctypes.CDLL(str(out)))


@pytest.fixture(params=["library", "portable"])
def kernels(request, monkeypatch):
    """Runs a test with the library's kernels, then with the portable build."""
    if request.param == "portable":
        bound = request.getfixturevalue("portable_kernels")
        monkeypatch.setattr(native_batch, "_kernels", lambda: bound)
    return request.param


def _lists(rows, id_type, large: bool, *, nulls=()) -> pa.Array:
    values = [None if r in nulls else row for r, row in enumerate(rows)]
    return pa.array(values, type=(pa.large_list if large else pa.list_)(id_type))


def _random_rows(rng, count: int, most: int, id_range: int) -> list[list[int]]:
    """Rows of 0..most ids from a small range, so neighbouring equal ids (merges) occur."""
    return [sorted(rng.integers(0, id_range, rng.integers(0, most + 1)).tolist()) for _ in range(count)]


def _unit(table: pa.Table, columns, label=None, where="unit"):
    return types.SimpleNamespace(buffers=native_batch.unit_buffers(table, columns, label), where=where)


def _group_coo(pieces, names, combiner, id_dtype):
    piece_rows = native_batch.PieceRows(pieces)
    descriptors = native_batch.group_descriptors(piece_rows, tuple(names))
    assert descriptors is not None
    room = native_batch.lists_room(descriptors, piece_rows, names)
    rows, cols, gains = np.empty(room, np.int32), np.empty(room, id_dtype), np.empty(room, np.float32)
    counts = np.empty(len(names), np.int64)
    used = native_batch.lists_to_coo(descriptors, piece_rows, combiner, rows, cols, gains, counts, names)
    assert used == counts.sum() <= room
    split = np.cumsum(counts)[:-1]
    return [list(zip(*parts)) for parts in zip(*(np.split(a[:used], split) for a in (rows, cols, gains)))]


def _piece_rows_of(rows_per_unit, pieces):
    """The rows (and their row weights) a batch takes, piece after piece, as Python lists."""
    out = []
    for (_, rows), unit_rows in zip(pieces, rows_per_unit):
        picked = range(rows.start, rows.stop) if isinstance(rows, slice) else [int(r) for r in rows]
        out += [unit_rows[r] for r in picked]
    return out


@pytest.mark.parametrize("combiner", oracles.COMBINERS)
@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("id_dtype", ["int64", "int32"])
@pytest.mark.parametrize("most", [1, 4])
@pytest.mark.parametrize("id_range", [6, 1 << 30], ids=["ids that merge", "distinct ids"])
def test_group_entries_follow_the_coo_rule(kernels, combiner, large, id_dtype, most, id_range):
    rng = np.random.default_rng([most, large, len(id_dtype), len(combiner), id_range])
    id_type = pa.int64() if id_dtype == "int64" else pa.int32()
    names = ["a", "b", "w"]
    columns = [Column("a", "sparse", id_dtype), Column("b", "sparse", id_dtype),
               Column("w", "sparse", id_dtype, weighted=True)]
    units, rows_of = [], []
    for u in range(2):
        count = 90 + 7 * u
        data = {name: _random_rows(rng, count, most, id_range) for name in names}
        # Weights drawn where ids are; null rows only in the unweighted features (weights must match ids).
        weights = [[float(x) for x in rng.integers(0, 4, len(row))] for row in data["w"]]
        nulls = set(rng.choice(count, 9, replace=False).tolist()) if u == 1 else set()
        table = pa.table({
            "a": _lists(data["a"], id_type, large, nulls=nulls),
            "b": _lists(data["b"], id_type, large),
            "w": _lists(data["w"], id_type, large),
            "w__weights": pa.array(weights, type=(pa.large_list if large else pa.list_)(pa.float32())),
        }).slice(3)  # a sliced unit: offsets and bits start past the buffers' beginnings
        units.append(_unit(table, columns))
        rows_of.append({
            "a": [[] if r + 3 in nulls else row for r, row in enumerate(data["a"][3:])],
            "b": data["b"][3:],
            "w": data["w"][3:],
            "w__weights": weights[3:],
        })
        assert set(units[-1].buffers.lists) == set(names)
    shuffled = rng.permutation(units[1].buffers.lists["a"][0][2])[:50]
    pieces = [(units[0], slice(5, 83)), (units[1], shuffled)]
    got = _group_coo(pieces, names, combiner, np.dtype(id_dtype))
    for name, entries in zip(names, got):
        rows = _piece_rows_of([r[name] for r in rows_of], pieces)
        weights = _piece_rows_of([r["w__weights"] for r in rows_of], pieces) if name == "w" else None
        want = oracles.coo(rows, weights, combiner)
        oracles.assert_entries(list(zip(*entries)) or ([], [], []), want)


@pytest.mark.parametrize("present", [0.8, 1.0], ids=["some rows empty", "every row one id"])
@pytest.mark.parametrize("combiner", oracles.COMBINERS)
@pytest.mark.parametrize("rows", [15, 16, 17, 64, 1000])
def test_one_id_rows_copy_their_span(kernels, combiner, rows, present):
    rng = np.random.default_rng(rows)
    ids = [[int(x)] if rng.random() < present else [] for x in rng.integers(0, 1 << 40, rows + 20)]
    weights = [[float(rng.integers(0, 3))] * len(r) for r in ids]
    table = pa.table({
        "c": pa.array(ids, pa.list_(pa.int64())),
        "d": pa.array(ids, pa.list_(pa.int64())),
        "d__weights": pa.array(weights, pa.list_(pa.float32())),
    })
    unit = _unit(table, [Column("c", "sparse", "int64"), Column("d", "sparse", "int64", weighted=True)])
    pieces = [(unit, slice(2, 2 + rows)), (unit, slice(rows + 5, rows + 20))]  # the second from batch row `rows`
    got_c, got_d = _group_coo(pieces, ["c", "d"], combiner, np.dtype(np.int64))
    taken = ids[2 : 2 + rows] + ids[rows + 5 : rows + 20]
    taken_weights = weights[2 : 2 + rows] + weights[rows + 5 : rows + 20]
    oracles.assert_entries(list(zip(*got_c)) or ([], [], []), oracles.coo(taken, None, combiner))
    oracles.assert_entries(list(zip(*got_d)) or ([], [], []), oracles.coo(taken, taken_weights, combiner))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_dense_columns_fill_nulls_as_the_numpy_path(kernels, dtype, shuffle):
    rng = np.random.default_rng(len(dtype) + shuffle)
    pa_type = pa.from_numpy_dtype(np.dtype(dtype))
    units, columns_of = [], []
    for u in range(2):
        count = 75 + 11 * u
        cols = {}
        for name in ("x", "y"):
            values = rng.integers(-50, 50, count).astype(dtype)
            cols[name] = pa.array(values, type=pa_type, mask=rng.random(count) < 0.3)
        table = pa.table(cols).slice(5)  # validity bits start mid-byte
        units.append(_unit(table, [Column("x", "dense", dtype), Column("y", "dense", dtype)]))
        columns_of.append({name: table[name].to_pylist() for name in cols})
    second = rng.permutation(70)[:33] if shuffle else slice(4, 37)
    pieces = [(units[0], slice(1, 60)), (units[1], second)]
    n = 59 + 33
    out = np.empty(2 * n, dtype)
    assert native_batch.dense_rows(native_batch.PieceRows(pieces), ("x", "y"), out)
    fill = MISSING_INT if dtype == "int64" else np.nan
    for j, name in enumerate(("x", "y")):
        want = [fill if v is None else v for v in _piece_rows_of([c[name] for c in columns_of], pieces)]
        np.testing.assert_array_equal(out[j * n : (j + 1) * n], np.array(want, dtype))


def _damaged_table(offsets: list[int], ids: list[int]) -> tuple[pa.Table, np.ndarray]:
    """A table of one list<int64> column "c" whose offsets are then overwritten with `offsets`.

    Built valid (pyarrow checks offsets it is given) over a buffer that
    aliases the returned numpy offsets, then damaged in place, as a damaged
    file's mapped bytes would be.
    """
    memory = np.arange(len(offsets), dtype=np.int32) * (len(ids) // (len(offsets) - 1))
    array = pa.ListArray.from_buffers(
        pa.list_(pa.int64()), len(offsets) - 1, [None, pa.py_buffer(memory)], children=[pa.array(ids, pa.int64())]
    )
    table = pa.table({"c": array})
    memory[:] = offsets
    return table, memory


@pytest.mark.parametrize(
    "offsets, bad_row",
    [([0, 1, 2, 1, 3], 2), ([0, 1, 2, 3, 9], 3), ([0, 1, 5, 6, 7], 1)],
    ids=["decreasing", "past-the-ids", "long-row-past-the-ids"],
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_damaged_offsets_are_refused_naming_column_and_row(kernels, offsets, bad_row, shuffle):
    table, memory = _damaged_table(offsets, [1, 2, 3, 4])
    unit = _unit(table, [Column("c", "sparse", "int64")], where="shard-0.arrow record batch 0")
    rows = np.array([1, 3, 0, 2]) if shuffle else slice(0, 4)
    with pytest.raises(SparseValidationError, match=rf"shard-0\.arrow record batch 0: column 'c' row {bad_row}"):
        _group_coo([(unit, rows)], ["c"], "sum", np.dtype(np.int64))
    assert memory.tolist() == offsets  # still the damaged offsets: the kernels read them in place


def test_rows_outside_a_unit_are_refused(kernels):
    table = pa.table({"c": pa.array([[1], [2]], pa.list_(pa.int64())), "x": pa.array([1.0, 2.0], pa.float32())})
    unit = _unit(table, [Column("c", "sparse", "int64"), Column("x", "dense", "float32")])
    with pytest.raises(SparseValidationError, match="row 2: a row outside the column"):
        _group_coo([(unit, np.array([0, 2]))], ["c"], "sum", np.dtype(np.int64))
    with pytest.raises(SparseValidationError, match="a row outside the column"):
        native_batch.dense_rows(native_batch.PieceRows([(unit, slice(1, 3))]), ("x",), np.empty(2, np.float32))


def test_columns_the_kernels_cannot_read_are_left_to_numpy():
    ids = pa.array([[1, 2], [3]], pa.list_(pa.int64()))
    table = pa.table({
        "chunked": pa.chunked_array([ids.slice(0, 1), ids.slice(1)]),
        "strings": pa.array([["a"], ["b"]], pa.list_(pa.string())),
        "null_id": pa.array([[1, None], [3]], pa.list_(pa.int64())),
        "wrong_weights": ids,
        "wrong_weights__weights": pa.array([[1.0], [2.0, 3.0]], pa.list_(pa.float32())),
        "ok": ids,
        "widened": pa.array([1, 2], pa.int32()),  # an int32 dense column is delivered int64: a cast
        "label": pa.array([1, None], pa.int64()),  # a null label is an error the numpy path raises
    })
    columns = [
        Column("chunked", "sparse", "int64"), Column("strings", "sparse", "string"),
        Column("null_id", "sparse", "int64"), Column("wrong_weights", "sparse", "int64", weighted=True),
        Column("ok", "sparse", "int64"), Column("widened", "dense", "int32"),
    ]
    buffers = native_batch.unit_buffers(table, columns, Column("label", "label", "int64"))
    assert set(buffers.lists) == {"ok"}
    assert buffers.dense == {}


def test_a_group_with_a_missing_column_is_not_native():
    table = pa.table({"a": pa.array([[1]], pa.list_(pa.int64())), "b": pa.array([["x"]], pa.list_(pa.string()))})
    unit = _unit(table, [Column("a", "sparse", "int64"), Column("b", "sparse", "string")])
    assert native_batch.group_descriptors(native_batch.PieceRows([(unit, slice(0, 1))]), ("a", "b")) is None


def test_the_readers_kernels_load_inside_stock_ops_only():
    # stock_ops_only() governs ops traced into exported graphs; the reader's C functions are not ops, and a
    # first load inside it must not leave the reader on numpy for the rest of the process.
    from ops import _native

    _native.ctypes_library.cache_clear()
    native_batch._kernels.cache_clear()
    try:
        with _native.stock_ops_only():
            assert native_batch.native_batches_available()
            assert _native.unavailable_reason() is None
    finally:
        _native.ctypes_library.cache_clear()
        native_batch._kernels.cache_clear()
