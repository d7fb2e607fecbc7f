"""`embedding_bag`: weighted sums of table rows over a COO batch, with a sparse table gradient.

Each call looks up every distinct id once (unique, then one gather of U rows),
then combines the gathered rows into samples. The table gradient is therefore
a `tf.IndexedSlices` with U rows, never a dense `[vocab, dim]` tensor.

Two interchangeable formulations of the combining step:
  - "segment": `unsorted_segment_sum(gather(rows, idx) * gains, row_ids)`.
    Stock gather/segment ops only: compiles under XLA and runs on GPU
    without host round trips.
  - "csr": one CSR sparse-matrix x dense product (`SparseMatrixMatMul`) for
    the forward and one for the backward pass. On CPU it avoids writing and
    re-reading an `[N, dim]` intermediate per pass, which is what makes the
    segment form slow there (each such pass costs about as much as the
    gather itself). It has no XLA kernel.

And one fused kernel, "native" (`ops/native/`, CPU only, built from source on
first use): one pass over the entries for the forward, no unique; its backward
finds the distinct ids in one hash-map pass. The compositions above are its
references in the tests, and run in its place inside XLA-compiled functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import tensorflow as tf

from ops import _native
from ops._coo_checks import Checks, first_true
from ops._xla import in_xla_context
from ops.coo import Coo, split_coo

__all__ = ["embedding_bag", "IMPLEMENTATIONS", "PARTITION_STRATEGIES"]

IMPLEMENTATIONS = ("auto", "segment", "csr", "native")
PARTITION_STRATEGIES = ("mod", "div")

Table: TypeAlias = tf.Tensor | tf.Variable | Sequence[tf.Tensor | tf.Variable]


def embedding_bag(
    table: Table,
    row_ids,
    col_ids: tf.Tensor | None = None,
    gains: tf.Tensor | None = None,
    sample_count: int | tf.Tensor | None = None,
    *,
    partition_strategy: str = "mod",
    implementation: str = "auto",
    name: str | None = None,
) -> tf.Tensor:
    """Returns `out[r] = sum over entries k with row_ids[k] == r of gains[k] * table[col_ids[k]]`.

    Args:
      table: `[vocab, dim]` float tensor or variable, or a list of shards
        (see `partition_strategy`) that together hold `vocab` rows.
      row_ids: int32/int64 `[N]`, each in `[0, sample_count]`. Entries whose row
        is `sample_count` are padding (as written by `ops.pad_coo`, with gain
        0) and contribute nothing. Any order is accepted. Or a whole
        `ops.Coo` (as `make_dataset(output="coo")` yields per feature), with
        col_ids and gains omitted: its sample_count is used unless one is given.
      col_ids: int32/int64 `[N]`, ids in `[0, vocab)`.
      gains: float `[N]` (cast to the table dtype); the combiner is already
        folded in by `ops.convert_to_coo`. The gradient flows to it.
      sample_count: S, a Python int (static output shape) or int scalar tensor.
        Required (directly or in the `ops.Coo`): it is never guessed from
        row_ids, whose largest value is S itself in a padded COO.
      partition_strategy: how ids map to shards when `table` is a list.
        "mod": id i lives in shard `i % num_shards` at row `i // num_shards`
        (shard sizes must then be `ceil((vocab - s) / num_shards)`).
        "div": shards hold consecutive id ranges, in order, of any sizes.
      implementation: "segment", "csr" (float32/float64 tables only), "native"
        (float32, float64, float16 and bfloat16 tables; the 16-bit ones summed
        in float32 and rounded once per output element) or "auto" (default):
        "segment" inside an XLA-compiled function, when a GPU is visible or for
        other dtypes, else "native" for one table, "csr" for a sharded one
        ("segment" for a sharded 16-bit one). "native" runs the fused CPU kernel
        (ops/native, built on first use); inside an XLA-compiled function it
        runs "segment", for a sharded table or where the kernel could not be
        built (one warning line in the log) "csr" ("segment" for 16-bit tables).
      name: feature name, for the name scope and error messages.

    Returns:
      `[S, dim]` with the table dtype. The gradient for the table (each shard)
      is a `tf.IndexedSlices` with one row per distinct id of the batch (of
      the shard). Inside an XLA-compiled function a sharded table is gathered
      per shard with masking instead, and each shard's gradient then has a
      (zero) row for every distinct id of the batch.

    Raises:
      ValueError: static problems (ranks, lengths, dtypes, shard sizes,
        unknown option, no sample_count).
      tf.errors.InvalidArgumentError: col_ids outside `[0, vocab)`, row_ids
        outside `[0, sample_count]`, or lengths that differ at run time; the
        message names the check and the first offending position. Checked on
        every device, eagerly and in graphs; inside an XLA-compiled function
        no run-time check is made (XLA has no assertions): there a GPU gather
        gives zeros for an out-of-range id and a negative row id is dropped.

    Non-finite gains or table rows are not errors: they propagate (NaN or
    inf) into the rows of the output they belong to, and only those.

    Example:
      >>> table = tf.reshape(tf.range(8.0), [4, 2])
      >>> embedding_bag(table, tf.constant([0, 0, 2]), tf.constant([1, 3, 1]),
      ...               tf.constant([1.0, 0.5, 0.0]), sample_count=2).numpy()
      array([[5. , 6.5],
             [0. , 0. ]], dtype=float32)
      >>> import ops
      >>> coo = ops.Coo(tf.constant([0, 0, 2]), tf.constant([1, 3, 1]), tf.constant([1.0, 0.5, 0.0]), 2)
      >>> embedding_bag(table, coo).shape  # or embedding_bag(table, *coo)
      TensorShape([2, 2])
    """
    where = f"embedding_bag[{name}]" if name else "embedding_bag"
    row_ids, col_ids, gains, sample_count = _coo_arguments(row_ids, col_ids, gains, sample_count, where)
    shards = _shards(table, where)
    if partition_strategy not in PARTITION_STRATEGIES:
        raise ValueError(
            f"{where}: partition_strategy must be one of {PARTITION_STRATEGIES}, got {partition_strategy!r}"
        )
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"{where}: implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    with tf.name_scope(name or "embedding_bag"):
        row_ids, col_ids, gains = _coo(row_ids, col_ids, gains, shards[0].dtype, where)
        sample_count = _sample_count(sample_count, where)
        if implementation == "auto":
            implementation = _auto_implementation(rows_dtype=shards[0].dtype, sharded=len(shards) > 1)
        if col_ids.shape[0] == 0:
            # No ids at all (a feature empty in every row pads to capacity 0): TensorFlow's CSR
            # kernels divide by the column count and kill the process on an empty matrix.
            implementation = "segment"
        if implementation == "native":
            implementation = _native_or_composition(shards)
        if implementation == "native":
            return _native.embedding_bag(
                *(shards[0], row_ids, col_ids, gains, sample_count),
                col_message=_col_message(where, _vocab_shown(shards)),
                row_message=_row_message(where, sample_count),
                length_message=_LENGTH_MESSAGE.format(where=where),
            )
        checks = Checks()
        if not in_xla_context():
            _check_data(checks, shards, row_ids, col_ids, gains, sample_count, where)
        # Distinct ids: each table row is read once, and the table gradient has one row per id.
        # Everything after the checks depends on them, so no kernel sees data they reject.
        with tf.control_dependencies(checks.pending):
            # int64 slots for the CSR form, whose indices are int64: a cast of them would run beside
            # the gather and wait for its threads.
            slot_dtype = tf.int64 if implementation == "csr" else tf.int32
            unique_ids, slot = tf.unique(col_ids, out_idx=slot_dtype)
            (gains,) = checks.guard(gains)
        rows = _gather_rows(shards, unique_ids, partition_strategy, where)
        if implementation == "segment":
            return _combine_segment(rows, slot, row_ids, gains, sample_count)
        return _combine_csr(rows, slot, row_ids, gains, sample_count)


def _check_data(checks: Checks, shards, row_ids, col_ids, gains, sample_count, where: str) -> None:
    """Lengths (when not static), col_ids in [0, vocab) and row_ids in [0, sample_count]."""
    lengths = [t.shape[0] for t in (row_ids, col_ids, gains)]
    if None in lengths:
        n = tf.size(col_ids)
        checks.add(
            lambda: tf.logical_and(tf.equal(tf.size(row_ids), n), tf.equal(tf.size(gains), n)),
            _LENGTH_MESSAGE.format(where=where),
        )
    vocab, shown = _vocab(shards)
    # A passing check costs two reductions per tensor; the per-entry masks are built only in the
    # failing branch, to name the first offending position. int64: int32 reductions and comparisons
    # run in host memory on a GPU.
    cols = tf.cast(col_ids, tf.int64)
    checks.add(
        lambda: tf.logical_and(tf.reduce_min(cols) >= 0, tf.reduce_max(cols) < vocab),
        _col_message(where, shown),
        lambda: first_true(tf.logical_or(cols < 0, cols >= vocab)),
    )
    rows = tf.cast(row_ids, tf.int64)
    limit = tf.cast(sample_count, tf.int64)
    checks.add(
        lambda: tf.logical_and(tf.reduce_min(rows) >= 0, tf.reduce_max(rows) <= limit),
        _row_message(where, sample_count),
        lambda: first_true(tf.logical_or(rows < 0, rows > limit)),
    )


_LENGTH_MESSAGE = "{where}: check equal_lengths failed: row_ids, col_ids and gains must have equal lengths"


def _vocab(shards) -> tuple[tf.Tensor, str]:
    """The table's row count, and how messages show it."""
    static_vocab = [s.shape[0] for s in shards]
    if None in static_vocab:
        return tf.cast(tf.shape(shards[0])[0], tf.int64), _vocab_shown(shards)
    return tf.constant(sum(static_vocab), tf.int64), _vocab_shown(shards)


