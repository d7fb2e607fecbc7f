"""Arrow shards read by a native dataset op (`SparseflowArrowDataset`): no Python in the input graph.

The Python reader (`source._read_batches`: `range -> map(py_function)`)
needs the process that built the dataset. For Arrow shards read as COO,
shuffled or not, the op (ops/native/arrow_dataset_op.cc) reads the same
batches natively (the same rows in the same order: the shuffle is numpy's,
reproduced in C++): what is done once per dataset is done here, when the dataset is
made, and handed to the op as constant tensors:

* every unit (record-batch slice) of the worker is opened through
  `ArrowShard` (its rows and structure checked, none of its bytes read);
* each unit's columns are described as `native_batch.unit_buffers` does,
  but by their byte offsets in the file instead of addresses, and so is
  what its record batch's CRC-32C covers (`ArrowShard.checksum_parts`);
* each file's identity (size, mtime_ns, inode) as pinned when verified.

The op maps each shard when it first reads from it (refusing a file that is
no longer the one verified, with `ShardPin`'s message), checks each unit's
checksum at its first read (refusing a damaged one with the Python reader's
message), and writes each batch with the kernels the Python reader calls,
straight into the element `make_dataset` delivers (`op_element`: each
feature's `Coo` padded to its capacity, the dense columns, the label, the
position), so no map follows it: a new iterator instantiates no function.
The mappings and checksums checked are the dataset's, for all its
iterators; each new iterator checks each shard's identity again, and its
checksums again if a write in place moved its status change time. Its
iterator state is the next batch's number: `tf.train.Checkpoint` saves it,
and the dataset serialises (the tf.data service can run it where the
library is loaded).

`arrow_op_batches` says why it cannot read a dataset (the Python reader
then does): CSR output, a remote file, compressed record batches, a unit
whose columns the kernels cannot read (a cast, string ids, nulls in ids or
labels: the Python reader raises or casts), a feature derived at read
(schema.json's `at_read`: the op maps stored columns only), or no native
library.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops

from ops.coo import Coo
from sparse_io.pins import ShardPin, pin_shards
from sparse_io.shard_files import open_shard
from transforms.tfdata.columnar.native_batch import unit_buffers
from transforms.tfdata.columnar.reader import ColumnarSource
from transforms.tfdata.core.columns import MISSING_INT

__all__ = ["OPEN_FILES", "OpElement", "arrow_op_batches", "op_element", "python_arrow_reader"]

_COMBINERS = {"sum": 0, "mean": 1, "sqrtn": 2}  # coo_rows.h
_LIST_ADDRESSES = ((0, None), (3, None), (5, 6), (7, 8))  # (address field, its length field) of a list descriptor
_DENSE_ADDRESSES = ((0, 1), (2, None))
_HEX = re.compile("[0-9a-f]{8}")
OPEN_FILES = 8
_scope = threading.local()


@contextlib.contextmanager
def python_arrow_reader():
    """Within (this thread): `make_dataset` reads Arrow shards with the Python reader, never the op.

    The Python reader is the op's reference: tests compare the two, element by element.

    Example:
      >>> with python_arrow_reader():
      ...     pass  # a make_dataset(...) over Arrow shards here reads them in Python
    """
    _scope.python = getattr(_scope, "python", 0) + 1
    try:
        yield
    finally:
        _scope.python -= 1


class _Unreadable(Exception):
    """Why the op cannot read a dataset (the Python reader then reads it)."""


def _library():
    from ops import _native

    library = _native.library()
    return library if library is not None and hasattr(library, "sparseflow_arrow_dataset") else None


@dataclasses.dataclass(frozen=True)
class OpElement:
    """The element `make_dataset` delivers, for the op to write whole (no map after it).

    Attributes:
      capacities: feature -> the static length its COO is padded to
        (every sparse feature), or None for unpadded COO.
      overflow: "error" or "drop" (see `make_dataset`).
      return_position: whether it ends with the int64 `[4]` position.
      static_rows: the batch size when every batch has it (drop_remainder), else None.
    """

    capacities: Mapping[str, int] | None
    overflow: str
    return_position: bool
    static_rows: int | None


def arrow_op_batches(
    source: ColumnarSource, pins: Sequence[ShardPin] | None, num_epochs: int | None, element: OpElement | None,
    dropped: tf.Variable | None = None,
) -> tuple[tf.data.Dataset | None, str]:
    """`(dataset of the elements make_dataset delivers, "op")`, or `(None, why the op cannot read them)`.

    `source` is the Python reader of the same files and options; its plan
    (units, rows, start, fingerprint) and layout are the op's. Batch i of
    `num_epochs` (None: endless) is what the Python reader's batch i
    becomes through `finish_batches`: each feature's `Coo` (padded as
    `element` says, its dropped entries added to `dropped` when given), the
    dense columns, the label and the position.

    Raises:
      CorruptFileError: a record batch carries no checksum, holds other rows
        than the footer says or fails validation (its checksum is the op's
        to check, at its first read).
      ChangedFileError: a shard is no longer the file verified.
    """
    if getattr(_scope, "python", 0):
        return None, "python_arrow_reader() asked for the Python reader"
    if source.shard_format != "arrow":
        return None, f"{source.shard_format} shards"
    if source.coo is None or element is None:
        return None, "CSR output (the op writes COO)"
    at_read = [c.name for c in source.columns if c.derived is not None]
    if at_read:
        return None, f"feature(s) {at_read} derived at read (the op reads the columns the shards hold)"
    library = _library()
    if library is None:
        return None, "the native kernels are not built"
    try:
        tensors = _plan(source, pins)
    except _Unreadable as why:
        return None, str(why)
    start_epoch, start_row = source.plan.start
    settings = [
        source.plan.batch_size, int(source.plan.drop_remainder), -1 if num_epochs is None else int(num_epochs),
        start_epoch, start_row, source.plan.fingerprint, MISSING_INT, int(source.plan.shuffle), source.plan.seed,
    ]
    tensors["settings"] = np.array(settings, np.int64)
    attrs, spec = op_element(source, element, counts_dropped=dropped is not None)
    ds = _ArrowOpDataset(library, tensors, attrs, spec)
    if dropped is None:
        return ds, "op"

    def count(batch, lost):
        with tf.control_dependencies([dropped.assign_add(lost)]):
            return tf.nest.map_structure(tf.identity, batch)

    return ds.map(count), "op"


def op_element(source: ColumnarSource, element: OpElement, *, counts_dropped: bool) -> tuple[dict, object]:
    """`(the op's attributes, its element_spec)` for `element` over `source`'s layout.

    The op writes its components in a fixed order (arrow_dataset.h,
    `ElementLayout`: per feature row_ids, col_ids, gains and sample count,
    then each dense column with the label last, the position, the dropped
    count); `components` lists them in the order `tf.nest` flattens the
    element, so the element arrives nested as `finish_batches` builds it.
    With `counts_dropped` the element is `(batch, dropped count)`.
    """
    layout = source.layout
    rows = element.static_rows
    index: dict[str, object] = {}
    specs: dict[str, object] = {}
    capacities, id_types, k = [], [], 0
    for group in layout.groups:
        id_types.append(tf.as_dtype(group[0].dtype))
        for c in group:
            cap = int(element.capacities[c.name]) if element.capacities else None
            capacities.append(-1 if cap is None else cap)
            index[c.name] = Coo(4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3)
            specs[c.name] = Coo(tf.TensorSpec([cap], tf.int32), tf.TensorSpec([cap], id_types[-1]),
                                tf.TensorSpec([cap], tf.float32), tf.TensorSpec([], tf.int32))
            k += 1
    dense = [c for _, members in layout.dense_blocks for c in members]
    dense_types = [tf.as_dtype(dtype) for dtype, members in layout.dense_blocks for _ in members]
    for j, c in enumerate(dense):
        index[c.name] = 4 * k + j
        specs[c.name] = tf.TensorSpec([rows], dense_types[j])
    structure, spec = [index], [specs]
    if layout.label is not None:  # the source reads the label only where the element holds it
        dense_types.append(tf.as_dtype(np.dtype(layout.label.dtype)))
        structure.append(4 * k + len(dense))
        spec.append(tf.TensorSpec([rows], dense_types[-1]))
    position = 4 * k + len(dense_types)
    if element.return_position:
        structure.append(position)
        spec.append(tf.TensorSpec([4], tf.int64))
    structure, spec = (tuple(structure), tuple(spec)) if len(structure) > 1 else (index, specs)
    if counts_dropped:
        structure, spec = (structure, position + 1), (spec, tf.TensorSpec([], tf.int64))
    attrs = dict(
        group_sizes=[len(g) for g in layout.groups],
        group_combiners=[_COMBINERS[source.coo.get(g[0].name, "sum")] for g in layout.groups],
        id_types=id_types,
        capacities=capacities,
        drop_overflow=element.overflow == "drop",
        dense_types=dense_types,
        components=tf.nest.flatten(structure),
    )
    return attrs, spec


class _ArrowOpDataset(dataset_ops.DatasetSource):
    """The op's dataset: its plan as constant inputs, its element as `op_element` lays it out."""

    def __init__(self, library, tensors: dict, attrs: dict, spec):
        self._spec = spec
        self._attrs = attrs
        variant = library.sparseflow_arrow_dataset(
            **{k: tf.constant(v) for k, v in tensors.items()}, **attrs, **self._flat_structure
        )
        super().__init__(variant)

    @property
    def element_spec(self):
        return self._spec


