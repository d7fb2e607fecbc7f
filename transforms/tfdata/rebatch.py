"""Re-batching in the graph: batches of any row count to batches of exactly `batch_size`.

Elements are dicts of columns with a common row count: dense `[n]` tensors
and `[n, None]` RaggedTensors. A `Dataset.scan` carries the rows left over
from the previous input and emits, per input, the full batches it completes
(as one `[k, B, ...]` nested ragged value that is then unbatched at the
batch level): the work is a few ops per column per input batch, never per row.
Used where rows get dropped after batching (bad log lines), so batch sizes
stay exact.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["rebatch"]


def _empty(spec) -> object:
    if isinstance(spec, tf.RaggedTensorSpec):
        return (tf.zeros([0], tf.int64), tf.constant([], dtype=spec.dtype))
    return tf.constant([], dtype=spec.dtype)


def _flatten(value) -> object:
    if isinstance(value, tf.RaggedTensor):
        return (tf.cast(value.row_lengths(), tf.int64), value.flat_values)
    return value


def rebatch(dataset: tf.data.Dataset, batch_size: int, *, drop_remainder: bool) -> tf.data.Dataset:
    """Re-cuts each pass over `dataset` into batches of exactly `batch_size` rows.

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
    keys = sorted(specs)
    for k in keys:
        spec = specs[k]
        ragged = isinstance(spec, tf.RaggedTensorSpec)
        if ragged and (spec.ragged_rank != 1 or spec.shape.rank != 2):
            raise ValueError(f"rebatch: column {k!r} must be [n, None] with ragged_rank 1, got {spec}")
        if not ragged and (not isinstance(spec, tf.TensorSpec) or spec.shape.rank != 1):
            raise ValueError(
                f"rebatch: column {k!r} must be a [n] Tensor or [n, None] RaggedTensor, got {spec}"
            )
    b = tf.constant(batch_size, tf.int64)
    first_key = keys[0]

    def flagged(x):
        return {k: _flatten(x[k]) for k in keys}, tf.constant(False)

    empty = {k: _empty(specs[k]) for k in keys}
    marked = dataset.map(flagged).concatenate(tf.data.Dataset.from_tensors((empty, tf.constant(True))))

    def step(state, inputs):
        x, flush = inputs
        joined = {}
        for k in keys:
            if isinstance(specs[k], tf.RaggedTensorSpec):
                joined[k] = (tf.concat([state[k][0], x[k][0]], 0), tf.concat([state[k][1], x[k][1]], 0))
            else:
                joined[k] = tf.concat([state[k], x[k]], 0)
        head = joined[first_key]
        n = tf.size(head[0] if isinstance(head, tuple) else head, out_type=tf.int64)
        full = n // b
        rest = n - full * b
        partial = tf.logical_and(flush, rest > 0) if not drop_remainder else tf.constant(False)
        extra = tf.cast(partial, tf.int64)
        lengths = tf.concat([tf.fill([full], b), tf.fill([extra], rest)], 0)
        emit = full * b + extra * rest
        keep_from = tf.where(flush, n, emit)  # a flush ends the pass: nothing is carried over
        out, new_state = {}, {}
        for k in keys:
            if isinstance(specs[k], tf.RaggedTensorSpec):
                row_lengths, values = joined[k]
                m = tf.reduce_sum(row_lengths[:emit])
                total = tf.size(values, out_type=tf.int64)
                inner = tf.RaggedTensor.from_row_lengths(values[:m], row_lengths[:emit], validate=False)
                out[k] = tf.RaggedTensor.from_row_lengths(inner, lengths, validate=False)
                values_from = tf.where(flush, total, m)
                new_state[k] = (row_lengths[keep_from:], values[values_from:])
            else:
                out[k] = tf.RaggedTensor.from_row_lengths(joined[k][:emit], lengths, validate=False)
                new_state[k] = joined[k][keep_from:]
        return new_state, out

    groups = marked.scan(empty, step)
    batches = groups.flat_map(tf.data.Dataset.from_tensor_slices)
    rows = batch_size if drop_remainder else None

    def shape(batch):
        out = {}
        for k in keys:
            value = batch[k]
            if isinstance(specs[k], tf.RaggedTensorSpec):
                splits = tf.ensure_shape(value.row_splits, [None if rows is None else rows + 1])
                out[k] = tf.RaggedTensor.from_row_splits(value.flat_values, splits, validate=False)
            else:
                if isinstance(value, tf.RaggedTensor):
                    value = value.flat_values
                out[k] = tf.ensure_shape(value, [rows])
        return out

    return batches.map(shape)
