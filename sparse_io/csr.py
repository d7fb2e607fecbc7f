"""The sparse batch type every stage reads and writes: CSR (the COO the ops consume is built from it).

A `CsrBatch` is what an Arrow list column already is (offsets + child
values), so readers, Beam transforms and the tf.data stage can hand the
same buffers along. Weights are either one float32 per id or a single
Python float standing for all of them: the scalar-weight fast path, where no
per-id weight array exists anywhere.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = ["CsrBatch", "SparseValidationError"]

_ID_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


class SparseValidationError(ValueError):
    """A sparse batch broke one of its invariants.

    The message names the feature, the check that failed and the first
    offending row or position.
    """


def _where(feature: str | None) -> str:
    return f"feature {feature!r}" if feature else "sparse batch"


@dataclasses.dataclass(frozen=True, eq=False)
class CsrBatch:
    """A batch of variable-length id lists in CSR form.

    Attributes:
      row_splits: int64 `[num_rows + 1]`, starts at 0, non-decreasing, ends at
        nnz. Row r holds `values[row_splits[r]:row_splits[r + 1]]`.
      values: int32 or int64 ids, `[nnz]`.
      weights: float32 `[nnz]`, or a Python float meaning "every id has this
        weight" (default 1.0; then no per-id array is ever allocated).
      num_rows: number of rows; derived from `row_splits` when omitted.

    Construction converts nothing: arrays are kept as given (views of Arrow
    buffers stay views). Call `validate()` to check the invariants.

    Example:
      >>> b = CsrBatch(np.array([0, 2, 2, 3]), np.array([7, 9, 7]))
      >>> b.num_rows, b.nnz, b.has_scalar_weight
      (3, 3, True)
      >>> b.row(0).tolist()
      [7, 9]
    """

    row_splits: np.ndarray
    values: np.ndarray
    weights: np.ndarray | float = 1.0
    num_rows: int | None = None

    def __post_init__(self) -> None:
        derived = len(self.row_splits) - 1
        if self.num_rows is None:
            object.__setattr__(self, "num_rows", derived)
        elif self.num_rows != derived:
            raise SparseValidationError(
                f"sparse batch: num_rows={self.num_rows} but row_splits has "
                f"{len(self.row_splits)} entries (expected num_rows + 1)"
            )
        if not isinstance(self.weights, np.ndarray):
            object.__setattr__(self, "weights", float(self.weights))

    @property
    def nnz(self) -> int:
        """The number of ids in the batch (all rows together)."""
        return int(self.values.shape[0])

    @property
    def has_scalar_weight(self) -> bool:
        """True when `weights` is one float standing for every id (no per-id array)."""
        return not isinstance(self.weights, np.ndarray)

    def row(self, r: int) -> np.ndarray:
        """The ids of row `r` (a view)."""
        return self.values[self.row_splits[r] : self.row_splits[r + 1]]

    def row_lengths(self) -> np.ndarray:
        """int64 `[num_rows]`: ids per row."""
        return np.diff(self.row_splits)

    def value_rowids(self) -> np.ndarray:
        """int64 `[nnz]`: the row of each id."""
        return np.repeat(np.arange(len(self.row_splits) - 1, dtype=np.int64), self.row_lengths())

    def weights_array(self) -> np.ndarray:
        """float32 `[nnz]` weights; materialises the scalar (use sparingly)."""
        if isinstance(self.weights, np.ndarray):
            return self.weights
        return np.full(self.nnz, self.weights, dtype=np.float32)

    def validate(self, feature: str | None = None, vocabulary_size: int | None = None) -> CsrBatch:
        """Checks every invariant; returns self so it can be chained.

        Raises:
          SparseValidationError: naming `feature`, the check and the first
            offending row or position.
        """
        where = _where(feature)
        splits = np.asarray(self.row_splits)
        if splits.ndim != 1 or splits.shape[0] < 1:
            raise SparseValidationError(f"{where}: row_splits must be 1-D with at least one entry")
        if splits.dtype != np.int64:
            raise SparseValidationError(f"{where}: row_splits dtype is {splits.dtype}, expected int64")
        if splits[0] != 0:
            raise SparseValidationError(f"{where}: row_splits[0] is {splits[0]}, expected 0")
        steps = np.diff(splits)
        if steps.size and steps.min() < 0:
            bad = int(np.argmax(steps < 0))
            raise SparseValidationError(
                f"{where}: row_splits decreases at row {bad} ({splits[bad]} -> {splits[bad + 1]})"
            )
        if splits[-1] != self.nnz:
            raise SparseValidationError(
                f"{where}: row_splits ends at {splits[-1]} but there are {self.nnz} values"
            )
        if self.values.ndim != 1 or self.values.dtype not in _ID_DTYPES:
            raise SparseValidationError(
                f"{where}: values must be 1-D int32 or int64, got {self.values.dtype} "
                f"with shape {self.values.shape}"
            )
        if self.nnz:
            negative = self.values < 0
            if negative.any():
                pos = int(np.argmax(negative))
                raise SparseValidationError(
                    f"{where}: id {self.values[pos]} at position {pos} (row "
                    f"{self._row_of(pos)}) is negative"
                )
            if vocabulary_size is not None:
                too_big = self.values >= vocabulary_size
                if too_big.any():
                    pos = int(np.argmax(too_big))
                    raise SparseValidationError(
                        f"{where}: id {self.values[pos]} at position {pos} (row "
                        f"{self._row_of(pos)}) is >= vocabulary size {vocabulary_size}"
                    )
        w = self.weights
        if not isinstance(w, np.ndarray):
            if not math.isfinite(w):
                raise SparseValidationError(f"{where}: scalar weight {w} is not finite")
        else:
            if w.ndim != 1 or w.shape[0] != self.nnz:
                raise SparseValidationError(
                    f"{where}: weights length {w.shape[0] if w.ndim else 'scalar array'} "
                    f"does not match {self.nnz} values"
                )
            if w.dtype != np.float32:
                raise SparseValidationError(f"{where}: weights dtype is {w.dtype}, expected float32")
            finite = np.isfinite(w)
            if not finite.all():
                pos = int(np.argmin(finite))
                raise SparseValidationError(
                    f"{where}: weight {w[pos]} at position {pos} (row {self._row_of(pos)}) "
                    "is NaN or infinite"
                )
        return self

    def _row_of(self, position: int) -> int:
        return int(np.searchsorted(self.row_splits, position, side="right") - 1)

    def equals(self, other: CsrBatch) -> bool:
        """Exact equality of rows, ids and weights (scalar vs array compared by value)."""
        if self.num_rows != other.num_rows or self.nnz != other.nnz:
            return False
        if not np.array_equal(self.row_splits, other.row_splits):
            return False
        if not np.array_equal(self.values, other.values):
            return False
        if self.has_scalar_weight and other.has_scalar_weight:
            return self.weights == other.weights
        return np.array_equal(self.weights_array(), other.weights_array())
