"""The Python-side Parquet reader behind `make_dataset`: row groups to CSR batches.

This reader runs in Python (pyarrow, called from a `tf.py_function`), so it
needs the Python process that built the dataset: it does not run inside the
tf.data service. Its work per batch is a few numpy calls per column, never a
loop over rows:

* a row group is decoded once (in a read-ahead thread, pyarrow releasing the
  GIL) and kept as Arrow buffers: the ids are not copied at this point;
* a batch takes rows `[begin, end)` of the worker's row sequence for the
  epoch, across row-group boundaries, so `batch_size` is independent of the
  row-group size;
* each column of the batch is written once into a 64-byte-aligned arena
  (a slice copy, or a gather when shuffling): that is the only copy of the
  ids between the Arrow buffer and the tensor, since the arena is then handed
  to TensorFlow through DLPack, which aliases it.

Batch `i` is a pure function of `i` (and the plan), so the dataset built on
it is `Dataset.range(...) -> map(read)`, which `tf.train.Checkpoint` can save
and restore, and the explicit `InputState` can resume at any row.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sparse_io.arrow import csr_from_arrow
from sparse_io.csr import SparseValidationError
from transforms.tfdata.columns import DENSE_DTYPES, MISSING_INT, Column, dense_dtype
from transforms.tfdata.csr_group import CsrGroup
from transforms.tfdata.numpy_coo import one_id_gains, piece_coo
from transforms.tfdata.sharding import Unit, plan_units
from transforms.tfdata.state import InputState, fingerprint

__all__ = ["ParquetSource", "ALIGNMENT"]

# TensorFlow kernels require buffers aligned to EIGEN_MAX_ALIGN_BYTES; a
# DLPack tensor that is not aligned aborts the process on first use.
ALIGNMENT = 64
_CACHED_UNITS = 3
# Shards held open for the next row groups; past it the least recently read is closed, so a data
# set of thousands of shards never holds a descriptor per shard.
_OPEN_FILES = 8


@dataclasses.dataclass
class _Loaded:
    """One unit decoded: per sparse column a one-feature `CsrGroup` (row_splits int64 from 0;
    values a view of the Arrow buffer, or an object array of str; weights a float32 view or
    the float every id weighs), per other column a 1-D array."""

    num_rows: int
    columns: dict[str, CsrGroup | np.ndarray]
    one_hot: dict[int, tuple[np.ndarray, list[np.ndarray]] | None] = dataclasses.field(default_factory=dict)

    def one_hot_group(self, key: int, group: Sequence[Column]) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """`(presence bool [F, rows], per feature the int32 rows that hold an id)` when every
        feature of the group has at most one id per row in this unit, else None; computed once
        per unit."""
        if key not in self.one_hot:
            lengths = np.stack([np.diff(self.columns[c.name].row_splits) for c in group])
            if lengths.size and lengths.max() > 1:
                self.one_hot[key] = None
            else:
                presence = lengths.astype(bool)
                self.one_hot[key] = (presence, [np.flatnonzero(p).astype(np.int32) for p in presence])
        return self.one_hot[key]


def _open(path: str) -> pq.ParquetFile:
    if "://" in path:
        import pyarrow.fs

        fs, inner = pyarrow.fs.FileSystem.from_uri(path)
        return pq.ParquetFile(fs.open_input_file(inner))
    # Read, not memory-mapped: mapped shards count in the resident set as they are read (a 5M-row
    # epoch grew it by the 244 MiB of its shards), while reads keep it at the read-ahead buffers;
    # same speed here.
    return pq.ParquetFile(path, memory_map=False)


def _arrow_kind(t: pa.DataType) -> str:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = t.value_type
        if pa.types.is_int64(inner):
            return "list<int64>"
        if pa.types.is_int32(inner):
            return "list<int32>"
        if pa.types.is_string(inner) or pa.types.is_large_string(inner):
            return "list<string>"
        if pa.types.is_floating(inner):
            return "list<float>"
        return f"list<{inner}>"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return "number"
    return str(t)


def _check_schema(path: str, arrow_schema: pa.Schema, columns: Sequence[Column], label: Column | None) -> None:
    """Raises ValueError naming the file and feature when a column is missing or mistyped."""
    names = set(arrow_schema.names)
    expected = []
    for c in columns:
        if c.is_sparse:
            expected.append((c.name, {"int64": "list<int64>", "int32": "list<int32>"}.get(c.dtype, "list<string>")))
            if c.weighted:
                expected.append((c.weights_name, "list<float>"))
        else:
            expected.append((c.name, "number"))
    if label is not None:
        expected.append((label.name, "number"))
    for name, kind in expected:
        if name not in names:
            raise ValueError(f"{path}: column {name!r} is missing (the file has {arrow_schema.names})")
        got = _arrow_kind(arrow_schema.field(name).type)
        if got != kind:
            raise ValueError(f"{path}: column {name!r} has type {arrow_schema.field(name).type}, expected {kind}")


class _Arena:
    """Carves 64-byte-aligned arrays out of one allocation per batch."""

    def __init__(self, sizes: Sequence[tuple[int, np.dtype]]):
        offsets, total = [], 0
        for count, dtype in sizes:
            offsets.append(total)
            total += -(-count * dtype.itemsize // ALIGNMENT) * ALIGNMENT
        raw = np.empty(total + ALIGNMENT, dtype=np.uint8)
        shift = (-raw.ctypes.data) % ALIGNMENT
        self.arrays = [
            raw[shift + off : shift + off + count * dtype.itemsize].view(dtype)
            for off, (count, dtype) in zip(offsets, sizes)
        ]


class ParquetSource:
    """This worker's rows of a set of Parquet shards, as numbered CSR batches.

    Args:
      files: shard paths, sorted (their order defines the row sequence).
      columns: features to read (`Column`s); `label`: the label column or None.
      batch_size: rows per batch; the last batch of an epoch is smaller unless
        `drop_remainder`.
      shuffle: permute the units (row-group slices) each epoch, and the rows
        inside each unit, from `seed` and the epoch number.
      seed: a non-negative integer (required: the caller draws one when the
        user gives none).
      num_shards, index: the worker (see `sharding.plan_units`).
      start: resume here (an `InputState` of this plan).
      groups: sparse feature names to lay end to end in one set of arrays
        (each group sharing id dtype and weighting); default: one group per
        (id dtype, weighted) pair, in column order.
      coo: feature -> combiner: deliver COO (`numpy_coo`) instead of CSR,
        every feature of a group sharing its combiner.

    Raises:
      ValueError: a file lacks a column or has a wrong type, the worker's
        rows are fewer than one batch with `drop_remainder`, or `start` is
        from another plan or out of range.
    """

    def __init__(
        self,
        files: Sequence[str],
        columns: Sequence[Column],
        label: Column | None,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        num_shards: int,
        index: int,
        drop_remainder: bool,
        start: InputState | None = None,
        groups: Sequence[Sequence[str]] | None = None,
        coo: Mapping[str, str] | None = None,
    ):
        self.files = list(files)
        self.columns = list(columns)
        self.label = label
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_remainder = bool(drop_remainder)
        self.groups = _check_groups(self.columns, groups)
        self.coo = None if coo is None else dict(coo)
        if self.coo is not None:
            for group in self.groups:
                combiners = {self.coo.get(c.name, "sum") for c in group}
                if len(combiners) != 1 or group[0].dtype == "string":
                    raise ValueError(f"coo: group {[c.name for c in group]} needs integer ids and one combiner")
        self.dense = [c for c in self.columns if not c.is_sparse]
        # One block per delivered dtype (float32, float64, int64), each feature after feature.
        self.dense_blocks = [
            (dtype, [c for c in self.dense if dense_dtype(c.dtype) == dtype])
            for dtype in DENSE_DTYPES
            if any(dense_dtype(c.dtype) == dtype for c in self.dense)
        ]
        self._read_names = []
        for c in self.columns:
            self._read_names.append(c.name)
            if c.is_sparse and c.weighted:
                self._read_names.append(c.weights_name)
        if label is not None:
            self._read_names.append(label.name)

        row_groups = []
        for path in self.files:
            handle = _open(path)
            _check_schema(path, handle.schema_arrow, self.columns, label)
            meta = handle.metadata
            row_groups.append([meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        self.units, self.mode = plan_units(row_groups, num_shards, index)
        self.unit_rows = np.array([u.num_rows for u in self.units], dtype=np.int64)
        self.rows_per_epoch = int(self.unit_rows.sum())
        if self.drop_remainder and self.rows_per_epoch < self.batch_size:
            raise ValueError(
                f"worker {index} of {num_shards} has {self.rows_per_epoch} rows, fewer than one batch of "
                f"{self.batch_size} with drop_remainder=True: it would read nothing"
            )
        self.fingerprint = fingerprint(
            [p.rsplit("/", 1)[-1] for p in self.files],
            row_groups,
            num_shards,
            index,
            self.shuffle,
            self.seed if self.shuffle else None,
        )
        self._lock = threading.Lock()
        self._handles: OrderedDict[int, pq.ParquetFile] = OrderedDict()  # used by the read-ahead thread only
        self._loads: OrderedDict[int, concurrent.futures.Future] = OrderedDict()
        self._orders: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._perms: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._start_epoch, self._start_row = 0, 0
        if start is not None:
            self._start_epoch, self._start_row = self._resolve_start(start)

    # ---------------------------------------------------------------- the plan

    def _batches(self, rows: int) -> int:
        if self.drop_remainder:
            return rows // self.batch_size
        return math.ceil(rows / self.batch_size)

    @property
    def batches_per_epoch(self) -> int:
        return self._batches(self.rows_per_epoch)

    def num_batches(self, num_epochs: int | None) -> int | None:
        """Batches the dataset yields from its start over `num_epochs` (None: endless)."""
        if num_epochs is None:
            return None
        if self._start_epoch >= num_epochs:
            return 0
        first = self._batches(self.rows_per_epoch - self._start_row)
        return first + (num_epochs - self._start_epoch - 1) * self.batches_per_epoch

    def locate(self, i: int) -> tuple[int, int, int]:
        """Batch `i` (counted from the start) as `(epoch, begin_row, end_row)` in that epoch."""
        first = self._batches(self.rows_per_epoch - self._start_row)
        if i < first:
            epoch, begin = self._start_epoch, self._start_row + i * self.batch_size
        else:
            j = i - first
            epoch = self._start_epoch + 1 + j // self.batches_per_epoch
            begin = (j % self.batches_per_epoch) * self.batch_size
        return epoch, begin, min(begin + self.batch_size, self.rows_per_epoch)

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """`(unit order, cumulative rows [len + 1])` of an epoch."""
        with self._lock:
            cached = self._orders.get(epoch)
            if cached is not None:
                return cached
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.units))
        else:
            order = np.arange(len(self.units))
        cum = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(self.unit_rows[order], out=cum[1:])
        with self._lock:
            self._orders[epoch] = (order, cum)
            while len(self._orders) > 2:
                self._orders.popitem(last=False)
        return order, cum

    def position(self, epoch: int, row: int) -> InputState:
        """The `InputState` of row `row` of epoch `epoch` (an epoch's end is the next one's start)."""
        remaining = self.rows_per_epoch - row
        if remaining == 0 or (self.drop_remainder and remaining < self.batch_size):
            return InputState(epoch + 1, 0, 0, self.fingerprint)
        _, cum = self.epoch_order(epoch)
        shard = int(np.searchsorted(cum, row, side="right")) - 1
        return InputState(epoch, shard, row - int(cum[shard]), self.fingerprint)

    def _resolve_start(self, start: InputState) -> tuple[int, int]:
        if start.fingerprint != self.fingerprint:
            raise ValueError(
                "start: this InputState belongs to another reading plan (different files, row groups, "
                "worker, shuffle or seed); resume with the same arguments that produced it"
            )
        if start.shard >= len(self.units):
            raise ValueError(f"start: shard {start.shard} out of range (this worker has {len(self.units)})")
        order, cum = self.epoch_order(start.epoch)
        if start.row >= self.unit_rows[order[start.shard]]:
            raise ValueError(f"start: row {start.row} is past the end of shard {start.shard}")
        return start.epoch, int(cum[start.shard]) + start.row

    # ----------------------------------------------------------------- loading

    def _load(self, unit_id: int) -> _Loaded:
        unit: Unit = self.units[unit_id]
        handle = self._handles.get(unit.file)
        if handle is None:
            handle = self._handles[unit.file] = _open(self.files[unit.file])
            while len(self._handles) > _OPEN_FILES:
                self._handles.popitem(last=False)[1].close(force=True)  # also files opened through a URL
        else:
            self._handles.move_to_end(unit.file)
        table = handle.read_row_group(unit.row_group, columns=self._read_names, use_threads=True)
        if unit.start or unit.stop != table.num_rows:
            table = table.slice(unit.start, unit.stop - unit.start)
        where = f"{self.files[unit.file]} row group {unit.row_group}"
        columns: dict[str, CsrGroup | np.ndarray] = {}
        try:
            for c in self.columns:
                if c.is_sparse:
                    columns[c.name] = self._sparse(table, c)
                else:
                    columns[c.name] = _dense(table[c.name], c)
            if self.label is not None:
                columns[self.label.name] = _label(table[self.label.name], self.label)
        except SparseValidationError as e:
            raise SparseValidationError(f"{where}: {e}") from None
        return _Loaded(table.num_rows, columns)

    @staticmethod
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

    def _unit(self, unit_id: int, read_ahead: int | None) -> _Loaded:
        future = self._future(unit_id)
        if read_ahead is not None:
            self._future(read_ahead)
        return future.result()

    def _perm(self, epoch: int, unit_id: int) -> np.ndarray:
        key = (epoch, unit_id)
        with self._lock:
            perm = self._perms.get(key)
            if perm is not None:
                return perm
        perm = np.random.default_rng([self.seed, epoch, unit_id, 1]).permutation(int(self.unit_rows[unit_id]))
        with self._lock:
            self._perms[key] = perm
            while len(self._perms) > _CACHED_UNITS:
                self._perms.popitem(last=False)
        return perm

    # ---------------------------------------------------------------- batches

    def output_dtypes(self) -> list[np.dtype | str]:
        """The flat dtypes `read` returns, in order (see `read`)."""
        out: list[np.dtype | str] = []
        for group in self.groups:
            first = group[0]
            if self.coo is not None:
                out += [np.dtype(np.int32), np.dtype(first.dtype), np.dtype(np.float32), np.dtype(np.int64)]
                continue
            out += [np.dtype(np.int64), "string" if first.dtype == "string" else np.dtype(first.dtype)]
            if first.weighted:
                out.append(np.dtype(np.float32))
        out += [np.dtype(dtype) for dtype, _ in self.dense_blocks]
        if self.label is not None:
            out.append(np.dtype(self.label.dtype))
        out += [np.dtype(np.int64), np.dtype(np.int64)]
        return out

    def pieces(self, epoch: int, begin: int, end: int) -> list[tuple[_Loaded, slice | np.ndarray]]:
        """The decoded units and the rows of each that make up rows `[begin, end)` of an epoch."""
        order, cum = self.epoch_order(epoch)
        k = int(np.searchsorted(cum, begin, side="right")) - 1
        out = []
        while k < len(order) and cum[k] < end:
            unit_id = int(order[k])
            ahead = int(order[k + 1]) if k + 1 < len(order) else None
            loaded = self._unit(unit_id, ahead)
            lo, hi = max(begin - int(cum[k]), 0), min(end - int(cum[k]), loaded.num_rows)
            rows = self._perm(epoch, unit_id)[lo:hi] if self.shuffle else slice(lo, hi)
            out.append((loaded, rows))
            k += 1
        return out

    def read(self, i: int) -> list[np.ndarray]:
        """Batch `i` as flat arrays.

        Per group of F sparse features (`groups`), laid end to end: row_splits
        int64 `[F*n + 1]` (feature f's rows are `f*n .. f*n + n`), ids, and
        float32 weights when weighted. Then the dense features as one `[D*n]`
        block per delivered dtype (`dense_blocks`: float32 and float64 with
        NaN where missing, int64 with `MISSING_INT`), feature after feature; the
        label `[n]` if any; n as int64 `[1]`; last the position after this
        batch, int64 `[4]` (epoch, shard, row, fingerprint). Numeric arrays
        of the groups, dense block and label are 64-byte aligned and freshly
        allocated (safe to alias).
        """
        epoch, begin, end = self.locate(int(i))
        pieces = self.pieces(epoch, begin, end)
        n = end - begin
        if self.coo is not None:
            return self._read_coo(pieces, n, epoch, end)
        layouts = []  # per group: per feature: per piece layout
        sizes: list[tuple[int, np.dtype]] = []
        for group in self.groups:
            per_feature = [[_sparse_layout(loaded.columns[c.name], rows) for loaded, rows in pieces] for c in group]
            nnz = [sum(p[2] for p in per_piece) for per_piece in per_feature]
            layouts.append((per_feature, nnz))
            sizes.append((len(group) * n + 1, np.dtype(np.int64)))
            if group[0].dtype != "string":
                sizes.append((sum(nnz), np.dtype(group[0].dtype)))
            if group[0].weighted:
                sizes.append((sum(nnz), np.dtype(np.float32)))
        sizes += [(len(block) * n, np.dtype(dtype)) for dtype, block in self.dense_blocks]
        if self.label is not None:
            sizes.append((n, np.dtype(self.label.dtype)))
        arrays = iter(_Arena(sizes).arrays)
        out: list[np.ndarray] = []
        for group, (per_feature, nnz) in zip(self.groups, layouts):
            splits = next(arrays)
            ids = next(arrays) if group[0].dtype != "string" else None
            weights = next(arrays) if group[0].weighted else None
            strings, start = [], 0
            for f, (c, per_piece) in enumerate(zip(group, per_feature)):
                stop = start + nnz[f]
                filled = _fill_sparse(
                    pieces,
                    c.name,
                    per_piece,
                    splits[f * n : (f + 1) * n + 1],
                    None if ids is None else ids[start:stop],
                    None if weights is None else weights[start:stop],
                    start,
                )
                strings.append(filled)
                start = stop
            if ids is None:
                ids = np.concatenate(strings) if strings else np.zeros(0, dtype=object)
            out += [splits, ids] + ([weights] if weights is not None else [])
        return out + self._rest(pieces, n, arrays, epoch, end)

    def _rest(self, pieces, n: int, arrays, epoch: int, end: int) -> list[np.ndarray]:
        """The dense block, the label and the position, after the sparse groups."""
        out = []
        for _, members in self.dense_blocks:
            block = next(arrays)
            for j, c in enumerate(members):
                _fill_rows(pieces, c.name, block[j * n : (j + 1) * n])
            out.append(block)
        if self.label is not None:
            out.append(_fill_rows(pieces, self.label.name, next(arrays)))
        out.append(np.array([n], dtype=np.int64))
        state = self.position(epoch, end)
        out.append(np.array([state.epoch, state.shard, state.row, state.fingerprint], dtype=np.int64))
        return out

    def _read_coo(self, pieces, n: int, epoch: int, end: int) -> list[np.ndarray]:
        """Per group: row_ids int32, col_ids, gains float32 (features end to end) and entries per
        feature int64 `[F]`; then as `read`. The ids are copied once, into the arena (twice when
        shuffled rows of a multi-id feature must be gathered before merging).

        A group whose features hold at most one id per row in every unit of the batch (one-hot,
        as Criteo's) is handled for all its features at once (`_OneHot`): no merge can happen,
        so the entries are just the rows that have an id."""
        planned: list = []  # per group: a _OneHot, or per feature: [(row offset, rows, ids source, gains)]
        sizes: list[tuple[int, np.dtype]] = []
        for key, group in enumerate(self.groups):
            combiner = self.coo.get(group[0].name, "sum")
            plan = _OneHot.plan(pieces, key, group, combiner)
            if plan is None:
                plan = [[] for _ in group]
                offset = 0
                for loaded, rows in pieces:
                    for f, c in enumerate(group):
                        lengths, ids, weights = _piece_csr(loaded.columns[c.name], rows)
                        piece_rows, piece_ids, starts, piece_gains = piece_coo(lengths, ids, weights, combiner)
                        plan[f].append((offset, piece_rows, (piece_ids, starts), piece_gains))
                    offset += (rows.stop - rows.start) if isinstance(rows, slice) else len(rows)
                total = sum(len(item[1]) for items in plan for item in items)
            else:
                total = plan.total
            planned.append(plan)
            sizes += [(total, np.dtype(np.int32)), (total, np.dtype(group[0].dtype)), (total, np.dtype(np.float32))]
            sizes.append((len(group), np.dtype(np.int64)))
        sizes += [(len(block) * n, np.dtype(dtype)) for dtype, block in self.dense_blocks]
        if self.label is not None:
            sizes.append((n, np.dtype(self.label.dtype)))
        arrays = iter(_Arena(sizes).arrays)
        out: list[np.ndarray] = []
        for plan in planned:
            rows, cols, gains, counts = next(arrays), next(arrays), next(arrays), next(arrays)
            if isinstance(plan, _OneHot):
                plan.fill(pieces, rows, cols, gains, counts)
                out += [rows, cols, gains, counts]
                continue
            at = 0
            for f, items in enumerate(plan):
                first = at
                for offset, item_rows, (ids, where), item_gains in items:
                    seg = slice(at, at + len(item_rows))
                    np.add(item_rows, np.int32(offset), out=rows[seg], casting="unsafe")
                    if where is None:
                        np.copyto(cols[seg], ids)
                    else:
                        np.take(ids, where, out=cols[seg], mode="clip")
                    if isinstance(item_gains, np.ndarray):
                        np.copyto(gains[seg], item_gains)
                    else:
                        gains[seg] = item_gains
                    at += len(item_rows)
                counts[f] = at - first
            out += [rows, cols, gains, counts]
        return out + self._rest(pieces, n, arrays, epoch, end)


@dataclasses.dataclass
class _OneHot:
    """A batch's entries of a group of one-hot features (at most one id per row in every unit).

    No merge can happen, so a feature's entries in a piece of contiguous rows are its ids
    between two splits, each at the row `_Loaded.one_hot_group` gives: three slice copies per
    feature and piece and one pass over all rows, where masking and offsetting each feature's
    entries separately costs several times more Python per Criteo batch. Shuffled pieces take
    the rows that hold an id, feature by feature.
    """

    group: Sequence[Column]
    combiner: str
    units: list[tuple[np.ndarray, list[np.ndarray]]]  # per piece: its unit's `_Loaded.one_hot_group`
    masks: list[list[np.ndarray] | None]  # per piece: per feature, bool over the piece's rows (shuffled pieces)
    counts: list[list[int]]  # per piece: per feature, its entries in that piece

    @classmethod
    def plan(cls, pieces, key: int, group: Sequence[Column], combiner: str) -> _OneHot | None:
        """The plan, or None when some unit of the batch has a feature with two ids in a row."""
        units, masks, counts = [], [], []
        for loaded, rows in pieces:
            unit = loaded.one_hot_group(key, group)
            if unit is None:
                return None
            units.append(unit)
            if isinstance(rows, slice):
                splits = [loaded.columns[c.name].row_splits for c in group]
                masks.append(None)
                counts.append([int(s[rows.stop]) - int(s[rows.start]) for s in splits])
            else:
                chosen = [present[rows] for present in unit[0]]
                masks.append(chosen)
                counts.append([int(np.count_nonzero(m)) for m in chosen])
        return cls(group, combiner, units, masks, counts)

    @property
    def total(self) -> int:
        return sum(sum(c) for c in self.counts)

    def fill(self, pieces, rows: np.ndarray, cols: np.ndarray, gains: np.ndarray, counts: np.ndarray) -> None:
        """Writes the entries: feature after feature, each feature's rows ascending."""
        shifts = []  # (segment, what to add to unit rows to make them batch rows)
        weighted = False
        at = 0
        for f, c in enumerate(self.group):
            offset = 0
            first = at
            for (loaded, piece_rows), unit, masks, piece_counts in zip(pieces, self.units, self.masks, self.counts):
                count = piece_counts[f]
                sparse: CsrGroup = loaded.columns[c.name]
                scalar = sparse.scalar_weight
                seg = slice(at, at + count)
                if masks is None:
                    begin = int(sparse.row_splits[piece_rows.start])
                    source = slice(begin, begin + count)
                    np.copyto(rows[seg], unit[1][f][source])
                    shifts.append((seg, offset - piece_rows.start))
                    np.copyto(cols[seg], sparse.values[source])
                    if not scalar:
                        np.copyto(gains[seg], sparse.weights[source])
                    offset += piece_rows.stop - piece_rows.start
                else:
                    chosen = np.flatnonzero(masks[f])
                    np.add(chosen, offset, out=rows[seg], casting="unsafe")
                    # The id of a row that has one sits at that row's split.
                    where = sparse.row_splits[piece_rows[chosen]]
                    np.take(sparse.values, where, out=cols[seg], mode="clip")
                    if not scalar:
                        np.take(sparse.weights, where, out=gains[seg], mode="clip")
                    offset += len(piece_rows)
                if scalar:
                    gains[seg] = sparse.weights
                weighted = weighted or not scalar or sparse.weights != 1.0
                at += count
            counts[f] = at - first
        if len(pieces) == 1 and shifts:  # one piece of contiguous rows: one pass over every feature
            if shifts[0][1]:
                rows += np.int32(shifts[0][1])
        else:
            for seg, shift in shifts:
                rows[seg] += np.int32(shift)
        # A gain of 1 (every weight 1) stays 1 under every combiner.
        if weighted and self.combiner != "sum":
            gains[:] = one_id_gains(gains, self.combiner)


def _check_groups(columns: Sequence[Column], groups: Sequence[Sequence[str]] | None) -> list[list[Column]]:
    sparse = {c.name: c for c in columns if c.is_sparse}
    if groups is None:
        keyed: dict[tuple, list[Column]] = {}
        for c in sparse.values():
            keyed.setdefault((c.dtype, c.weighted), []).append(c)
        return list(keyed.values())
    named = [name for group in groups for name in group]
    if sorted(named) != sorted(sparse):
        raise ValueError(f"groups must name every sparse feature once: got {named}, features {sorted(sparse)}")
    out = []
    for group in groups:
        members = [sparse[name] for name in group]
        if len({(c.dtype, c.weighted) for c in members}) != 1:
            raise ValueError(f"group {list(group)}: features of a group share id dtype and weighting")
        out.append(members)
    return [g for g in out if g]


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


def _sparse_layout(sparse: CsrGroup, rows: slice | np.ndarray) -> tuple:
    """`(kind, info, nnz)` of one piece: contiguous rows or gathered rows."""
    splits = sparse.row_splits
    if isinstance(rows, slice):
        sub = splits[rows.start : rows.stop + 1]
        return ("slice", sub, int(sub[-1] - sub[0]))
    starts = splits[rows]
    lengths = splits[rows + 1] - starts
    return ("take", (starts, lengths), int(lengths.sum()))


def _fill_sparse(pieces, name, per_piece, splits, ids, weights, start: int) -> np.ndarray:
    """Writes one sparse column of a batch: `splits` `[n + 1]` from `start`, ids and weights
    (views into the group's arrays). Returns the ids (an object array for strings)."""
    splits[0] = start
    row, base = 0, 0
    strings = []
    for (loaded, _rows), (kind, info, count) in zip(pieces, per_piece):
        sparse: CsrGroup = loaded.columns[name]
        if kind == "slice":
            sub = info
            r = len(sub) - 1
            np.subtract(sub[1:], sub[0] - base - start, out=splits[row + 1 : row + 1 + r])
            src = slice(int(sub[0]), int(sub[0]) + count)
            if ids is not None:
                np.copyto(ids[base : base + count], sparse.values[src])
            else:
                strings.append(sparse.values[src])
            if weights is not None:
                np.copyto(weights[base : base + count], sparse.weights[src])
        else:
            starts, lengths = info
            r = len(starts)
            seg = splits[row + 1 : row + 1 + r]
            np.cumsum(lengths, out=seg)
            seg += base + start
            index = _gather_index(starts, lengths, count)
            if ids is not None:
                np.take(sparse.values, index, out=ids[base : base + count], mode="clip")
            else:
                strings.append(sparse.values[index])
            if weights is not None:
                np.take(sparse.weights, index, out=weights[base : base + count], mode="clip")
        row += r
        base += count
    if ids is None:
        return np.concatenate(strings) if strings else np.zeros(0, dtype=object)
    return ids


def _piece_csr(sparse: CsrGroup, rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | float]:
    """`(row lengths, ids, weights or the shared float)` of some rows: views for a slice, gathered copies
    for an index."""
    splits = sparse.row_splits
    if isinstance(rows, slice):
        sub = splits[rows.start : rows.stop + 1]
        src = slice(int(sub[0]), int(sub[-1]))
        weights = sparse.weights if sparse.scalar_weight else sparse.weights[src]
        return np.diff(sub), sparse.values[src], weights
    starts = splits[rows]
    lengths = splits[rows + 1] - starts
    index = _gather_index(starts, lengths, int(lengths.sum()))
    weights = sparse.weights if sparse.scalar_weight else sparse.weights[index]
    return lengths, sparse.values[index], weights


def _gather_index(starts: np.ndarray, lengths: np.ndarray, count: int) -> np.ndarray:
    """Source positions of the ids of rows given by `starts`/`lengths`, in row order."""
    if count == int(np.count_nonzero(lengths)):
        # One id per non-empty row (the Criteo-like case): no repeat needed.
        return starts[lengths > 0]
    shift = starts - (np.cumsum(lengths) - lengths)
    return np.repeat(shift, lengths) + np.arange(count, dtype=np.int64)


def _fill_rows(pieces, name, out: np.ndarray) -> np.ndarray:
    at = 0
    for loaded, rows in pieces:
        values = loaded.columns[name]
        if isinstance(rows, slice):
            r = rows.stop - rows.start
            np.copyto(out[at : at + r], values[rows], casting="unsafe")
        else:
            r = len(rows)
            np.take(values, rows, out=out[at : at + r], mode="clip")
        at += r
    return out
