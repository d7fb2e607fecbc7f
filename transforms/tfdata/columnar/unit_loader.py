"""Reading a worker's units (row-group or record-batch slices) of Parquet or Arrow shards, with read-ahead.

A unit is decoded once, in a read-ahead thread (pyarrow releasing the GIL),
and kept as Arrow buffers: a sparse column becomes a one-feature `CsrGroup`
whose ids are a view of the Arrow values buffer, a dense column or the label
a 1-D array; where the native kernels read the batches (`native_batch`), the
columns they can read are only described (their buffers' addresses) and
become numpy arrays only if asked for. The last few units stay decoded, and
a bounded number of shards stay open.

A feature derived at read (schema.json's `at_read`) is computed here, as the
unit is decoded, from its source column by the spec the ingest recorded
(`sparse_io.numeric_maps`, the same code the ingest applies to the
features it stores).

What stays open or decoded serves every iterator of the dataset, so each
unit asked for first checks its local shard is still the file opened: the
pin (ChangedFileError when replaced), and its status change time, which a
write in place moves even when the mtime is set back: then the shard's
decoded units are dropped and it is opened (and its checksums checked)
again.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.arrow import csr_from_arrow
from sparse_io.csr import SparseValidationError
from sparse_io.locations import is_remote
from sparse_io.numeric_maps import append_derived_columns
from sparse_io.pins import ShardPin
from sparse_io.shard_files import ShardFile, open_shard
from sparse_io.shard_formats import shard_format
from transforms.tfdata.columnar.native_batch import UnitBuffers, unit_buffers
from transforms.tfdata.core.columns import MISSING_INT, Column, dense_dtype
from transforms.tfdata.core.csr_group import CsrGroup
from transforms.tfdata.core.sharding import Unit

__all__ = ["Loaded", "UnitLoader"]

_CACHED_UNITS = 3
# Shards held open for the next row groups; past it the least recently read is closed, so a data
# set of thousands of shards never holds a descriptor per shard.
_OPEN_FILES = 8


@dataclasses.dataclass
class Loaded:
    """One unit decoded, column by column.

    `columns` maps each name to its numpy form, built on first use for a
    column the native kernels read (`buffers`). Each sparse column is a
    one-feature `CsrGroup` (row_splits int64 from 0; values a view of the
    Arrow buffer, or an object array of str; weights a float32 view or the
    float every id weighs); each other column a 1-D array of `num_rows`. `one_hot` caches `one_hot_group` per group key.
    """

    num_rows: int
    columns: dict[str, CsrGroup | np.ndarray]
    one_hot: dict[int, tuple[np.ndarray, list[np.ndarray]] | None] = dataclasses.field(default_factory=dict)
    # The unit's Arrow buffers for the native kernels (`native_batch`), or None; `where` names the unit in errors.
    buffers: UnitBuffers | None = None
    where: str = ""

    def one_hot_group(self, key: int, group: Sequence[Column]) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """Where each feature of a group holds its id, when none holds more than one a row.

        Returns `(presence bool [F, rows], per feature the int32 rows that
        hold an id)` when every feature of `group` has at most one id per row
        in this unit, else None. Computed once per unit and `key`.
        """
        if key not in self.one_hot:
            lengths = np.stack([np.diff(self.columns[c.name].row_splits) for c in group])
            if lengths.size and lengths.max() > 1:
                self.one_hot[key] = None
            else:
                presence = lengths.astype(bool)
                self.one_hot[key] = (presence, [np.flatnonzero(p).astype(np.int32) for p in presence])
        return self.one_hot[key]


class UnitLoader:
    """Reads units of `files` on demand, one read-ahead thread, the last few kept.

    Args:
      files: shard paths; `units` index into them.
      units: the worker's units.
      columns: features to read; `label`: the label column or None.
      shard_format: "parquet" (units are row groups, decoded) or "arrow"
        (record batches, memory-mapped: the ids stay views of the file).
      one_hot_groups: groups whose `Loaded.one_hot_group` (keyed by their
        index here) is computed as the unit is read, in the read-ahead
        thread, rather than by the first batch that needs it.
      native: also describe each unit's Arrow buffers for the native
        kernels (`native_batch.unit_buffers`); the columns they cover are
        then turned into numpy only if something asks for them.
      pins: per file, what was verified (`sparse_io.pins`): every open of
        a shard checks that it is still that file (ChangedFileError if not).
    """

    def __init__(
        self,
        files: Sequence[str],
        units: Sequence[Unit],
        columns: Sequence[Column],
        label: Column | None,
        shard_format: str = "parquet",
        one_hot_groups: Sequence[Sequence[Column]] = (),
        native: bool = False,
        pins: Sequence[ShardPin] | None = None,
    ):
        self.native = native
        self.pins = None if pins is None else list(pins)
        self.files = list(files)
        self.shard_format = shard_format
        self.one_hot_groups = [list(g) for g in one_hot_groups]
        self.units = list(units)
        self.columns = list(columns)
        self.label = label
        self._read_names = []
        for c in self.columns:
            # A feature derived at read is computed from its source column, which the shard holds.
            self._read_names.append(c.derived.source if c.derived is not None else c.name)
            if c.is_sparse and c.weighted:
                self._read_names.append(c.weights_name)
        if label is not None:
            self._read_names.append(label.name)
        self._read_names = list(dict.fromkeys(self._read_names))
        self._derived = [c.derived for c in self.columns if c.derived is not None]
        self._lock = threading.Lock()
        self._handles: OrderedDict[int, ShardFile] = OrderedDict()  # used by the read-ahead thread only
        self._loads: OrderedDict[int, concurrent.futures.Future] = OrderedDict()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._opened: dict[int, int] = {}  # per local file open or decoded: its st_ctime_ns before the open
        self._stale: set[int] = set()  # files whose open handle `_load` must open again

    def unit(self, unit_id: int, read_ahead: int | None) -> Loaded:
        """Unit `unit_id` decoded (waiting for it), with unit `read_ahead` (if any) started.

        Raises:
          ChangedFileError: its shard is no longer the file verified.
        """
        self._recheck(self.units[unit_id].file)
        future = self._future(unit_id)
        if read_ahead is not None:
            self._future(read_ahead)
        return future.result()

    def _future(self, unit_id: int) -> concurrent.futures.Future:
        with self._lock:
            future = self._loads.get(unit_id)
            if future is None:
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="parquet-read")
                future = self._executor.submit(self._load, unit_id)
                self._loads[unit_id] = future
                while len(self._loads) > _CACHED_UNITS:
                    self._loads.popitem(last=False)
            else:
                self._loads.move_to_end(unit_id)
            return future

    def _recheck(self, file: int) -> None:
        """Shard `file`, if open or decoded here, still the one opened; its decoded units dropped if written since."""
        with self._lock:
            opened = self._opened.get(file)
        if opened is None:
            return
        if self.pins is not None:
            self.pins[file].check()
        if _change_time(self.files[file]) == opened:
            return
        with self._lock:
            self._opened.pop(file, None)
            self._stale.add(file)
            for unit_id in [u for u in self._loads if self.units[u].file == file]:
                del self._loads[unit_id]

    def _load(self, unit_id: int) -> Loaded:
        unit: Unit = self.units[unit_id]
        with self._lock:
            stale = unit.file in self._stale
            self._stale.discard(unit.file)
        handle = self._handles.get(unit.file)
        if handle is not None and stale:
            del self._handles[unit.file]
            handle.close()
            handle = None
        if handle is None:
            pin = None if self.pins is None else self.pins[unit.file]
            path = self.files[unit.file]
            changed = None if is_remote(path) else _change_time(path)  # before the open: a write after it shows
            handle = self._handles[unit.file] = open_shard(path, self.shard_format, pin)
            if changed is not None:
                with self._lock:
                    self._opened[unit.file] = changed
            while len(self._handles) > _OPEN_FILES:
                self._handles.popitem(last=False)[1].close()
        else:
            self._handles.move_to_end(unit.file)
        table = handle.read_unit(unit.row_group, self._read_names)
        if unit.start or unit.stop != table.num_rows:
            table = table.slice(unit.start, unit.stop - unit.start)
        kind = shard_format(self.shard_format).unit
        where = f"{self.files[unit.file]} {kind} {unit.row_group}"
        if self._derived:
            table = append_derived_columns(table, self._derived)
        buffers = unit_buffers(table, self.columns, self.label) if self.native else None
        native = set() if buffers is None else {*buffers.lists, *buffers.dense}
        label = self.label
        by_name = {c.name: c for c in self.columns}  # not self: a Loaded must not keep its loader alive

        def build(name: str) -> CsrGroup | np.ndarray:
            try:
                if label is not None and name == label.name:
                    return _label(table[name], label)
                c = by_name[name]
                return _sparse(table, c) if c.is_sparse else _dense(table[c.name], c)
            except SparseValidationError as e:
                raise SparseValidationError(f"{where}: {e}") from None

        columns = _Columns(build)
        for name in [*by_name, *([label.name] if label is not None else [])]:
            if name not in native:  # read now, in this thread; errors surface with the unit
                columns[name] = build(name)
        loaded = Loaded(table.num_rows, columns, buffers=buffers, where=where)
        for key, group in enumerate(self.one_hot_groups):
            if not all(c.name in native for c in group):
                loaded.one_hot_group(key, group)
        return loaded


class _Columns(dict):
    """A unit's numpy columns, each built by `build(name)` when first asked for."""

    def __init__(self, build):
        super().__init__()
        self._build = build

    def __missing__(self, name: str):
        value = self[name] = self._build(name)
        return value


