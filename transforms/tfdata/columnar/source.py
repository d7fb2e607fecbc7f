"""Parquet or Arrow shards as a `tf.data` source: numbered batches read by `ColumnarSource`, as `RawBatch`es.

`Dataset.range(batches) -> map(py_function(source.read))`: batch i is a pure
function of i (and the seed), so `tf.train.Checkpoint` can save the iterator
and an `InputState` can resume it. A shuffle without a seed draws one here
and hands it to the reader as a tensor kept in the iterator's state
(`seed_in_state`), so a checkpoint restored in a new process, which draws
another, reads on with the one it was saved with. The reader's arrays reach
TensorFlow through DLPack, without a copy.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from ops.coo import Coo
from sparse_io.pins import ShardPin
from transforms.tfdata.columnar.arrow_op import OPEN_FILES, OpElement, arrow_op_batches
from transforms.tfdata.columnar.batch_arrays import ALIGNMENT, Arena
from transforms.tfdata.columnar.exit_drain import reader_call
from transforms.tfdata.columnar.reader import ColumnarSource
from transforms.tfdata.core.columns import Column
from transforms.tfdata.core.csr_group import CsrGroup
from transforms.tfdata.core.epochs import draw_seed, plain, seed_in_state
from transforms.tfdata.core.finish import RawBatch
from transforms.tfdata.core.options import BatchOptions
from transforms.tfdata.core.state import InputState

__all__ = ["columnar_batches"]

_ENDLESS = 1 << 62
_log = logging.getLogger("sparseflow.tfdata")


def columnar_batches(
    files: Sequence[str],
    columns: Sequence[Column],
    label: Column | None,
    batching: BatchOptions,
    combiners: Mapping[str, str],
    *,
    coo: bool,
    shuffle: bool,
    seed: int | None,
    start: InputState | None,
    num_shards: int,
    index: int,
    shard_format: str = "parquet",
    pins: Sequence[ShardPin] | None = None,
    balance: str = "files",
    element: OpElement | None = None,
    dropped: tf.Variable | None = None,
):
    """`(dataset, the function making each of its elements a RawBatch or None, the ColumnarSource)`.

    Arrow shards read as COO are read by the native dataset op
    (`arrow_op`: no Python in the graph), which writes the delivered
    `element` whole (counting its dropped entries in `dropped`): the
    function is then None, the dataset's elements already final. Every
    other case, and Parquet, is read by the Python reader in a
    `tf.py_function`. `source.reader` says which: "op", or "python (why not
    the op)".

    Sparse features sharing id dtype, weighting and combiner are read as one
    group. With `coo` the reader converts to COO in numpy. The caller must
    keep the source alive as long as the dataset (see `_read_batches`).

    Raises:
      ValueError: resuming a shuffled dataset without its seed, and whatever
        `ColumnarSource` raises.
    """
    drawn = shuffle and seed is None
    if drawn:
        if start is not None:
            raise ValueError(f"start: resuming a shuffled {shard_format} dataset needs the seed it was made with")
        seed = draw_seed()
    keyed: dict[tuple, list[str]] = {}
    for c in columns:
        if c.is_sparse:
            keyed.setdefault((c.dtype, c.weighted, combiners.get(c.name, "sum")), []).append(c.name)
    source = ColumnarSource(
        files,
        columns,
        label,
        batching.batch_size,
        shuffle=shuffle,
        seed=seed or 0,
        num_shards=num_shards,
        index=index,
        drop_remainder=batching.drop_remainder,
        start=start,
        groups=list(keyed.values()),
        coo=combiners if coo else None,
        shard_format=shard_format,
        pins=pins,
        balance=balance,
        keep_open=OPEN_FILES if shard_format == "arrow" and coo else 0,
    )
    try:
        raw, source.reader = arrow_op_batches(source, pins, batching.num_epochs, element, dropped)
    finally:
        for handle in source.take_opened().values():  # those the op's plan did not take
            handle.close()
    if raw is not None:
        return raw, None, source
    if shard_format == "arrow":
        _log.info("sparseflow: Arrow shards read by the Python reader: %s", source.reader)
    source.reader = f"python ({source.reader})"
    raw = _read_batches(source, batching.num_epochs, carry_seed=drawn)
    return raw, _raw_batch(source, combiners, batching.static_rows), source


def _tensor(array: np.ndarray):
    if array.dtype == object:
        return array  # strings: py_function converts (and copies) them
    if array.ctypes.data % ALIGNMENT == 0 and array.flags.writeable and array.flags.c_contiguous:
        # Aliases the arena: no copy. Only for aligned memory (TF aborts otherwise).
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    return tf.convert_to_tensor(array)


_HEADER = 5  # rows, then the position's 4 numbers, then (byte offset, count) per array


def _packs(source: ColumnarSource) -> bool:
    """Whether batches cross as one byte buffer (`_pack`): every array numeric (no string ids)."""
    return "string" not in source.output_dtypes()


def _pack(flat: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`ColumnarSource.read`'s arrays as `(one aligned uint8 buffer, int64 header)`, usually without a copy.

    The reader writes a batch's arrays into one arena (`batch_arrays.Arena`),
    so the buffer is that arena and TensorFlow takes it with one DLPack
    hand-over instead of one per array (~30 us each here, most of the
    hand-over's cost). The header holds the rows, the position and each
    array's byte offset and element count; `_unpack` slices the buffer back
    (64-byte aligned slices, which TensorFlow shares rather than copies).
    Arrays that do not share one arena are first copied into a new one.
    """
    arrays, rows, position = list(flat[:-2]), flat[-2], flat[-1]
    # Empty arrays hold no bytes (numpy may point them anywhere): they are slices of length 0 at 0.
    filled = [a for a in arrays if a.size]
    owner = filled[0].base if filled else None
    if filled and not (
        isinstance(owner, np.ndarray)
        and owner.dtype == np.uint8
        and owner.ndim == 1
        and all(a.base is owner and a.ctypes.data % ALIGNMENT == 0 for a in filled)
    ):
        copies = Arena([(a.size, a.dtype) for a in arrays]).arrays
        for copy, a in zip(copies, arrays):
            np.copyto(copy, a)
        arrays = copies
        filled = [a for a in arrays if a.size]
        owner = filled[0].base
    header = np.zeros(_HEADER + 2 * len(arrays), dtype=np.int64)
    header[0] = rows[0]
    header[1:_HEADER] = position
    if not filled:
        return Arena([(0, np.dtype(np.uint8))]).arrays[0], header
    base = owner.ctypes.data
    start = (-base) % ALIGNMENT
    for k, a in enumerate(arrays):
        if a.size:
            header[_HEADER + 2 * k] = a.ctypes.data - base - start
            header[_HEADER + 2 * k + 1] = a.size
    end = max(a.ctypes.data - base + a.nbytes for a in filled)
    return owner[start:end], header