def _vocab_shown(shards) -> str:
    static_vocab = [s.shape[0] for s in shards]
    return "vocab" if None in static_vocab else f"vocab={sum(static_vocab)}"


def _col_message(where: str, shown: str) -> str:
    return f"{where}: check col_ids_in_range failed: col_ids must be table rows in [0, {shown})"


def _row_message(where: str, sample_count) -> str:
    bound = f"={sample_count}" if isinstance(sample_count, int) else ""
    return (
        f"{where}: check row_ids_in_range failed: row_ids must be in [0, sample_count{bound}] "
        "(sample_count itself marks padding)"
    )


# The CSR kernels exist for float32 and float64; the native kernel for those and the 16-bit floats.
_CSR_DTYPES = (tf.float32, tf.float64)
_NATIVE_DTYPES = (tf.float32, tf.float64, tf.float16, tf.bfloat16)


def _auto_implementation(rows_dtype: tf.DType, sharded: bool) -> str:
    if in_xla_context() or rows_dtype not in _NATIVE_DTYPES or tf.config.list_logical_devices("GPU"):
        return "segment"
    if sharded:
        return "csr" if rows_dtype in _CSR_DTYPES else "segment"
    return "native"


def _native_or_composition(shards) -> str:
    """"native" where the fused kernel can run, else the composition that runs in its place."""
    if in_xla_context() or shards[0].dtype not in _NATIVE_DTYPES:
        return "segment"
    if len(shards) > 1 or not _native.available():
        return "csr" if shards[0].dtype in _CSR_DTYPES else "segment"
    return "native"


