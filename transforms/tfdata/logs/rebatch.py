"""Re-batching in the graph: batches of any row count to batches of exactly `batch_size`.

Elements are dicts of columns with a common row count: dense `[n]` tensors
and `[n, None]` RaggedTensors. Columns are first packed by dtype (dense
columns into one `[n, k]` matrix, ragged ones into one `[n, r, None]` value
whose ids are laid out row by row), so the work per input batch is a few ops
per dtype, not per column: a Criteo batch has 40 columns but 3 groups.

A `Dataset.scan` carries the rows left over from the previous input and
emits, per input, the full batches it completes (one nested ragged value,
then unbatched at the batch level, never per row). Used where rows get
dropped after batching (bad log lines), so batch sizes stay exact.

Elements of dense columns only (the log reader's lines) go through
`Dataset.rebatch` instead, which also keeps the pipeline's one source
dataset: the scan's end-of-input marker is a second one, and under the
tf.data service's file split (`distributed_epoch`) only one worker would
get it, so the others would drop their last partial batch.
"""

from __future__ import annotations

import tensorflow as tf

from transforms.tfdata.core.epochs import plain

__all__ = ["rebatch"]


def _groups(specs: dict) -> tuple[dict, dict]:
    """`(dense, ragged)`: dtype name -> sorted column names."""
    dense, ragged = {}, {}
    for k in sorted(specs):
        target = ragged if isinstance(specs[k], tf.RaggedTensorSpec) else dense
        target.setdefault(specs[k].dtype.name, []).append(k)
    return dense, ragged


def rebatch(dataset: tf.data.Dataset, batch_size: int, *, drop_remainder: bool) -> tf.data.Dataset:
    """Re-cuts `dataset` into batches of exactly `batch_size` rows.

    Rows keep their order; the last batch is smaller (or dropped with
    `drop_remainder`). `rebatch(one_epoch, ...).repeat(n)` gives every epoch
    its own last batch. With `drop_remainder` the leading dimension is static.

    Args:
      dataset: elements are dicts of `[n]` Tensors and `[n, None]`
        RaggedTensors (ragged_rank 1), one common n per element.
      batch_size: rows per output batch.
      drop_remainder: drop a final batch of fewer rows.

    Returns:
      A dataset of dicts with the same keys and kinds.

    Example:
      >>> ds = tf.data.Dataset.from_tensor_slices({"x": tf.range(5)}).batch(2)
      >>> [b["x"].numpy().tolist() for b in rebatch(ds, 3, drop_remainder=False)]
      [[0, 1, 2], [3, 4]]
    """
    specs = dataset.element_spec
    if not isinstance(specs, dict) or not specs:
        raise ValueError("rebatch: elements must be non-empty dicts of columns")
    for k, spec in specs.items():
        ragged = isinstance(spec, tf.RaggedTensorSpec)
        if ragged and (spec.ragged_rank != 1 or spec.shape.rank != 2):
            raise ValueError(f"rebatch: column {k!r} must be [n, None] with ragged_rank 1, got {spec}")
        if not ragged and (not isinstance(spec, tf.TensorSpec) or spec.shape.rank != 1):
            raise ValueError(f"rebatch: column {k!r} must be a [n] Tensor or [n, None] RaggedTensor, got {spec}")
    dense, ragged = _groups(specs)
    if not ragged:
        # tf.data's own rebatch: one op on one input. The scan below ends the pass with a marker
        # element from a second source dataset, which the tf.data service's file split hands to a
        # single worker: every other worker would never emit its last partial batch.
        return dataset.rebatch(batch_size, drop_remainder=drop_remainder)
    b = tf.constant(batch_size, tf.int64)

    def pack(x):
        state = {}
        for dtype, names in dense.items():
            state["d_" + dtype] = tf.stack([x[k] for k in names], axis=1)  # [n, k]
        for dtype, names in ragged.items():
            wide = tf.ragged.stack([x[k] for k in names], axis=1)  # [n, r, None], ids row by row
            state["r_" + dtype] = (
                tf.reshape(tf.cast(wide.values.row_lengths(), tf.int64), [-1, len(names)]),
                wide.flat_values,
            )
        return state, tf.constant(False)

    def empty():
        state = {}
        for dtype, names in dense.items():
            state["d_" + dtype] = tf.zeros([0, len(names)], tf.as_dtype(dtype))
        for dtype, names in ragged.items():
            state["r_" + dtype] = (tf.zeros([0, len(names)], tf.int64), tf.zeros([0], tf.as_dtype(dtype)))
        return state

    marked = dataset.map(plain(pack)).concatenate(tf.data.Dataset.from_tensors((empty(), tf.constant(True))))

    def step(state, inputs):
        x, flush = inputs
        joined = {}
        for key, value in state.items():
            if key.startswith("d_"):
                joined[key] = tf.concat([value, x[key]], 0)
            else:
                joined[key] = (tf.concat([value[0], x[key][0]], 0), tf.concat([value[1], x[key][1]], 0))
        first = next(iter(joined.values()))
        n = tf.shape(first[0] if isinstance(first, tuple) else first, out_type=tf.int64)[0]
        full = n // b
        rest = n - full * b
        partial = tf.logical_and(flush, rest > 0) if not drop_remainder else tf.constant(False)
        extra = tf.cast(partial, tf.int64)
        lengths = tf.concat([tf.fill([full], b), tf.fill([extra], rest)], 0)
        emit = full * b + extra * rest
        keep_from = tf.where(flush, n, emit)  # a flush ends the pass: nothing is carried over
        out, new_state = {}, {}
        for key, value in joined.items():
            if key.startswith("d_"):
                out[key] = tf.RaggedTensor.from_row_lengths(value[:emit], lengths, validate=False)
                new_state[key] = value[keep_from:]
            else:
                row_lengths, values = value
                width = tf.shape(row_lengths, out_type=tf.int64)[1]
                emitted = row_lengths[:emit]
                m = tf.reduce_sum(emitted)
                inner = tf.RaggedTensor.from_row_lengths(values[:m], tf.reshape(emitted, [-1]), validate=False)
                rows = tf.RaggedTensor.from_uniform_row_length(inner, width, validate=False)
                out[key] = tf.RaggedTensor.from_row_lengths(rows, lengths, validate=False)
                values_from = tf.where(flush, tf.size(values, out_type=tf.int64), m)
                new_state[key] = (row_lengths[keep_from:], values[values_from:])
        return new_state, out

    groups = marked.scan(empty(), plain(step))
    batches = groups.flat_map(tf.data.Dataset.from_tensor_slices)
    rows = batch_size if drop_remainder else None

    def unpack(batch):
        out = {}
        for dtype, names in dense.items():
            matrix = batch["d_" + dtype]
            if isinstance(matrix, tf.RaggedTensor):
                matrix = matrix.to_tensor()
            matrix = tf.ensure_shape(matrix, [rows, len(names)])
            for j, k in enumerate(names):
                out[k] = matrix[:, j]
        for dtype, names in ragged.items():
            wide = batch["r_" + dtype]  # [b, r, None] with uniform r
            by_row = wide.values  # [b * r, None]
            count = wide.nrows()
            for j, k in enumerate(names):
                picked = tf.gather(by_row, tf.range(j, count * len(names), len(names), dtype=tf.int64))
                splits = tf.ensure_shape(picked.row_splits, [None if rows is None else rows + 1])
                out[k] = tf.RaggedTensor.from_row_splits(picked.flat_values, splits, validate=False)
        return out

    return batches.map(plain(unpack))
