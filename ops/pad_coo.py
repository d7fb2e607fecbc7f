"""`pad_coo`: COO of data-dependent length to a fixed capacity, so XLA compiles once.

Padding entries are (row_id = sample_count, col_id = 0, gain = 0), so that a
consumer can ignore them either way:

- by row (exact, the recommended way, and the one `ops.embedding_bag` is
  meant to use): a segment sum with `num_segments = sample_count + 1` puts
  every padding entry into one extra last segment, which the consumer slices
  off (`out[:sample_count]`). Exact even when table row 0 holds inf or NaN.
  (With `num_segments = sample_count` the CPU kernel rejects the padding rows
  and the GPU kernel drops them: do not rely on either.)
- by gain: `gains * table[col_ids]` is exactly 0 for a padding entry when
  table row 0 is finite (col_id 0 is always a valid row to gather).
"""

from __future__ import annotations

import tensorflow as tf

from ops._coo_checks import ID_DTYPES, Checks, as_tensor, label, static_count
from ops.coo import Coo

__all__ = ["pad_coo", "OVERFLOW_MODES"]

OVERFLOW_MODES = ("error", "drop")


# Plain TF ops and Python control flow on static facts only: nothing for autograph to convert,
# and converting it would multiply the tracing time.
@tf.autograph.experimental.do_not_convert
def pad_coo(
    row_ids,
    col_ids=None,
    gains=None,
    capacity: int | None = None,
    *,
    sample_count: int | tf.Tensor | None = None,
    overflow: str = "error",
    name: str | None = None,
) -> Coo | tuple[Coo, tf.Tensor]:
    """Pads (or truncates) COO tensors to exactly `capacity` entries.

    Args:
      row_ids: int32 (or int64) `[M]`; returned as int32. Or a whole
        `ops.Coo` (then col_ids and gains are omitted, capacity is given by
        keyword, and sample_count defaults to the Coo's own).
      col_ids: int32 or int64 `[M]`; dtype kept.
      gains: float32 `[M]`.
      capacity: the fixed output length, a Python int >= 0 (it becomes the
        static shape XLA compiles for; stats.json's `capacity[b]["max"]` is a
        sound choice for batches of b rows).
      sample_count: the number of samples S, a Python int or int scalar tensor:
        the row id given to padding entries.
      overflow: what to do when M > capacity. "error" raises
        InvalidArgumentError. "drop" keeps the first `capacity` entries and
        drops the rest (the kept gains of a row cut in two keep the scale
        convert_to_coo gave them: they are not renormalised).
      name: feature name for error messages.

    Returns:
      An `ops.Coo(row_ids, col_ids, gains, sample_count)` whose arrays have
      static shape `[capacity]`; with `overflow="drop"` the pair
      `(coo, dropped)`, dropped an int32 scalar (M - capacity, or 0).

    Raises:
      ValueError: capacity not a non-negative int, no sample_count, an
        `ops.Coo` given together with col_ids or gains, unknown overflow mode,
        wrong dtypes, or lengths that differ in their static shapes.
      tf.errors.InvalidArgumentError: lengths that differ at run time, or
        M > capacity with overflow="error".

    Example:
      >>> padded = pad_coo(
      ...     tf.constant([0, 2], tf.int32), tf.constant([5, 9]), tf.constant([1.0, 0.5]),
      ...     4, sample_count=3)
      >>> padded.row_ids.numpy().tolist(), padded.col_ids.numpy().tolist(), padded.gains.numpy().tolist()
      ([0, 2, 3, 3], [5, 9, 0, 0], [1.0, 0.5, 0.0, 0.0])
      >>> pad_coo(padded, capacity=6).row_ids.numpy().tolist()
      [0, 2, 3, 3, 3, 3]
    """
    where = label("pad_coo", name)
    if isinstance(row_ids, Coo):
        if col_ids is not None or gains is not None:
            raise ValueError(f"{where}: give either an ops.Coo or row_ids, col_ids and gains, not both")
        row_ids, col_ids, gains, carried = row_ids
        if sample_count is None:
            sample_count = carried
    elif col_ids is None or gains is None:
        raise ValueError(f"{where}: col_ids and gains are required (or pass one ops.Coo)")
    if sample_count is None:
        raise ValueError(f"{where}: sample_count is required (the row id given to padding entries)")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"{where}: capacity must be a Python int >= 0, got {capacity!r}")
    if overflow not in OVERFLOW_MODES:
        raise ValueError(f"{where}: unknown overflow mode {overflow!r}; expected one of {OVERFLOW_MODES}")
    count = static_count(sample_count, "sample_count", where)
    row_ids, col_ids, gains = _coo(row_ids, col_ids, gains, where)
    static_lengths = {t.shape[0] for t in (row_ids, col_ids, gains)}
    if None not in static_lengths and len(static_lengths) > 1:
        raise ValueError(
            f"{where}: row_ids, col_ids and gains have lengths {row_ids.shape[0]}, "
            f"{col_ids.shape[0]} and {gains.shape[0]}; they must be equal"
        )
    # On a GPU, TensorFlow runs int32 sizes, slices and concatenations with host-memory
    # kernels, and has no Pad kernel for int64. So int32 ids are handled as uint32 bits
    # (tf.bitcast shares the buffer) and padding is a concatenation: nothing leaves the device.
    col_dtype = col_ids.dtype
    row_bits, col_bits = _bits(row_ids), _bits(col_ids)

    checks = Checks()
    length = tf.size(row_bits)
    if None in static_lengths:
        checks.add(
            lambda: tf.logical_and(tf.equal(tf.size(col_bits), length), tf.equal(tf.size(gains), length)),
            f"{where}: check equal_lengths failed: row_ids, col_ids and gains must have equal lengths",
        )
    dropped = None
    if overflow == "error":
        checks.add(
            lambda: length <= capacity,
            f"{where}: check capacity failed: more COO entries than capacity={capacity} "
            "(raise the capacity, or choose overflow=drop)",
        )
        kept = length
    else:
        kept = tf.minimum(length, capacity)
        dropped = length - kept
        row_bits, col_bits, gains = row_bits[:kept], col_bits[:kept], gains[:kept]

    # The padding length waits for the checks too: a negative one would fail first, in Fill.
    missing = tf.cast(capacity - kept, tf.int64)
    row_bits, col_bits, gains, missing = checks.guard(row_bits, col_bits, gains, missing)
    padded = Coo(
        _signed(_append(row_bits, missing, count), tf.int32),
        _signed(_append(col_bits, missing, 0), col_dtype),
        _append(gains, missing, 0.0),
        count,
    )
    for t in padded[:3]:
        t.set_shape([capacity])
    return padded if dropped is None else (padded, dropped)