def _combine_segment(rows, slot, row_ids, gains, sample_count):
    # One extra segment collects the padding entries (row == sample_count); it is cut off.
    weighted = tf.gather(rows, slot) * gains[:, None]
    summed = tf.math.unsorted_segment_sum(weighted, row_ids, sample_count + 1)
    return summed[:sample_count]


def _combine_csr(rows, slot, row_ids, gains, sample_count):
    row_ids, slot, gains = _sorted_by_row(row_ids, slot, gains)
    num_rows = tf.cast(sample_count, tf.int64) + 1  # the last row collects the padding entries
    shape = tf.stack([num_rows, tf.shape(rows, out_type=tf.int64)[0]])
    # Stacking [2, N] then transposing: on CPU, stacking along axis 1 copies one element at a
    # time and costs about twice as much.
    indices = tf.transpose(tf.stack([tf.cast(row_ids, tf.int64), tf.cast(slot, tf.int64)]))

    @tf.custom_gradient
    def combine(rows, gains):
        # [S + 1, U] with one entry per COO entry; duplicates of (row, slot) add up.
        matrix = tf.raw_ops.SparseTensorToCSRSparseMatrix(indices=indices, values=gains, dense_shape=shape)
        out = tf.raw_ops.SparseMatrixMatMul(a=matrix, b=rows)

        def grad(d_out):
            # The explicit transpose then a plain product is several times faster on CPU than
            # SparseMatrixMatMul(adjoint_a=True).
            matrix_t = tf.raw_ops.SparseMatrixTranspose(input=matrix, type=rows.dtype)
            d_rows = tf.raw_ops.SparseMatrixMatMul(a=matrix_t, b=d_out)
            # Only evaluated when a gradient for gains is asked for (graph pruning).
            d_gains = tf.reduce_sum(tf.gather(d_out, row_ids) * tf.gather(rows, slot), axis=1)
            return d_rows, d_gains

        return out, grad

    return combine(rows, gains)[:sample_count]