def _plan(source: ColumnarSource, pins: Sequence[ShardPin] | None) -> dict[str, np.ndarray]:
    """The op's plan inputs: every unit of `source` read once (checksums checked) and described by file offsets."""
    files = source.files
    if pins is None:
        pins = pin_shards(files, "none")
    if any(pin.view != "os" for pin in pins):
        raise _Unreadable("a remote shard (the op maps local files)")
    layout = source.layout
    sparse = [c for group in layout.groups for c in group]
    dense = [(c, dtype) for dtype, members in layout.dense_blocks for c in members]
    if layout.label is not None:
        dense.append((layout.label, str(np.dtype(layout.label.dtype))))
    read_names = [c.name for c in source.columns]
    read_names += [c.weights_name for c in source.columns if c.is_sparse and c.weighted]
    read_names += [] if layout.label is None else [layout.label.name]
    units = np.zeros((len(source.units), 3), np.int64)
    lists = np.zeros((len(source.units), len(sparse), 9), np.int64)
    shared = np.ones((len(source.units), len(sparse)), np.float32)
    columns = np.zeros((len(source.units), len(dense), 4), np.int64)
    checks = np.zeros((len(source.units), 4), np.int64)
    spans: list[tuple[int, int]] = []
    # The shards opened, a bounded number at once (a data set of thousands of shards holds no descriptor each),
    # starting with those the source kept open when it planned.
    handles: OrderedDict[int, tuple] = OrderedDict((i, (h, h.mapped_range())) for i, h in source.take_opened().items())
    try:
        for u, unit in enumerate(source.units):
            if unit.file not in handles:
                shard = open_shard(files[unit.file], "arrow", pins[unit.file])
                handles[unit.file] = (shard, shard.mapped_range())
                while len(handles) > OPEN_FILES:
                    handles.popitem(last=False)[1][0].close()
            shard, mapped = handles[unit.file]
            if mapped is None:
                raise _Unreadable(f"{files[unit.file]}: not memory-mapped")
            stored, initial, buffers_at = shard.checksum_parts(unit.row_group)
            if not _HEX.fullmatch(stored):
                shard.read_unit(unit.row_group)  # checked here: raises the Python reader's error
            checks[u] = (int(stored, 16), initial, len(spans), len(buffers_at))
            for address, size in buffers_at:
                if not (mapped[0] <= address and address + size <= mapped[0] + mapped[1]):
                    raise _Unreadable(f"{files[unit.file]}: record batch {unit.row_group} is compressed")
                spans.append((address - mapped[0], size))
            table = shard.read_unit(unit.row_group, read_names, defer_checksum=True)  # the op checks it
            if unit.start or unit.stop != table.num_rows:
                table = table.slice(unit.start, unit.stop - unit.start)
            where = f"{files[unit.file]} record batch {unit.row_group}"
            buffers = unit_buffers(table, source.columns, layout.label)
            units[u] = (unit.file, unit.row_group, table.num_rows)
            for f, c in enumerate(sparse):
                found = buffers.lists.get(c.name)
                if found is None:
                    raise _Unreadable(f"{where}: column {c.name!r} is read by the Python reader")
                lists[u, f] = _offsets(found[0], _LIST_ADDRESSES, mapped, where, c.name, c.dtype)
                shared[u, f] = found[1]
            for j, (c, dtype) in enumerate(dense):
                found = buffers.dense.get(c.name)
                if found is None or found[1] != dtype:
                    raise _Unreadable(f"{where}: column {c.name!r} is read by the Python reader")
                columns[u, j] = _offsets(found[0], _DENSE_ADDRESSES, mapped, where, c.name, dtype)
    finally:
        for shard, _ in handles.values():
            shard.close()
    for g, group in enumerate(layout.groups):
        first = sum(len(x) for x in layout.groups[:g])
        widths = lists[:, first : first + len(group), 1]
        if widths.size and (widths != widths.flat[0]).any():
            raise _Unreadable(f"group {[c.name for c in group]}: list and large_list columns mixed")
    return {
        "files": np.array(files, dtype=object),
        "identities": np.array([pin.identity for pin in pins], np.int64),
        "units": units,
        "lists": lists,
        "shared_weights": shared,
        "dense": columns,
        "names": np.array([c.name for c in sparse] + [c.name for c, _ in dense], dtype=object),
        "checks": checks,
        "spans": np.array(spans, np.int64).reshape(-1, 2),
    }


def _offsets(descriptor: np.ndarray, fields, mapped: tuple[int, int], where: str, name: str, dtype: str) -> np.ndarray:
    """`descriptor` with its buffer addresses turned into byte offsets in the mapped file (0 stays "none").

    A buffer of no bytes may lie anywhere: it gets offset 8 (inside any shard, never read).
    """
    base, size = mapped
    out = descriptor.copy()
    for field, length in fields:
        if out[field] == 0:
            continue
        offset = int(out[field]) - base
        count = None if length is None else int(out[length])
        if count == 0:
            out[field] = 8
            continue
        if not 0 < offset < size:
            raise _Unreadable(f"{where}: column {name!r} ({dtype}) lies outside the mapped file")
        out[field] = offset
    return out