def _change_time(path: str) -> int | None:
    try:
        return os.stat(path).st_ctime_ns
    except FileNotFoundError:
        return None  # the pin's check says so


def _sparse(table: pa.Table, c: Column) -> CsrGroup:
    if c.dtype == "string":
        array = table[c.name].combine_chunks()
        splits = np.asarray(array.offsets, dtype=np.int64)
        values = array.values.slice(int(splits[0]), int(splits[-1] - splits[0]))
        if array.null_count:
            lengths = np.where(array.is_valid().to_numpy(zero_copy_only=False), np.diff(splits), 0)
            values = array.flatten()
            splits = np.concatenate([[0], np.cumsum(lengths)])
        return CsrGroup([c.name], splits - splits[0], values.to_numpy(zero_copy_only=False))
    weights = table[c.weights_name] if c.weighted else None
    csr = csr_from_arrow(table[c.name], weights, feature=c.name)
    return CsrGroup([c.name], csr.row_splits, csr.values, csr.weights, num_rows=csr.num_rows)


def _dense(column: pa.ChunkedArray, c: Column) -> np.ndarray:
    """A dense column as its delivered dtype: NaN (floats) or `MISSING_INT` (integers) where missing."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    target = dense_dtype(c.dtype)
    if target == "int64":
        if not pa.types.is_integer(array.type):
            raise ValueError(f"dense feature {c.name!r}: schema says {c.dtype}, the file holds {array.type}")
        values = pc.fill_null(array.cast(pa.int64()), MISSING_INT) if array.null_count else array.cast(pa.int64())
        return values.to_numpy(zero_copy_only=False)
    if array.type != pa.from_numpy_dtype(np.dtype(target)):
        # Safe casts only: an integer the float type would round fails here rather than change.
        array = array.cast(pa.from_numpy_dtype(np.dtype(target)))
    # Nulls become NaN (to_numpy of a nullable float array); a copy only then.
    return array.to_numpy(zero_copy_only=False)


def _label(column: pa.ChunkedArray, label: Column) -> np.ndarray:
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if array.null_count:
        row = int(np.argmax(~array.is_valid().to_numpy(zero_copy_only=False)))
        raise SparseValidationError(f"label {label.name!r}: null at row {row}")
    target = pa.from_numpy_dtype(np.dtype(label.dtype))
    if array.type != target:
        array = array.cast(target)
    return array.to_numpy(zero_copy_only=False)
