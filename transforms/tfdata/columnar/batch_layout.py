"""`BatchLayout`: the arrays the Parquet reader hands TensorFlow for one batch, by name.

A `tf.py_function` returns a flat list of tensors, so a batch crosses from
the reader to the graph as one. `BatchLayout` is the one description of
that list: its dtypes (for the py_function), `flatten` on the reader's
side and `unflatten` on the graph's, both over `BatchParts`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from transforms.tfdata.core.columns import DENSE_DTYPES, Column, dense_dtype

__all__ = ["BatchLayout", "BatchParts"]


@dataclasses.dataclass
class BatchParts:
    """One batch of n rows from the Parquet reader, as numpy arrays or tensors.

    Attributes:
      groups: per group of F sparse features, its arrays, features end to
        end. CSR: row_splits int64 `[F*n + 1]` (feature f's rows are
        `f*n .. f*n + n`), ids, and float32 weights when weighted. COO:
        row_ids int32, col_ids, gains float32, and the entries of each
        feature, int64 `[F]`.
      dense: one `[D*n]` block per delivered dense dtype (`BatchLayout.dense_blocks`),
        feature after feature: float32 and float64 with NaN where missing,
        int64 with `MISSING_INT`.
      label: `[n]`, or None without a label.
      rows: n, int64 `[1]`.
      position: the position after this batch, int64 `[4]` (epoch, shard,
        row, fingerprint), as `InputState.from_tensor` reads it.
    """

    groups: list[list[Any]]
    dense: list[Any]
    label: Any | None
    rows: Any
    position: Any


class BatchLayout:
    """The order and dtypes of a Parquet batch's arrays.

    Args:
      columns: the features read; `label`: the label column or None.
      groups: the sparse features laid end to end in one set of arrays, in
        order (each group sharing id dtype and weighting).
      coo: whether the groups are COO (else CSR).

    Example:
      >>> layout = BatchLayout([Column("a", "sparse", "int64"), Column("x", "dense", "float32")], None,
      ...                      [[Column("a", "sparse", "int64")]], coo=False)
      >>> [str(d) for d in layout.dtypes()]
      ['int64', 'int64', 'float32', 'int64', 'int64']
    """

    def __init__(
        self, columns: Sequence[Column], label: Column | None, groups: Sequence[Sequence[Column]], *, coo: bool
    ):
        self.groups = [list(g) for g in groups]
        self.label = label
        self.coo = bool(coo)
        self.dense = [c for c in columns if not c.is_sparse]
        # One block per delivered dtype (float32, float64, int64), each feature after feature.
        self.dense_blocks = [
            (dtype, [c for c in self.dense if dense_dtype(c.dtype) == dtype])
            for dtype in DENSE_DTYPES
            if any(dense_dtype(c.dtype) == dtype for c in self.dense)
        ]

    def group_dtypes(self, group: Sequence[Column]) -> list[np.dtype | str]:
        """The dtypes of one group's arrays ("string" for string ids)."""
        first = group[0]
        if self.coo:
            return [np.dtype(np.int32), np.dtype(first.dtype), np.dtype(np.float32), np.dtype(np.int64)]
        out: list[np.dtype | str] = [np.dtype(np.int64), "string" if first.dtype == "string" else np.dtype(first.dtype)]
        if first.weighted:
            out.append(np.dtype(np.float32))
        return out

    def dtypes(self) -> list[np.dtype | str]:
        """The dtypes of `flatten`'s list, in order."""
        out: list[np.dtype | str] = []
        for group in self.groups:
            out += self.group_dtypes(group)
        out += [np.dtype(dtype) for dtype, _ in self.dense_blocks]
        if self.label is not None:
            out.append(np.dtype(self.label.dtype))
        return out + [np.dtype(np.int64), np.dtype(np.int64)]

    def flatten(self, parts: BatchParts) -> list:
        """The batch as one list: the groups' arrays, the dense blocks, the label, rows, position."""
        flat = [array for arrays in parts.groups for array in arrays]
        flat += parts.dense
        if self.label is not None:
            flat.append(parts.label)
        flat += [parts.rows, parts.position]
        return flat

    def unflatten(self, flat: Sequence) -> BatchParts:
        """The inverse of `flatten`.

        Raises:
          ValueError: `flat` does not have the layout's length.
        """
        sizes = [len(self.group_dtypes(g)) for g in self.groups]
        want = sum(sizes) + len(self.dense_blocks) + (self.label is not None) + 2
        if len(flat) != want:
            raise ValueError(f"BatchLayout.unflatten: expected {want} arrays, got {len(flat)}")
        groups, at = [], 0
        for size in sizes:
            groups.append(list(flat[at : at + size]))
            at += size
        dense = list(flat[at : at + len(self.dense_blocks)])
        at += len(self.dense_blocks)
        label = None
        if self.label is not None:
            label = flat[at]
            at += 1
        return BatchParts(groups, dense, label, flat[at], flat[at + 1])