def _sorted_by_row(row_ids, slot, gains):
    """CSR conversion needs entries grouped by row; COO from ops.to_coo already is."""
    # One reduction of the steps, cheaper than a reduce_all over a boolean tensor of comparisons.
    in_order = tf.reduce_min(row_ids[1:] - row_ids[:-1]) >= 0

    def reorder():
        order = tf.argsort(row_ids, stable=True)
        return tf.gather(row_ids, order), tf.gather(slot, order), tf.gather(gains, order)

    return tf.cond(in_order, lambda: (row_ids, slot, gains), reorder)


def _gather_rows(shards, ids, partition_strategy, where):
    if len(shards) == 1:
        return tf.gather(shards[0], ids)
    shard_of, local = _shard_and_row(shards, ids, partition_strategy, where)
    if in_xla_context():
        # XLA compiles neither dynamic_stitch with run-time indices nor, reliably, dynamic_partition of
        # the run-time-sized unique ids. Each shard is gathered at every id instead (clamped to its
        # rows) and the rows of other shards are masked out: the same result, at num_shards gathers,
        # and each shard's IndexedSlices gradient has a zero row for every id of the other shards.
        rows = []
        for s, shard in enumerate(shards):
            mine = tf.equal(shard_of, s)[:, None]
            local_s = tf.clip_by_value(local, 0, shard.shape[0] - 1)
            rows.append(tf.where(mine, tf.gather(shard, local_s), tf.zeros((), shard.dtype)))
        return tf.add_n(rows)
    count = len(shards)
    local_parts = tf.dynamic_partition(local, shard_of, count)
    positions = tf.dynamic_partition(tf.range(tf.shape(ids)[0]), shard_of, count)
    return tf.dynamic_stitch(positions, [tf.gather(shard, part) for shard, part in zip(shards, local_parts)])


