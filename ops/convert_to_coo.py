"""`convert_to_coo`: TensorFlow's ConvertToCooTensor semantics on CPU and GPU with stock ops.

The pip build of TensorFlow registers the `ConvertToCooTensor` op (the TPU
SparseCore input step) but ships no kernel for it. This module computes the
same result with ops that have CPU and GPU kernels, keeping its two fast
paths: a single weight shared by every id is never expanded to an N-element
array (a row's scale comes from its id count), and the "sum" combiner
computes no scale. Ragged batches whose rows hold at most one id (one-hot
features with missing values) skip run detection and merging altogether:
their rows come from the row lengths.
"""

from __future__ import annotations

import copy

import numpy as np
import tensorflow as tf

from ops import _coo_core as core
from ops._coo_checks import ID_DTYPES, Checks, as_tensor, first_true, label, require, scope_name, static_count
from ops.coo import Coo

__all__ = ["convert_to_coo", "COMBINERS"]

COMBINERS = ("sum", "mean", "sqrtn")


# Plain TF ops and Python control flow on static facts only: nothing for autograph to convert,
# and converting it would multiply the tracing time.
@tf.autograph.experimental.do_not_convert
def convert_to_coo(
    indices_or_row_splits,
    values,
    weights,
    *,
    sample_count: int | tf.Tensor,
    combiner: str = "sum",
    validate: bool = True,
    name: str | None = None,
) -> Coo:
    """Turns a dense, sparse or ragged id batch into COO with the combiner folded into gains.

    Args:
      indices_or_row_splits: selects the input kind.
        - an empty 1-D tensor: dense input, exactly one id per sample (id i
          belongs to sample i), so N must equal `sample_count`;
        - an int `[N, 2]` tensor of 2-D SparseTensor indices: the row is
          column 0; rows must be non-decreasing and in `[0, sample_count)`;
        - an int 1-D `row_splits` of length `sample_count + 1` (ragged input):
          starts at 0, non-decreasing, ends at N.
      values: int32 or int64 ids, `[N]`.
      weights: float32 with N elements, or exactly one element (a scalar or
        `[1]`; a Python float is accepted) meaning every id has that weight.
        A single weight is never expanded to an N-element array: the output
        gains are written straight from it (or from its row-scaled value).
      sample_count: number of samples S, a Python int or an int scalar tensor.
      combiner: "sum", "mean" or "sqrtn".
      validate: run the data checks above (set False only for input that is
        known to be valid, such as a validated `CsrBatch`).
      name: feature name, used in error messages and the name scope.

    Returns:
      An `ops.Coo(row_ids, col_ids, gains, sample_count)`: the three arrays
      all `[M]` with M <= N, in input order: row_ids int32, col_ids with the
      dtype of `values`, gains float32; sample_count as given (a Python int
      when known while tracing, else an int32 scalar tensor).
      Consecutive ids that are equal and in the same row become one entry
      whose gain is the sum of their weights (adjacent duplicates only: this
      is not a full dedup). For "mean" each row r is then scaled by
      `1 / sum(w)` and for "sqrtn" by `1 / sqrt(sum(w^2))`, both over ALL the
      row's weights before merging, and 0 where that sum is 0. "sum" computes
      no scale at all.
      Non-finite weights are not errors: NaN and inf propagate by IEEE
      arithmetic into their own entry ("sum") or their row's gains ("mean",
      "sqrtn", where an inf weight makes the row's scale 0 and its gains NaN);
      other rows are unaffected.

    Raises:
      ValueError: unknown combiner, wrong dtype or rank, or a length mismatch
        or wrong row_splits length visible from static shapes.
      tf.errors.InvalidArgumentError: the same mismatches found at run time,
        unsorted or out-of-range sparse rows, bad row_splits; the message names
        the check and the first offending row or position.

    Runs eagerly, inside `tf.function` and inside `tf.data.Dataset.map`. Every
    op has a CPU and a GPU kernel, and on a GPU all N-sized data stays in
    device memory; the host only reads scalars: each check's verdict, whether
    any row holds more than one id and whether any ids merge (conds), and how
    many entries remain (`tf.where`), which
    a data-dependent output length cannot avoid. For the same reason it is
    not for `jit_compile=True` functions: pad its result with `ops.pad_coo`.

    Example:
      >>> rows, cols, gains, samples = convert_to_coo(
      ...     tf.constant([0, 3, 3, 4], tf.int64), tf.constant([7, 7, 2, 5]), 1.0,
      ...     sample_count=3, combiner="mean")
      >>> rows.numpy().tolist(), cols.numpy().tolist(), gains.numpy().tolist()
      ([0, 0, 2], [7, 2, 5], [0.6666666865348816, 0.3333333432674408, 1.0])
    """
    where = label("convert_to_coo", name)
    if combiner not in COMBINERS:
        raise ValueError(f"{where}: unknown combiner {combiner!r}; expected one of {COMBINERS}")
    with tf.name_scope(scope_name(name, "convert_to_coo")):
        count = static_count(sample_count, "sample_count", where)
        call = _Call(
            values=_ids(values, where),
            weights=_weights(weights, where),
            count=count,
            combiner=combiner,
            validate=validate,
            where=where,
        )
        index = _index(indices_or_row_splits, where)
        kind = call.kind_of(index)
        if kind is not None:
            rows, cols, gains = call.by_weights(kind, index)
            return Coo(rows, cols, gains, count)
        # A rank-1 index of unknown size: empty means dense, anything else is row_splits
        # (row_splits always has sample_count + 1 >= 1 elements).
        rows, cols, gains = core.cond(
            tf.equal(tf.size(core.as_bits(index)), 0),
            lambda index, values: call.with_values(values).by_weights("dense", index),
            lambda index, values: call.with_values(values).by_weights("ragged", index),
            index,
            call.values,
        )
        return Coo(rows, cols, gains, count)