def _unpack(buffer: tf.Tensor, header: tf.Tensor, dtypes: Sequence[tf.DType]) -> list[tf.Tensor]:
    """The inverse of `_pack` in the graph: the arrays, then rows `[1]` and position `[4]`."""
    out = []
    for k, dtype in enumerate(dtypes):
        offset, count = header[_HEADER + 2 * k], header[_HEADER + 2 * k + 1]
        part = tf.slice(buffer, tf.reshape(offset, [1]), tf.reshape(count * dtype.size, [1]))
        out.append(part if dtype == tf.uint8 else tf.bitcast(tf.reshape(part, [count, dtype.size]), dtype))
    return [*out, header[0:1], header[1:_HEADER]]


def _read_batches(source: ColumnarSource, num_epochs, *, carry_seed: bool = False) -> tf.data.Dataset:
    """`range -> map(py_function(source.read))`: flat tuples of tensors, see `ColumnarSource.read`.

    Where every array is numeric the elements are `(buffer, header)` instead
    (`_pack`; `_raw_batch` unpacks them).

    With `carry_seed` the source's seed goes to `read` as a tensor kept in
    the iterator's state (see `epochs.seed_in_state`).

    The caller must keep `source` alive as long as the dataset: the py_function holds it only
    weakly. TensorFlow ties a py_function built in eager mode to the global graph, which is
    never freed, so a strong reference would keep every reader ever built, with its decoded
    row groups (~100 MB for a Criteo shard's), for the life of the process.
    """
    dtypes = [tf.string if d == "string" else tf.as_dtype(d) for d in source.output_dtypes()]
    packed = _packs(source)
    if packed:
        dtypes = [tf.uint8, tf.int64]
    total = source.num_batches(num_epochs)
    source_ref = weakref.ref(source)

    def read(i, seed=None):
        with reader_call():  # see exit_drain: lets the process exit with an iterator still alive
            alive = source_ref()
            if alive is None:
                raise RuntimeError(
                    "make_dataset: this dataset's shard reader was released with the dataset; keep "
                    "the dataset returned by make_dataset (or an iterator over it) alive while reading"
                )
            flat = alive.read(int(i), seed=None if seed is None else int(seed))
            if packed:
                buffer, header = _pack(flat)
                return [_tensor(buffer), tf.convert_to_tensor(header)]
            return [_tensor(a) for a in flat]

    def batches(*seed):
        ds = tf.data.Dataset.range(_ENDLESS if total is None else total)
        return ds.map(plain(lambda i: tuple(tf.py_function(read, [i, *seed], dtypes))))

    if not carry_seed:
        return batches()
    ds = seed_in_state(source.plan.seed, batches)
    # flat_map hides the count that range -> map shows (Keras sizes its progress bar by it).
    return ds if total is None else ds.apply(tf.data.experimental.assert_cardinality(total))


