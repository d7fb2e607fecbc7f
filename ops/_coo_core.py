"""The arithmetic of convert_to_coo, on inputs that have already been checked.

Every op used here has CPU and GPU kernels, and none of them keeps N-sized
data in host memory on a GPU. TensorFlow runs int32 elementwise ops, int32
slices and int32 concatenation on a GPU with host-memory kernels (int32 is
its "shape" type), so N-sized int32 data is compared, shifted and
decremented as uint32 bits (`tf.bitcast` shares the buffer: no copy), and
row_splits are handled as int64. Where a shape depends on the data
(`tf.where`, `tf.cond` predicates) the GPU has to tell the host a count:
that is inherent to a dedup whose output length depends on the data, and is
why the fixed-length form (`ops.pad_coo`) exists for XLA.

Names: N ids in, M entries out (M <= N), S samples (rows). Comments count the
bytes a step allocates, since avoiding N-sized buffers is the point of the
fast paths. Shifted copies use `tf.roll` (one buffer) rather than `x[1:]`
and `x[:-1]` (TensorFlow copies both slices).
"""

from __future__ import annotations

import tensorflow as tf


def as_bits(x: tf.Tensor) -> tf.Tensor:
    """int32 -> uint32 with the same bits (no copy); other dtypes unchanged."""
    return tf.bitcast(x, tf.uint32) if x.dtype == tf.int32 else x


