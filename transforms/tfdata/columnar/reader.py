"""The Python-side reader of columnar shards behind `make_dataset`: units to numbered batches.

Parquet and Arrow shards are read alike: a shard is a sequence of units
(Parquet row groups, decoded on every read; Arrow record batches,
memory-mapped and read without decoding: `shard_files`). This reader runs
in Python (pyarrow, called from a `tf.py_function`), so it
needs the Python process that built the dataset: it does not run inside the
tf.data service. Its work per batch is a few numpy calls per column, never a
loop over rows. It composes:

* `row_plan`: which rows of which units (row-group slices) make up batch i,
  across unit boundaries, so `batch_size` is independent of the row-group
  size; batch i is a pure function of i;
* `unit_loader`: each unit read once, in a read-ahead thread, and kept as
  Arrow buffers (the ids are not copied there: for Arrow shards they are the
  mapped file's pages);
* `csr_assembly` / `coo_assembly`: each column of the batch written once into
  a 64-byte-aligned arena (`batch_arrays`), the only copy of the ids between
  the Arrow buffer and the tensor, since TensorFlow then aliases the arena
  through DLPack;
* `native_batch`: for COO batches, the same arena written natively from the
  units' Arrow buffers, one call per group and per dense block, where the
  kernels load (the numpy paths above are its reference and fallback);
* `batch_layout`: the list of arrays a batch is handed over as;
* `column_check`: the shards' columns checked once, before reading.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import numpy as np

from sparse_io.pins import ShardPin
from sparse_io.shard_files import ShardFile, open_shard
from transforms.tfdata.columnar.batch_arrays import ALIGNMENT, fill_rows
from transforms.tfdata.columnar.batch_layout import BatchLayout, BatchParts
from transforms.tfdata.columnar.column_check import check_arrow_schema
from transforms.tfdata.columnar.coo_assembly import assemble_coo
from transforms.tfdata.columnar.csr_assembly import assemble_csr
from transforms.tfdata.columnar.native_batch import PieceRows, dense_rows, native_batches_available
from transforms.tfdata.columnar.row_plan import RowPlan
from transforms.tfdata.columnar.unit_loader import Loaded, UnitLoader
from transforms.tfdata.core.columns import Column
from transforms.tfdata.core.sharding import plan_units
from transforms.tfdata.core.state import InputState, fingerprint

__all__ = ["ColumnarSource", "ALIGNMENT"]


class ColumnarSource:
    """This worker's rows of a set of Parquet or Arrow shards, as numbered CSR or COO batches.

    Args:
      files: shard paths, sorted (their order defines the row sequence).
      columns: features to read (`Column`s); `label`: the label column or None.
      batch_size: rows per batch; the last batch of an epoch is smaller unless
        `drop_remainder`.
      shuffle: permute the units (row-group slices) each epoch, and the rows
        inside each unit, from `seed` and the epoch number.
      seed: a non-negative integer (required: the caller draws one when the
        user gives none). `read` may name another (see there).
      num_shards, index: the worker; `balance`: how the rows are split
        between workers, "files" or "rows" (see `sharding.plan_units`).
      start: resume here (an `InputState` of this plan).
      groups: sparse feature names to lay end to end in one set of arrays
        (each group sharing id dtype and weighting); default: one group per
        (id dtype, weighted) pair, in column order.
      coo: feature -> combiner: deliver COO (`numpy_coo`) instead of CSR,
        every feature of a group sharing its combiner.
      shard_format: "parquet" or "arrow" (`shard_files.COLUMNAR_FORMATS`).
      native: with `coo`, write batches natively from the units' Arrow
        buffers (`native_batch`); None: where the native kernels load.
        False reads with numpy only (their reference).
      pins: per file, what was verified (`sparse_io.pins.pin_shards`):
        each open checks the file is still the one verified, holding the
        rows its manifest lists.
      keep_open: keep up to this many of the shards opened to plan (the
        first ones) for `take_opened`: the native op's plan reads them
        next, and need not open them again.

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
        shard_format: str = "parquet",
        native: bool | None = None,
        pins: Sequence[ShardPin] | None = None,
        balance: str = "files",
        keep_open: int = 0,
    ):
        self.files = list(files)
        if pins is not None and len(pins) != len(self.files):
            raise ValueError(f"pins: {len(pins)} for {len(self.files)} files")
        self.shard_format = shard_format
        self.columns = list(columns)
        self.label = label
        self.groups = _check_groups(self.columns, groups)
        self.coo = None if coo is None else dict(coo)
        if self.coo is not None:
            for group in self.groups:
                combiners = {self.coo.get(c.name, "sum") for c in group}
                if len(combiners) != 1 or group[0].dtype == "string":
                    raise ValueError(f"coo: group {[c.name for c in group]} needs integer ids and one combiner")
        self.layout = BatchLayout(self.columns, label, self.groups, coo=self.coo is not None)

        row_groups = []
        self._opened: dict[int, ShardFile] = {}
        try:
            for i, path in enumerate(self.files):
                handle = open_shard(path, shard_format, None if pins is None else pins[i])
                try:
                    check_arrow_schema(path, handle.schema_arrow, self.columns, label)
                    row_groups.append(list(handle.unit_rows))
                finally:
                    if len(self._opened) < keep_open:
                        self._opened[i] = handle
                    else:
                        handle.close()
        except BaseException:
            for handle in self.take_opened().values():
                handle.close()
            raise
        self.units, self.mode = plan_units(row_groups, num_shards, index, balance)
        unit_rows = np.array([u.num_rows for u in self.units], dtype=np.int64)
        if drop_remainder and int(unit_rows.sum()) < batch_size:
            raise ValueError(
                f"worker {index} of {num_shards} has {int(unit_rows.sum())} rows, fewer than one batch of "
                f"{batch_size} with drop_remainder=True: it would read nothing"
            )
        names = [p.rsplit("/", 1)[-1] for p in self.files]

        def plan(seed: int, start: InputState | None) -> RowPlan:
            # Refers to no attribute of self: the source stays free of reference cycles (it holds
            # decoded row groups, and is released when its dataset is).
            return RowPlan(
                unit_rows,
                batch_size,
                shuffle=shuffle,
                seed=seed,
                drop_remainder=drop_remainder,
                fingerprint=fingerprint(
                    names,
                    row_groups,
                    num_shards,
                    index,
                    bool(shuffle),
                    int(seed) if shuffle else None,
                    # Only a balanced plan says so: the states of whole-file plans keep their fingerprints.
                    *(["balance=rows"] if balance == "rows" else []),
                ),
                start=start,
            )

        self.plan = plan(seed, start)
        self._new_plan = plan
        self._started = start is not None
        # Plans of other seeds: a checkpoint restored into this source carries the seed it was saved with.
        self._plans: dict[int, RowPlan] = {int(seed): self.plan}
        self._plans_lock = threading.Lock()
        # COO batches look up each unit's one-hot layout per group (`coo_assembly`): found while reading ahead.
        if native is None:
            native = native_batches_available()
        self.native = bool(native) and self.coo is not None
        # Which reader `make_dataset` chose for these batches ("op", or "python (why)"): see `source.columnar_batches`.
        self.reader = "python"
        self.loader = UnitLoader(
            self.files,
            self.units,
            self.columns,
            label,
            shard_format,
            self.groups if self.coo is not None else (),
            native=self.native,
            pins=pins,
        )

    def take_opened(self) -> dict[int, ShardFile]:
        """The shards kept open when planned (`keep_open`), file index -> handle, now the caller's to close.

        A second call returns `{}`.
        """
        opened, self._opened = self._opened, {}
        return opened

    def num_batches(self, num_epochs: int | None) -> int | None:
        """Batches the dataset yields from its start over `num_epochs` (None: endless)."""
        return self.plan.num_batches(num_epochs)

    def output_dtypes(self) -> list[np.dtype | str]:
        """The flat dtypes `read` returns, in order (see `BatchLayout`)."""
        return self.layout.dtypes()

    def plan_for(self, seed: int) -> RowPlan:
        """The plan of this source's rows shuffled with `seed` (built once per seed, then kept).

        Raises:
          ValueError: `seed` is not this source's own and the source was made
            with a `start`, which belongs to the source's own seed.
        """
        plan = self._plans.get(seed)
        if plan is not None:
            return plan
        if self._started:
            raise ValueError(f"seed {seed}: a source made with start= reads with its own seed, {self.plan.seed}, only")
        with self._plans_lock:
            return self._plans.setdefault(seed, self._new_plan(seed, None))

    def pieces(
        self, epoch: int, begin: int, end: int, plan: RowPlan | None = None
    ) -> list[tuple[Loaded, slice | np.ndarray]]:
        """The decoded units and the rows of each that make up rows `[begin, end)` of an epoch (of `plan`)."""
        plan = self.plan if plan is None else plan
        return [(self.loader.unit(unit, ahead), rows) for unit, ahead, rows in plan.segments(epoch, begin, end)]

    def read(self, i: int, seed: int | None = None) -> list[np.ndarray]:
        """Batch `i` as the flat list `self.layout` describes (`BatchLayout.flatten` of a `BatchParts`).

        `seed`: read the rows as shuffled with this seed (default: the
        source's own). Numeric arrays of the groups, dense blocks and label
        are 64-byte aligned and freshly allocated (safe to alias).

        Raises:
          ValueError: see `plan_for`.
        """
        plan = self.plan if seed is None else self.plan_for(seed)
        epoch, begin, end = plan.locate(int(i))
        pieces = self.pieces(epoch, begin, end, plan)
        n = end - begin
        tail = [(len(block) * n, np.dtype(dtype)) for dtype, block in self.layout.dense_blocks]
        if self.label is not None:
            tail.append((n, np.dtype(self.label.dtype)))
        piece_rows = PieceRows(pieces) if self.native else None
        if self.coo is not None:
            groups, arrays = assemble_coo(pieces, self.groups, self.coo, tail, piece_rows)
        else:
            groups, arrays = assemble_csr(pieces, self.groups, n, tail)
        dense = []
        for (_, members), block in zip(self.layout.dense_blocks, arrays):
            _fill_columns(pieces, piece_rows, [c.name for c in members], block, n)
            dense.append(block)
        label = None
        if self.label is not None:
            label = _fill_columns(pieces, piece_rows, [self.label.name], arrays[-1], n)
        state = plan.position(epoch, end)
        position = np.array([state.epoch, state.shard, state.row, state.fingerprint], dtype=np.int64)
        return self.layout.flatten(BatchParts(groups, dense, label, np.array([n], dtype=np.int64), position))


def _fill_columns(pieces, piece_rows: PieceRows | None, names: Sequence[str], out: np.ndarray, n: int) -> np.ndarray:
    """Columns `names` of the batch's `n` rows into `out`, end to end: natively where the units allow."""
    if piece_rows is None or not dense_rows(piece_rows, tuple(names), out):
        for j, name in enumerate(names):
            fill_rows(pieces, name, out[j * n : (j + 1) * n])
    return out


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