def _raw_batch(source: ColumnarSource, combiners: Mapping[str, str], static_rows: int | None):
    """Turns `_read_batches`' elements (see `BatchLayout`, `_pack`) into a `RawBatch`."""
    layout = source.layout
    packed = _packs(source)
    dtypes = [tf.as_dtype(d) for d in source.output_dtypes()[:-2]]

    def parts(*flat):
        if packed:
            flat = _unpack(*flat, dtypes)
        batch = layout.unflatten(flat)
        position = tf.ensure_shape(batch.position, [4])
        rows = static_rows if static_rows is not None else tf.reshape(batch.rows, [])
        label = None if layout.label is None else tf.ensure_shape(batch.label, [static_rows])
        dense = {}
        for (_, members), block in zip(layout.dense_blocks, batch.dense):
            count = len(members)
            block = tf.ensure_shape(block, [None if static_rows is None else count * static_rows])
            for c, column in zip(members, tf.unstack(tf.reshape(block, [count, -1]), num=count)):
                dense[c.name] = tf.ensure_shape(column, [static_rows])
        dense = {c.name: dense[c.name] for c in layout.dense}
        groups = []
        for members, arrays in zip(layout.groups, batch.groups):
            count = len(members)
            if layout.coo:
                row_ids, cols, gains, counts = (tf.ensure_shape(t, [None]) for t in arrays)
                split = [tf.split(t, counts, num=count) for t in (row_ids, cols, gains)]
                samples = tf.cast(rows, tf.int32)
                groups.append({c.name: Coo(*(s[f] for s in split), samples) for f, c in enumerate(members)})
                continue
            splits = tf.ensure_shape(arrays[0], [None if static_rows is None else count * static_rows + 1])
            weights = tf.ensure_shape(arrays[2], [None]) if members[0].weighted else 1.0
            group = CsrGroup([c.name for c in members], splits, tf.ensure_shape(arrays[1], [None]), weights,
                             num_rows=rows)
            groups.append((group, combiners.get(members[0].name, "sum")))
        return RawBatch(groups, dense, label, position, rows)

    return parts
