"""A columnar batch written natively from its units' Arrow buffers: COO groups, dense columns, label.

The numpy reader turns each unit (an Arrow record batch, or a decoded
Parquet row group) into numpy arrays first: offsets widened to int64,
nullable dense columns filled, a one-hot index per feature; then each
batch costs a few numpy calls per feature. On Criteo-like data (26 one-id
features, 13 nullable dense columns, batch 4096) that was most of a
batch's time, in Python, holding the GIL. Here a unit is only a table of
its buffers' addresses (`unit_buffers`, built as the unit is read ahead)
and a batch is one native call per group and per dense block
(ops/native/arrow_batch_kernels.cc, through ctypes, the GIL released),
writing into the batch's arena.

The numpy paths stay the reference and the fallback, column by column:
string ids, a column in several chunks, a dense column whose file type
is not its delivered type, ids or weights with nulls (the numpy path
raises the error users see), or no native library. Every row a batch
reads is checked natively (its offsets must stay inside its ids), so a
damaged unit is refused, never read past.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from sparse_io.csr import SparseValidationError
from transforms.tfdata.core.columns import MISSING_INT, Column, dense_dtype

__all__ = [
    "UnitBuffers",
    "PieceRows",
    "unit_buffers",
    "native_batches_available",
    "bind_kernels",
    "group_descriptors",
    "lists_room",
    "lists_to_coo",
    "dense_rows",
]

_LIST_FIELDS = 9  # ListField in arrow_batch_kernels.cc
_DENSE_FIELDS = 4  # DenseField
_COMBINERS = {"sum": 0, "mean": 1, "sqrtn": 2}
_ID_TYPES = {"int64": (pa.int64(), "i64"), "int32": (pa.int32(), "i32")}
_MISSING = {
    "float32": np.array([np.nan], np.float32),
    "float64": np.array([np.nan], np.float64),
    "int64": np.array([MISSING_INT], np.int64),
}
_ERRORS = {-1: "a row outside the column", -2: "offsets that decrease or pass the end of its ids", -3: "no room"}


@dataclasses.dataclass
class UnitBuffers:
    """One unit's columns as the native kernels read them.

    `lists`: sparse feature -> (int64 `[9]` descriptor, the weight every id
    shares when it has no weights column); `dense`: dense feature or label
    -> (int64 `[4]` descriptor, its delivered dtype). A column missing here
    is read by the numpy path. `keep` holds the arrays whose memory the
    descriptors address.
    """

    lists: dict[str, tuple[np.ndarray, float]]
    dense: dict[str, tuple[np.ndarray, str]]
    keep: list
    _stacks: dict = dataclasses.field(default_factory=dict)

    def stack(self, kind: str, names: tuple[str, ...]) -> tuple | None:
        """The descriptors of columns `names` of `kind` ("lists" or "dense") stacked, or None if one is missing.

        Lists give `(int64 [F, 9], float32 [F] shared weights)`, dense
        `(int64 [D, 4], delivered dtypes)`. Built once per unit and names.
        """
        key = (kind, names)
        if key not in self._stacks:
            table = getattr(self, kind)
            found = [table.get(name) for name in names]
            if any(entry is None for entry in found):
                self._stacks[key] = None
            elif kind == "lists":
                self._stacks[key] = (np.stack([d for d, _ in found]), np.array([w for _, w in found], np.float32))
            else:
                self._stacks[key] = (np.stack([d for d, _ in found]), {dtype for _, dtype in found})
        return self._stacks[key]


def _address(buffer: pa.Buffer | None) -> int:
    return 0 if buffer is None else buffer.address


def _list_descriptor(array: pa.Array, id_type: pa.DataType, keep: list) -> tuple[np.ndarray, np.ndarray] | None:
    """`(descriptor, the rows' offsets)` of a list column of ids, or None where the numpy path must read it."""
    if not isinstance(array, (pa.ListArray, pa.LargeListArray)) or array.type.value_type != id_type:
        return None
    child = array.values
    if child.null_count:
        return None  # the numpy path names the null id
    offsets = array.offsets.to_numpy(zero_copy_only=True)
    ids = child.to_numpy(zero_copy_only=True)
    keep += [array, offsets, ids]
    validity = _address(array.buffers()[0]) if array.null_count else 0
    descriptor = np.array(
        [offsets.ctypes.data, offsets.itemsize, len(array), validity, array.offset, ids.ctypes.data, len(ids), 0, 0],
        dtype=np.int64,
    )
    return descriptor, offsets


def _single_chunk(table: pa.Table, name: str) -> pa.Array | None:
    column = table[name]
    return column.chunk(0) if column.num_chunks == 1 else None


def unit_buffers(table: pa.Table, columns: Sequence[Column], label: Column | None) -> UnitBuffers:
    """The descriptors of the columns of `table` (one unit) that the native kernels can read.

    Example:
      >>> t = pa.table({"c": pa.array([[3], [], [5, 5]], pa.list_(pa.int64()))})
      >>> b = unit_buffers(t, [Column("c", "sparse", "int64")], None)
      >>> descriptor, shared_weight = b.lists["c"]
      >>> int(descriptor[2]), shared_weight  # the column's rows; the weight of every id
      (3, 1.0)
    """
    lists: dict[str, tuple[np.ndarray, float]] = {}
    dense: dict[str, tuple[np.ndarray, str]] = {}
    keep: list = []
    for c in columns:
        array = _single_chunk(table, c.name)
        if array is None:
            continue
        if c.is_sparse:
            if c.dtype not in _ID_TYPES:
                continue
            described = _list_descriptor(array, _ID_TYPES[c.dtype][0], keep)
            if described is None:
                continue
            descriptor, offsets = described
            if c.weighted and not _add_weights(descriptor, offsets, array, _single_chunk(table, c.weights_name), keep):
                continue
            lists[c.name] = (descriptor, 1.0)
        else:
            _add_dense(dense, c.name, array, dense_dtype(c.dtype), keep)
    if label is not None:
        array = _single_chunk(table, label.name)
        if array is not None and not array.null_count:  # a null label is an error the numpy path raises
            _add_dense(dense, label.name, array, str(np.dtype(label.dtype)), keep)
    return UnitBuffers(lists, dense, keep)


def _add_weights(descriptor: np.ndarray, offsets: np.ndarray, ids: pa.Array, weights: pa.Array | None, keep) -> bool:
    """Points `descriptor` at the weights; False where the numpy path must read them (and say what is wrong)."""
    if (
        weights is None
        or ids.null_count
        or weights.null_count
        or not isinstance(weights, type(ids))
        or weights.type.value_type != pa.float32()
        or weights.values.null_count
        or not np.array_equal(weights.offsets.to_numpy(zero_copy_only=True), offsets)
    ):
        return False
    values = weights.values.to_numpy(zero_copy_only=True)
    keep += [weights, values]
    descriptor[7:9] = (values.ctypes.data, len(values))
    return True


def _add_dense(dense: dict, name: str, array: pa.Array, delivered: str, keep: list) -> None:
    if delivered not in _MISSING or array.type != pa.from_numpy_dtype(np.dtype(delivered)):
        return  # a cast: the numpy path makes it (and checks it is safe)
    width = np.dtype(delivered).itemsize
    values = array.buffers()[1].address + array.offset * width
    validity = _address(array.buffers()[0]) if array.null_count else 0
    keep.append(array)
    dense[name] = (np.array([values, len(array), validity, array.offset], dtype=np.int64), delivered)


class PieceRows:
    """A batch's pieces as the kernels take them, with the units they come from.

    Per piece its first row and count, or the address of its int64 rows
    (0 for contiguous ones); `where` names each piece's unit in errors.
    """

    def __init__(self, pieces):
        begins, counts, index, self._keep = [], [], [], []
        for _, rows in pieces:
            if isinstance(rows, slice):
                begins.append(rows.start)
                counts.append(rows.stop - rows.start)
                index.append(0)
            else:
                rows = np.ascontiguousarray(rows, dtype=np.int64)
                self._keep.append(rows)
                begins.append(0)
                counts.append(len(rows))
                index.append(rows.ctypes.data if len(rows) else 0)
        self.units = [loaded.buffers for loaded, _ in pieces]
        self.where = [loaded.where for loaded, _ in pieces]
        self.rows = sum(counts)
        self.begins, self.counts, self.index = (np.array(v, dtype=np.int64) for v in (begins, counts, index))
        self.error = np.zeros(3, np.int64)
        # The kernels' leading arguments after the descriptors: pieces, begins, counts, index.
        self.arguments = (len(counts), self.begins.ctypes.data, self.counts.ctypes.data, self.index.ctypes.data)
        self.error_address = self.error.ctypes.data

    def stack(self, kind: str, names: tuple[str, ...]) -> tuple | None:
        """`UnitBuffers.stack` over the pieces, piece after piece, or None where a unit lacks a column."""
        stacks = []
        for unit in self.units:
            found = None if unit is None else unit.stack(kind, names)
            if found is None:
                return None
            stacks.append(found)
        if len(stacks) == 1:
            return stacks[0]
        if kind == "lists":
            return np.concatenate([d for d, _ in stacks]), np.concatenate([w for _, w in stacks])
        return np.concatenate([d for d, _ in stacks]), set().union(*(dtypes for _, dtypes in stacks))

    def fail(self, names: Sequence[str]) -> None:
        """Raises the error the last kernel call reported."""
        code, descriptor, row = (int(v) for v in self.error)
        piece, column = divmod(descriptor, len(names))
        raise SparseValidationError(
            f"{self.where[piece]}: column {names[column]!r} row {row}: {_ERRORS.get(code, code)}"
        )


@functools.cache
def _kernels():
    """The native kernels via ctypes, or None where the library cannot be built or loaded (`ops._native` says why)."""
    from ops import _native

    library = _native.ctypes_library()
    return None if library is None else bind_kernels(library)


def bind_kernels(library: ctypes.CDLL) -> tuple:
    """`(room, {"i64": convert, "i32": convert}, dense)`: the kernels of `library` with their signatures."""
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    room = library.sparseflow_arrow_lists_room
    room.argtypes = [p, i64, i64, p, p, p, p]
    room.restype = i64
    convert = {}
    for name in ("i64", "i32"):
        function = getattr(library, f"sparseflow_arrow_lists_to_coo_{name}")
        function.argtypes = [p, p, i64, i64, p, p, p, ctypes.c_int, i64, p, p, p, p, p]
        function.restype = i64
        convert[name] = function
    dense = library.sparseflow_arrow_dense_rows
    dense.argtypes = [p, i64, i64, p, p, p, i64, p, p, i64, p]
    dense.restype = i64
    return room, convert, dense


def native_batches_available() -> bool:
    """Whether the native kernels load here (else every batch takes the numpy path)."""
    return _kernels() is not None


def group_descriptors(piece_rows: PieceRows, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """`(int64 [P*F, 9] descriptors, float32 [P*F] shared weights)` of a group over the pieces, or None.

    None where some piece's unit lacks a feature's buffers, or the group
    mixes offset widths (list and large_list): the numpy path then reads it.
    """
    if _kernels() is None:
        return None
    found = piece_rows.stack("lists", names)
    if found is None or (found[0][:, 1] != found[0][0, 1]).any():
        return None
    return found


def lists_room(descriptors: tuple[np.ndarray, np.ndarray], piece_rows: PieceRows, names: Sequence[str]) -> int:
    """The ids the group's rows hold (the room its COO arrays need); checks the rows' offsets.

    Raises:
      SparseValidationError: a row's offsets decrease or pass the end of its ids.
    """
    room = _kernels()[0](descriptors[0].ctypes.data, len(names), *piece_rows.arguments, piece_rows.error_address)
    if room < 0:
        piece_rows.fail(names)
    return int(room)


def lists_to_coo(
    descriptors: tuple[np.ndarray, np.ndarray],
    piece_rows: PieceRows,
    combiner: str,
    rows: np.ndarray,
    cols: np.ndarray,
    gains: np.ndarray,
    counts: np.ndarray,
    names: Sequence[str],
) -> int:
    """Writes a group's COO entries (`coo_assembly`'s layout) into the arrays; returns how many.

    `rows` int32, `cols` the ids' dtype, `gains` float32, each with room for
    `lists_room` entries; `counts` int64 `[F]` gets each feature's entries.

    Raises:
      SparseValidationError: a row's offsets decrease or pass the end of its ids.
    """
    lists, shared = descriptors
    convert = _kernels()[1]["i64" if cols.dtype == np.int64 else "i32"]
    written = convert(
        lists.ctypes.data, shared.ctypes.data, len(names), *piece_rows.arguments, _COMBINERS[combiner],
        min(len(rows), len(cols), len(gains)), rows.ctypes.data, cols.ctypes.data, gains.ctypes.data,
        counts.ctypes.data, piece_rows.error_address,
    )
    if written < 0:
        piece_rows.fail(names)
    return int(written)


def dense_rows(piece_rows: PieceRows, names: tuple[str, ...], out: np.ndarray) -> bool:
    """Writes columns `names` of the pieces' rows into `out` (column j at `out[j*n:(j+1)*n]`), natively.

    Nulls become NaN (floats) or `MISSING_INT`, as the numpy path gives.
    Returns False, writing nothing, where some piece's unit lacks a
    column's buffers or a column's delivered dtype is not `out`'s.

    Raises:
      ValueError: `out` is not `len(names)` columns of the pieces' rows.
      SparseValidationError: a row outside its column (a damaged unit).
    """
    kernels = _kernels()
    if kernels is None:
        return False
    n = piece_rows.rows
    if len(out) != len(names) * n:
        raise ValueError(f"dense_rows: out holds {len(out)} values, not {len(names)} columns of {n} rows")
    found = piece_rows.stack("dense", names)
    if found is None or found[1] != {out.dtype.name}:
        return False
    status = kernels[2](
        found[0].ctypes.data, len(names), *piece_rows.arguments, out.dtype.itemsize,
        _MISSING[out.dtype.name].ctypes.data, out.ctypes.data, n, piece_rows.error_address,
    )
    if status < 0:
        piece_rows.fail(names)
    return True