def _ids(values, where: str) -> tf.Tensor:
    values = as_tensor(values, tf.int64)
    if values.dtype not in ID_DTYPES:
        raise ValueError(f"{where}: values must be int32 or int64 ids, got {values.dtype.name}")
    if values.shape.rank is not None and values.shape.rank != 1:
        raise ValueError(f"{where}: values must be 1-D, got shape {values.shape}")
    return tf.ensure_shape(values, [None]) if values.shape.rank is None else values


def _weights(weights, where: str) -> tf.Tensor:
    if isinstance(weights, (tf.Tensor, tf.Variable)):
        if weights.dtype != tf.float32:
            raise ValueError(f"{where}: weights must be float32, got {weights.dtype.name}")
    elif isinstance(weights, np.ndarray) and weights.dtype.kind == "f":
        weights = tf.convert_to_tensor(weights.astype(np.float32, copy=False))
    else:
        try:
            weights = tf.convert_to_tensor(weights, dtype=tf.float32)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: weights must be float32 values, got {weights!r}") from err
    if weights.shape.rank not in (None, 0, 1):
        raise ValueError(f"{where}: weights must be a scalar or 1-D, got shape {weights.shape}")
    return tf.reshape(weights, [-1])


def _index(indices_or_row_splits, where: str) -> tf.Tensor:
    index = as_tensor(indices_or_row_splits, tf.int64)
    if index.dtype not in ID_DTYPES:
        raise ValueError(f"{where}: indices_or_row_splits must be int32 or int64, got {index.dtype.name}")
    if index.shape.rank not in (1, 2):
        raise ValueError(
            f"{where}: indices_or_row_splits must be 1-D (empty for dense input, or row_splits) "
            f"or [N, 2] sparse indices, got shape {index.shape}"
        )
    return index