def _shard_and_row(shards, ids, partition_strategy, where):
    sizes = [int(s.shape[0]) for s in shards]
    count = len(shards)
    vocab = sum(sizes)
    if partition_strategy == "mod":
        expected = [(vocab - s + count - 1) // count for s in range(count)]
        if sizes != expected:
            raise ValueError(
                f"{where}: 'mod' sharding of {vocab} ids over {count} shards needs shard sizes {expected}, "
                f"got {sizes}"
            )
        count_t = tf.constant(count, ids.dtype)
        return tf.cast(ids % count_t, tf.int32), ids // count_t
    # "div": shard s holds ids [starts[s], starts[s] + sizes[s]).
    starts = [sum(sizes[:s]) for s in range(count)]
    bounds = tf.constant(starts[1:], ids.dtype)
    shard_of = tf.searchsorted(bounds, ids, side="right", out_type=tf.int32)
    return shard_of, ids - tf.gather(tf.constant(starts, ids.dtype), shard_of)


def _shards(table, where: str) -> list:
    shards = list(table) if isinstance(table, (list, tuple)) else [table]
    if not shards:
        raise ValueError(f"{where}: table is an empty list of shards")
    out = []
    for i, shard in enumerate(shards):
        if not isinstance(shard, tf.Variable):
            shard = tf.convert_to_tensor(shard)
        if shard.shape.rank != 2:
            raise ValueError(
                f"{where}: table shard {i} must have rank 2 [rows, dim], got shape {shard.shape}"
            )
        if not shard.dtype.is_floating:
            raise ValueError(f"{where}: table shard {i} must be floating point, got {shard.dtype.name}")
        out.append(shard)
    if len(out) > 1:
        dims = {int(s.shape[1]) for s in out}
        dtypes = {s.dtype for s in out}
        if len(dims) != 1 or len(dtypes) != 1 or any(s.shape[0] is None for s in out):
            raise ValueError(
                f"{where}: table shards need static row counts and one dim and dtype, got "
                f"{[(tuple(s.shape), s.dtype.name) for s in out]}"
            )
    return out


def _tensor(value) -> tf.Tensor:
    # A conversion is an eager dispatch even for a tensor; a forward is called once per batch.
    return value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(value)


def _coo(row_ids, col_ids, gains, dtype, where):
    row_ids, col_ids, gains = (_tensor(t) for t in (row_ids, col_ids, gains))
    for what, t in (("row_ids", row_ids), ("col_ids", col_ids), ("gains", gains)):
        if t.shape.rank != 1:
            raise ValueError(f"{where}: {what} must be 1-D [N], got shape {t.shape}")
    for what, t in (("row_ids", row_ids), ("col_ids", col_ids)):
        if t.dtype not in (tf.int32, tf.int64):
            raise ValueError(f"{where}: {what} must be int32 or int64, got {t.dtype.name}")
    if not gains.dtype.is_floating:
        raise ValueError(f"{where}: gains must be floating point, got {gains.dtype.name}")
    lengths = {int(t.shape[0]) for t in (row_ids, col_ids, gains) if t.shape[0] is not None}
    if len(lengths) > 1:
        raise ValueError(
            f"{where}: row_ids, col_ids and gains must have one length, got "
            f"{row_ids.shape[0]}, {col_ids.shape[0]}, {gains.shape[0]}"
        )
    # Each eager op costs a dispatch (tens of microseconds when the runtime's code is cold): skip a no-op cast.
    return row_ids, col_ids, gains if gains.dtype == dtype else tf.cast(gains, dtype)


def _coo_arguments(row_ids, col_ids, gains, sample_count, where: str):
    """(row_ids, col_ids, gains, sample_count) from separate tensors or one `ops.Coo` in `row_ids`."""
    if isinstance(row_ids, Coo) or (isinstance(row_ids, tuple) and col_ids is None and gains is None):
        if col_ids is not None or gains is not None:
            raise ValueError(f"{where}: give either an ops.Coo or row_ids, col_ids and gains, not both")
        row_ids, col_ids, gains, carried = split_coo(row_ids)
        if sample_count is None:
            sample_count = carried
    elif col_ids is None or gains is None:
        raise ValueError(f"{where}: col_ids and gains are required (or pass one ops.Coo)")
    if sample_count is None:
        raise ValueError(
            f"{where}: sample_count is required: pass the batch's sample count (an ops.Coo from "
            "make_dataset(output='coo') carries it; max(row_ids) + 1 would count a padded COO's padding row)"
        )
    return row_ids, col_ids, gains, sample_count


def _sample_count(sample_count, where):
    if isinstance(sample_count, tf.Tensor):
        if sample_count.shape.rank != 0 or not sample_count.dtype.is_integer:
            raise ValueError(f"{where}: sample_count must be an int scalar, got {sample_count}")
        return sample_count if sample_count.dtype == tf.int32 else tf.cast(sample_count, tf.int32)
    if int(sample_count) != sample_count or sample_count < 0:
        raise ValueError(f"{where}: sample_count must be a non-negative int, got {sample_count!r}")
    return int(sample_count)
