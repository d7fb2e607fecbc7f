"""`CsrGroup`: sparse features of one batch laid end to end as one CSR batch.

F features of n rows each are one CSR batch of F*n rows: feature f's row r
is row `f*n + r`. Laid out this way, one conversion (`ops.convert_to_coo`)
or one copy serves every feature of the group, since adjacent duplicates
only ever merge within a row and the combiners scale per row. The Parquet
reader holds each decoded column as a group of one feature (numpy arrays,
views of the Arrow buffers); the tf.data stage holds the features of a
batch that share id dtype, weighting and combiner as one group (tensors).

Weights are either per id (`[nnz]` float32) or one Python float shared by
every id: the shared weight is never expanded to an array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

__all__ = ["CsrGroup"]


class CsrGroup:
    """F sparse features of n rows each, as one CSR batch of F*n rows.

    Args:
      names: the F feature names, in their order in the arrays.
      row_splits: int64 `[F*n + 1]` (numpy or a tensor), from 0; feature f's
        rows are `f*n .. f*n + n`.
      values: the ids `[nnz]` (int32 or int64; an object array of str in the
        Parquet reader's string columns).
      weights: float32 `[nnz]`, or a Python float every id weighs.
      num_rows: n, the rows of each feature (an int or an int scalar tensor);
        derived from the length of `row_splits` when omitted (numpy arrays
        and lists; give it for tensors).

    `CsrGroup.from_ragged` builds a group from per-feature `[n, None]`
    RaggedTensors without concatenating them: the arrays above are made on
    first use, and `features()` hands the RaggedTensors back untouched.

    Example:
      >>> g = CsrGroup(["a", "b"], [0, 2, 2, 3, 4], [7, 9, 7, 1])
      >>> g.num_rows, g.scalar_weight, g.weights
      (2, True, 1.0)
    """

    def __init__(self, names: Sequence[str], row_splits=None, values=None, weights: Any = 1.0, num_rows=None):
        self.names = list(names)
        self._row_splits, self._values, self._weights = row_splits, values, weights
        self._ragged: list[tf.RaggedTensor] | None = None
        self._ragged_weights: list[tf.RaggedTensor] | None = None
        if num_rows is None and row_splits is not None:
            num_rows = (len(row_splits) - 1) // max(len(self.names), 1)
        self.num_rows = num_rows

    @classmethod
    def from_ragged(
        cls,
        names: Sequence[str],
        ids: Sequence[tf.RaggedTensor],
        weights: Sequence[tf.RaggedTensor] | float = 1.0,
    ) -> CsrGroup:
        """A group of `[n, None]` RaggedTensors (ragged_rank 1), not concatenated until used.

        `weights` are RaggedTensors shaped like `ids`, or one float for every
        id; n is the first feature's row count.

        Raises:
          ValueError: no features.
        """
        if not ids:
            raise ValueError("CsrGroup.from_ragged: a group needs at least one feature")
        group = cls(
            names, weights=weights if isinstance(weights, float) else None, num_rows=ids[0].nrows(out_type=tf.int64)
        )
        group._ragged = list(ids)
        if not isinstance(weights, float):
            group._ragged_weights = list(weights)
        return group

    @property
    def scalar_weight(self) -> bool:
        """True when one float stands for every id's weight."""
        return isinstance(self._weights, float) or (self._ragged is not None and self._ragged_weights is None)

    def _concatenate(self) -> None:
        lengths = tf.concat([tf.cast(r.row_lengths(), tf.int64) for r in self._ragged], 0)
        self._row_splits = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(lengths)], 0)
        self._values = tf.concat([r.flat_values for r in self._ragged], 0)
        if self._ragged_weights is not None:
            self._weights = tf.concat([w.flat_values for w in self._ragged_weights], 0)

    @property
    def row_splits(self):
        """int64 `[F*n + 1]` from 0; feature f's rows are `f*n .. f*n + n` (built on first use)."""
        if self._row_splits is None:
            self._concatenate()
        return self._row_splits

    @property
    def values(self):
        """The ids `[nnz]` of every feature, end to end (int32 or int64, or str objects)."""
        if self._values is None:
            self._concatenate()
        return self._values

    @property
    def weights(self):
        """float32 `[nnz]`, or the float every id weighs."""
        if self._weights is None:
            self._concatenate()
        return self._weights

    def features(self, static_rows: int | None = None) -> list[tuple[tf.RaggedTensor, tf.RaggedTensor | None]]:
        """Every feature as `(ids, weights or None)`, RaggedTensors `[n, None]`; a handful of ops in all.

        `static_rows`, when given, is n as the static row count of each.
        """
        if self._ragged is not None:
            weights = self._ragged_weights if self._ragged_weights is not None else [None] * len(self._ragged)
            return list(zip(self._ragged, weights))
        count, n = len(self.names), tf.cast(self.num_rows, tf.int64)
        splits = tf.convert_to_tensor(self.row_splits)
        bounds = tf.gather(splits, tf.range(count + 1, dtype=tf.int64) * n)  # [F + 1]
        starts = tf.reshape(splits[:-1], [count, -1])  # [F, n]
        local = tf.concat([starts, tf.expand_dims(bounds[1:], 1)], 1) - tf.expand_dims(bounds[:-1], 1)
        if static_rows is not None:
            local = tf.ensure_shape(local, [count, static_rows + 1])
        sizes = bounds[1:] - bounds[:-1]
        values = tf.split(self.values, sizes, num=count)
        weights = [None] * count if self.scalar_weight else tf.split(self.weights, sizes, num=count)
        out = []
        for feature_splits, v, w in zip(tf.unstack(local, num=count), values, weights):
            ids = tf.RaggedTensor.from_row_splits(v, feature_splits, validate=False)
            out.append((ids, None if w is None else tf.RaggedTensor.from_row_splits(w, feature_splits, validate=False)))
        return out

    def check_rows(self) -> None:
        """Makes `num_rows` wait for a run-time check that every ragged feature has n rows.

        Raises (at run time):
          tf.errors.InvalidArgumentError: naming the first feature whose row count differs.
        """
        if self._ragged is None:
            return
        checks = [
            tf.debugging.assert_equal(
                r.nrows(out_type=tf.int64),
                self.num_rows,
                message=f"feature {name!r}: check 'batch rows' failed: features of one batch differ in row count",
            )
            for name, r in zip(self.names[1:], self._ragged[1:])
        ]
        with tf.control_dependencies(checks):
            self.num_rows = tf.identity(self.num_rows)