def _bits(x: tf.Tensor) -> tf.Tensor:
    return tf.bitcast(x, tf.uint32) if x.dtype == tf.int32 else x


def _signed(x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    return tf.bitcast(x, tf.int32) if dtype == tf.int32 else x


def _append(x: tf.Tensor, count: tf.Tensor, value) -> tf.Tensor:
    """`x` (float32, int64 or uint32 bits of int32) followed by `count` copies of `value`."""
    if x.dtype == tf.float32:
        tail = tf.fill([count], tf.cast(value, tf.float32))
    else:
        # Fill has GPU kernels for int64 but not for (u)int32: fill int64, then narrow.
        tail = tf.fill([count], tf.cast(value, tf.int64))
        if x.dtype == tf.uint32:
            tail = tf.bitcast(tf.cast(tail, tf.int32), tf.uint32)
    return tf.concat([x, tail], axis=0)


def _coo(row_ids, col_ids, gains, where: str) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    row_ids = as_tensor(row_ids, tf.int32)
    col_ids = as_tensor(col_ids, tf.int64)
    gains = as_tensor(gains, tf.float32)
    for what, t in (("row_ids", row_ids), ("col_ids", col_ids)):
        if t.dtype not in ID_DTYPES:
            raise ValueError(f"{where}: {what} must be int32 or int64, got {t.dtype.name}")
    if gains.dtype != tf.float32:
        raise ValueError(f"{where}: gains must be float32, got {gains.dtype.name}")
    for what, t in (("row_ids", row_ids), ("col_ids", col_ids), ("gains", gains)):
        if t.shape.rank not in (None, 1):
            raise ValueError(f"{where}: {what} must be 1-D, got shape {t.shape}")
    row_ids = tf.ensure_shape(row_ids, [None]) if row_ids.shape.rank is None else row_ids
    col_ids = tf.ensure_shape(col_ids, [None]) if col_ids.shape.rank is None else col_ids
    gains = tf.ensure_shape(gains, [None]) if gains.shape.rank is None else gains
    return tf.cast(row_ids, tf.int32), col_ids, gains