def cond(pred: tf.Tensor, true_fn, false_fn, *args: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """`tf.cond` that calls the branch taken with `args` and returns a tuple.

    Cond branches are functions, and TensorFlow keeps int32 function
    arguments and results in host memory on a GPU; so int32 tensors go in
    through `args` (never by closure) and cross the boundary, both ways, as
    uint32 bits.
    """
    arg_dtypes = [a.dtype for a in args]
    sent = [as_bits(a) for a in args]
    out_dtypes: list[tf.DType] = []

    def as_branch(fn):
        def branch():
            received = [tf.bitcast(a, tf.int32) if d == tf.int32 else a for a, d in zip(sent, arg_dtypes)]
            out = tuple(fn(*received))
            if not out_dtypes:
                out_dtypes.extend(t.dtype for t in out)
            return tuple(as_bits(t) for t in out)

        return branch

    out = tf.cond(pred, as_branch(true_fn), as_branch(false_fn))
    return tuple(tf.bitcast(t, tf.int32) if d == tf.int32 else t for t, d in zip(out, out_dtypes))


def minus_one(x: tf.Tensor) -> tf.Tensor:
    """int32 x - 1, computed on uint32 bits (same result, wrapping included)."""
    return tf.bitcast(tf.bitcast(x, tf.uint32) - 1, tf.int32)


def ragged_rows(row_splits: tf.Tensor, n: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(rows int32 [N], row_changes bool [N]) from row_splits [S + 1].

    `starts[i]` counts the rows whose first id is at position i (position 0
    always counts row 0's, when N > 0). Its running sum minus one is the row
    of each id, and a non-zero count marks where a new row begins. O(N + S)
    and two N-element int32 buffers; no [S, max_row_length] mask as a
    repeat-based value_rowids builds.
    """
    splits = tf.cast(row_splits, tf.int64)
    first = splits[:-1]
    # Empty rows at the end start at position N, past the last id: a negative
    # segment id makes unsorted_segment_sum drop them.
    inside = first < tf.cast(n, tf.int64)  # S
    first = tf.where(inside, first, -1)  # 8S
    starts = tf.math.unsorted_segment_sum(tf.cast(inside, tf.int32), first, n)  # 4S + 4N
    rows = minus_one(tf.cumsum(starts))  # 4N (the decrement reuses it)
    return rows, tf.cast(starts, tf.bool)  # N


def sorted_rows_changes(first_column: tf.Tensor) -> tf.Tensor:
    """A bool [N] mask, True where a sorted row id differs from the previous one (position 0 is set later)."""
    bits = as_bits(first_column)
    return tf.not_equal(bits, tf.roll(bits, 1, axis=0))  # 4N or 8N, + N


def run_starts(row_changes: tf.Tensor, values: tf.Tensor, *, force_first: bool) -> tf.Tensor:
    """A bool [N] mask, True where an entry of the output begins (a new row or a different id).

    `force_first` marks position 0 when `row_changes` may not (the shift
    compares it with the last id).
    """
    bits = as_bits(values)
    changed = tf.not_equal(bits, tf.roll(bits, 1, axis=0))  # 4N or 8N, + N
    is_start = tf.logical_or(row_changes, changed)
    if not force_first:
        return is_start
    head = tf.fill([tf.minimum(tf.size(bits), 1)], True)  # empty when N = 0
    return tf.concat([head, is_start[1:]], axis=0)  # 2N


def merge_adjacent(
    rows: tf.Tensor,
    values: tf.Tensor,
    is_start: tf.Tensor,
    weights: tf.Tensor,
    *,
    scalar_weight: bool,
    per_row: tf.Tensor | None = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Merges each run of equal consecutive (row, id) pairs into one entry.

    Args:
      rows: int32 [N].
      values: ids [N].
      is_start: bool [N] from `run_starts`.
      weights: float32 [N], or the shared float32 scalar when `scalar_weight`.
      scalar_weight: `weights` is one scalar shared by every id.
      per_row: single-weight paths only: float32 [S], the gain one id of each
        row contributes (weight times the row's combiner scale).

    Returns:
      (rows [M], values [M], gains [M]). Per-id weights: a gain is the sum of
      its run's weights (the caller applies any scale). Single weight: the run
      length times `weights`, or times `per_row` of its row.
      When no run is longer than one (usual for one-hot features) the inputs
      are passed through with no `where` and no gather of ids.
    """

    def unmerged(rows, values):
        if not scalar_weight:
            return rows, values, weights
        if per_row is not None:
            return rows, values, tf.gather(per_row, rows)  # 4N: the output gains
        return rows, values, tf.fill(tf.shape(as_bits(values)), weights)  # 4N: the output gains

    def merged(rows, values):
        starts = tf.reshape(tf.where(is_start), [-1])  # 8M
        out_rows = tf.gather(rows, starts)  # 4M
        out_values = tf.gather(values, starts)  # 4M or 8M
        if scalar_weight:
            # A run ends where the next one starts, and the last id ends one.
            # (Not tf.roll: it has no GPU kernel for bool.)
            is_last = tf.concat([is_start[1:], [True]], axis=0)  # 2N
            lasts = tf.reshape(tf.where(is_last), [-1])  # 8M
            lengths = tf.cast(lasts - starts + 1, tf.float32)  # 4M (the subtraction reuses `lasts`)
            unit = tf.gather(per_row, out_rows) if per_row is not None else weights
            return out_rows, out_values, lengths * unit
        run_of = minus_one(tf.cumsum(tf.cast(is_start, tf.int32)))  # 8N
        gains = tf.math.unsorted_segment_sum(weights, run_of, tf.size(starts))  # 4M
        return out_rows, out_values, gains

    return cond(tf.reduce_all(is_start), unmerged, merged, rows, values)


def inverse_or_zero(total: tf.Tensor, combiner: str) -> tf.Tensor:
    """mean: 1 / total; sqrtn: 1 / sqrt(total) (total is then a sum of squares); 0 where total is 0."""
    root = tf.sqrt(total) if combiner == "sqrtn" else total
    return tf.math.reciprocal_no_nan(root)


def row_scale_per_id(
    rows: tf.Tensor,
    weights: tf.Tensor,
    out_rows: tf.Tensor,
    out_gains: tf.Tensor,
    sample_count,
    combiner: str,
) -> tf.Tensor:
    """float32 [S]: the combiner scale of each row, from per-id weights.

    mean sums the merged gains (M elements: merging only regrouped the same
    sum); sqrtn needs the squares of the original N weights.
    """
    if combiner == "mean":
        total = tf.math.unsorted_segment_sum(out_gains, out_rows, sample_count)
    else:
        total = tf.math.unsorted_segment_sum(tf.square(weights), rows, sample_count)  # 4N
    return inverse_or_zero(total, combiner)


def row_unit_gain(ids_per_row: tf.Tensor, weight: tf.Tensor, combiner: str) -> tf.Tensor:
    """float32 [S] (or scalar): weight times its row's scale, when every id weighs `weight`.

    sum(w) over a row of k ids is k * w and sum(w^2) is k * w^2, so only the
    id count of each row is needed, never an N-element weight array.
    """
    k = tf.cast(ids_per_row, tf.float32)
    # w / (k w) for mean and w / sqrt(k w^2) for sqrtn, 0 where the denominator is 0.
    denominator = k * weight if combiner == "mean" else tf.sqrt(k) * tf.abs(weight)
    return tf.math.divide_no_nan(weight, denominator)


def count_values(values: tf.Tensor, size) -> tf.Tensor:
    """int32 [size]: how often each of 0..size-1 occurs in the int32 `values` (others ignored).

    The raw op, because `tf.math.bincount` first takes a max over `values` to
    size its output, an extra pass we do not need when the size is known.
    Its buffers scale with `size` (S), not with the number of values.
    """
    size = tf.convert_to_tensor(size, dtype=tf.int32)
    return tf.raw_ops.DenseBincount(
        input=values, size=size, weights=tf.zeros([0], tf.int32), binary_output=False
    )
