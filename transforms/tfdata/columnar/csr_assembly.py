"""A Parquet batch's sparse groups as CSR: each group's features end to end in one set of arrays."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transforms.tfdata.columnar.batch_arrays import Arena, gather_index
from transforms.tfdata.core.columns import Column
from transforms.tfdata.core.csr_group import CsrGroup

__all__ = ["assemble_csr"]


def assemble_csr(
    pieces, groups: Sequence[Sequence[Column]], n: int, tail: Sequence[tuple[int, np.dtype]]
) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
    """The CSR arrays of every group of a batch of n rows, and the arena arrays asked for in `tail`.

    `pieces` are the batch's `(Loaded, rows)`. Per group of F features:
    row_splits int64 `[F*n + 1]` (feature f's rows are `f*n .. f*n + n`),
    the ids, and float32 weights when the group is weighted. Numeric arrays
    are 64-byte aligned and freshly allocated in one arena with the `tail`
    arrays (unfilled); string ids are an object array.
    """
    layouts = []  # per group: per feature: per piece layout
    sizes: list[tuple[int, np.dtype]] = []
    for group in groups:
        per_feature = [[_sparse_layout(loaded.columns[c.name], rows) for loaded, rows in pieces] for c in group]
        nnz = [sum(p[2] for p in per_piece) for per_piece in per_feature]
        layouts.append((per_feature, nnz))
        sizes.append((len(group) * n + 1, np.dtype(np.int64)))
        if group[0].dtype != "string":
            sizes.append((sum(nnz), np.dtype(group[0].dtype)))
        if group[0].weighted:
            sizes.append((sum(nnz), np.dtype(np.float32)))
    arrays = iter(Arena([*sizes, *tail]).arrays)
    out: list[list[np.ndarray]] = []
    for group, (per_feature, nnz) in zip(groups, layouts):
        splits = next(arrays)
        ids = next(arrays) if group[0].dtype != "string" else None
        weights = next(arrays) if group[0].weighted else None
        strings, start = [], 0
        for f, (c, per_piece) in enumerate(zip(group, per_feature)):
            stop = start + nnz[f]
            filled = _fill_sparse(
                pieces,
                c.name,
                per_piece,
                splits[f * n : (f + 1) * n + 1],
                None if ids is None else ids[start:stop],
                None if weights is None else weights[start:stop],
                start,
            )
            strings.append(filled)
            start = stop
        if ids is None:
            ids = np.concatenate(strings) if strings else np.zeros(0, dtype=object)
        out.append([splits, ids] + ([weights] if weights is not None else []))
    return out, list(arrays)


def _sparse_layout(sparse: CsrGroup, rows: slice | np.ndarray) -> tuple:
    """`(kind, info, nnz)` of one piece: contiguous rows or gathered rows."""
    splits = sparse.row_splits
    if isinstance(rows, slice):
        sub = splits[rows.start : rows.stop + 1]
        return ("slice", sub, int(sub[-1] - sub[0]))
    starts = splits[rows]
    lengths = splits[rows + 1] - starts
    return ("take", (starts, lengths), int(lengths.sum()))


def _fill_sparse(pieces, name, per_piece, splits, ids, weights, start: int) -> np.ndarray:
    """Writes one sparse column of a batch from its pieces; returns the ids.

    Fills `splits` (`[n + 1]`, counting from `start`) and, when given, `ids`
    and `weights` (preallocated outputs) from the pieces' groups. String ids
    have no preallocated array (`ids` is None): they are gathered and
    returned as one object array.
    """
    splits[0] = start
    row, base = 0, 0
    strings = []
    for (loaded, _rows), (kind, info, count) in zip(pieces, per_piece):
        sparse: CsrGroup = loaded.columns[name]
        if kind == "slice":
            sub = info
            r = len(sub) - 1
            np.subtract(sub[1:], sub[0] - base - start, out=splits[row + 1 : row + 1 + r])
            src = slice(int(sub[0]), int(sub[0]) + count)
            if ids is not None:
                np.copyto(ids[base : base + count], sparse.values[src])
            else:
                strings.append(sparse.values[src])
            if weights is not None:
                np.copyto(weights[base : base + count], sparse.weights[src])
        else:
            starts, lengths = info
            r = len(starts)
            seg = splits[row + 1 : row + 1 + r]
            np.cumsum(lengths, out=seg)
            seg += base + start
            index = gather_index(starts, lengths, count)
            if ids is not None:
                np.take(sparse.values, index, out=ids[base : base + count], mode="clip")
            else:
                strings.append(sparse.values[index])
            if weights is not None:
                np.take(sparse.weights, index, out=weights[base : base + count], mode="clip")
        row += r
        base += count
    if ids is None:
        return np.concatenate(strings) if strings else np.zeros(0, dtype=object)
    return ids