class _Call:
    """One convert_to_coo call: its checked arguments and the per-kind conversions."""

    def __init__(self, *, values, weights, count, combiner, validate, where):
        self.values = values
        self.weights = weights
        self.count = count
        self.combiner = combiner
        self.validate = validate
        self.where = where
        # Sizes and shapes are taken of uint32 bits: for int32 input their GPU kernels read host memory.
        self.n = tf.size(core.as_bits(values))
        self.n_static = values.shape[0]

    def with_values(self, values: tf.Tensor) -> _Call:
        """The same call on `values` as received inside a cond branch."""
        other = copy.copy(self)
        other.values = values
        return other

    def kind_of(self, index: tf.Tensor) -> str | None:
        """The input's kind from static shapes: "dense", "sparse" or "ragged"; None if only the data can tell."""
        n, count, where = self.n_static, self.count, self.where
        if index.shape.rank == 2:
            length, width = index.shape
            if width is not None and width != 2:
                raise ValueError(f"{where}: sparse indices must be [N, 2], got shape {index.shape}")
            if length is not None and n is not None and length != n:
                raise ValueError(f"{where}: {length} sparse indices but {n} values; they must match")
            return "sparse"
        size = index.shape[0]
        if size is None:
            return None
        if size == 0:
            if n is not None and isinstance(count, int) and n != count:
                raise ValueError(
                    f"{where}: dense input needs exactly one id per sample: {n} values for "
                    f"sample_count={count}"
                )
            return "dense"
        if isinstance(count, int) and size != count + 1:
            raise ValueError(
                f"{where}: row_splits has {size} entries; expected sample_count + 1 = {count + 1}"
            )
        return "ragged"

    def by_weights(self, kind: str, index: tf.Tensor):
        """Chooses the single-weight or per-id path, statically when the weights' size is known."""
        size = self.weights.shape[0]
        if size == 1:
            return self.convert(kind, index, tf.reshape(self.weights, []), scalar=True)
        n = self.n_static
        if size is not None and n is not None:
            if size != n:
                raise ValueError(
                    f"{self.where}: weights has {size} elements but there are {n} values; "
                    "expected 1 or the same number"
                )
            return self.convert(kind, index, self.weights, scalar=False)
        w_size = tf.size(self.weights)
        check = require(
            tf.logical_or(tf.equal(w_size, 1), tf.equal(w_size, self.n)),
            f"{self.where}: check weights_length failed: weights must have 1 element or one per value",
        )
        with tf.control_dependencies([check] if check is not None else []):
            if size is not None:  # known, but not 1: the per-id path
                return self.convert(kind, index, self.weights, scalar=False)
            return core.cond(
                tf.equal(w_size, 1),
                lambda index, values: self.with_values(values).convert(
                    kind, index, tf.reshape(self.weights[:1], []), scalar=True
                ),
                lambda index, values: self.with_values(values).convert(
                    kind, index, self.weights, scalar=False
                ),
                index,
                self.values,
            )

    def convert(self, kind: str, index: tf.Tensor, w: tf.Tensor, scalar: bool):
        checks = Checks()
        if kind == "dense":
            self._check_dense(checks)
            # An int64 range: TensorFlow keeps an int32 range in host memory on a GPU.
            positions, gains = checks.guard(tf.range(tf.cast(self.n, tf.int64)), self._one_id_gains(w, scalar))
            return tf.cast(positions, tf.int32), self.values, gains
        if kind == "sparse":
            rows, row_changes, ids_per_row = self._sparse_rows(checks, index)
            return self._merge(rows, row_changes, ids_per_row, w, scalar, force_first=True)
        splits, ids_per_row = self._checked_splits(checks, index)
        # At most one id per row (one-hot features with missing values): rows come from the
        # row lengths with S-sized work, and the N-sized run detection and merging are skipped.
        return core.cond(
            tf.reduce_all(ids_per_row <= 1),
            lambda values: self.with_values(values)._one_per_row(ids_per_row, w, scalar),
            lambda values: self.with_values(values)._ragged_merge(splits, ids_per_row, w, scalar),
            self.values,
        )

    def _merge(self, rows, row_changes, ids_per_row, w, scalar: bool, *, force_first: bool):
        is_start = core.run_starts(row_changes, self.values, force_first=force_first)
        if scalar:
            # The combiner folds into one gain per row, applied while merging.
            per_row = None if self.combiner == "sum" else core.row_unit_gain(ids_per_row(), w, self.combiner)
            return core.merge_adjacent(rows, self.values, is_start, w, scalar_weight=True, per_row=per_row)
        out_rows, out_values, gains = core.merge_adjacent(rows, self.values, is_start, w, scalar_weight=False)
        if self.combiner != "sum":
            scale = core.row_scale_per_id(rows, w, out_rows, gains, self.count, self.combiner)
            gains = gains * tf.gather(scale, out_rows)
        return out_rows, out_values, gains

    def _ragged_merge(self, splits, ids_per_row, w, scalar: bool):
        rows, row_changes = core.ragged_rows(splits, tf.size(core.as_bits(self.values)))
        return self._merge(rows, row_changes, lambda: ids_per_row, w, scalar, force_first=False)

    def _one_per_row(self, ids_per_row, w, scalar: bool):
        rows = tf.cast(tf.reshape(tf.where(ids_per_row > 0), [-1]), tf.int32)  # 8N, then 4N
        return rows, self.values, self._one_id_gains(w, scalar)

    def _one_id_gains(self, w, scalar: bool) -> tf.Tensor:
        """float32 [N] gains when no row holds more than one id: nothing merges, a row's weight sum is its weight."""
        if self.combiner != "sum":
            w = core.row_unit_gain(1.0, w, self.combiner)
        return tf.fill(tf.shape(core.as_bits(self.values)), w) if scalar else w  # 4N single weight, 0 per-id "sum"

    def _check_dense(self, checks: Checks) -> None:
        if self.validate and not (self.n_static is not None and isinstance(self.count, int)):
            checks.add(
                lambda: tf.equal(self.n, self.count),
                f"{self.where}: check dense_length failed: dense input needs exactly one id per "
                "sample (len(values) == sample_count)",
            )

    def _sparse_rows(self, checks: Checks, index: tf.Tensor):
        where, n = self.where, self.n
        if self.validate:
            if index.shape[1] is None:
                checks.add(
                    lambda: tf.equal(tf.shape(core.as_bits(index))[1], 2),
                    f"{where}: check indices_shape failed: sparse indices must be [N, 2]",
                )
            if index.shape[0] is None or self.n_static is None:
                checks.add(
                    lambda: tf.equal(tf.shape(core.as_bits(index))[0], n),
                    f"{where}: check indices_length failed: one sparse index per value is needed",
                )
        # Sliced as uint32 bits when int32: int32 slices run in host memory on a GPU.
        first_column = core.as_bits(index)[:, 0]
        if self.validate:
            # Compared as int64, for the same reason.
            column = tf.cast(_signed(first_column), tf.int64)
            falls = column[1:] < column[:-1]
            checks.add(
                lambda: tf.logical_not(tf.reduce_any(falls)),
                f"{where}: check rows_sorted failed: sparse indices must be sorted by row "
                "(column 0 non-decreasing)",
                lambda: first_true(falls) + 1,
            )
            count = tf.cast(self.count, tf.int64)
            bound = f"={self.count}" if isinstance(self.count, int) else ""
            # Sorted rows are in range when the first and the last are.
            checks.add(
                lambda: tf.logical_and(tf.reduce_all(column[:1] >= 0), tf.reduce_all(column[-1:] < count)),
                f"{where}: check rows_in_range failed: sparse rows must be in [0, sample_count{bound})",
                lambda: first_true(tf.logical_or(column < 0, column >= count)),
            )
        (first_column,) = checks.guard(first_column)
        rows = tf.cast(_signed(first_column), tf.int32)
        return rows, core.sorted_rows_changes(first_column), lambda: core.count_values(rows, self.count)

    def _checked_splits(self, checks: Checks, splits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(row_splits int64 [S + 1], ids_per_row int64 [S]), both guarded by the checks."""
        where, n, count = self.where, self.n, self.count
        # int64 throughout: int32 comparisons and slices run in host memory on a GPU.
        splits = tf.cast(splits, tf.int64)
        # The row lengths serve the sortedness check too: slices cost more than the arithmetic.
        ids_per_row = splits[1:] - splits[:-1]  # 8S
        if self.validate:
            if not (splits.shape[0] is not None and isinstance(count, int)):
                checks.add(
                    lambda: tf.equal(tf.size(splits), count + 1),
                    f"{where}: check row_splits_length failed: row_splits must have sample_count + 1 entries",
                )
            n_of_splits = tf.cast(n, tf.int64)
            falls = ids_per_row < 0
            checks.add(
                lambda: tf.reduce_all(tf.equal(splits[:1], 0)),
                f"{where}: check row_splits_start failed: row_splits[0] must be 0",
            )
            checks.add(
                lambda: tf.logical_not(tf.reduce_any(falls)),
                f"{where}: check row_splits_sorted failed: row_splits must be non-decreasing",
                lambda: first_true(falls),
                "row",
            )
            checks.add(
                lambda: tf.reduce_all(tf.equal(splits[-1:], n_of_splits)),
                f"{where}: check row_splits_end failed: row_splits must end at the number of values",
            )
        return checks.guard(splits, ids_per_row)


def _signed(x: tf.Tensor) -> tf.Tensor:
    """uint32 bits back to int32 (no copy); int64 unchanged."""
    return tf.bitcast(x, tf.int32) if x.dtype == tf.uint32 else x
