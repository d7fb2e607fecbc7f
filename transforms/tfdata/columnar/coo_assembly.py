"""A Parquet or Arrow batch's sparse groups as COO, converted while the batch is assembled.

The reader holds each batch's CSR (as Arrow buffers, or numpy views of
them), so for output="coo" it converts there (natively from the buffers,
`native_batch`, or `numpy_coo`, the rule of `ops.convert_to_coo`) and hands
TensorFlow finished COO arrays. The ids are copied once, into the arena
(twice when shuffled rows of a multi-id feature must be gathered before
merging).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from transforms.tfdata.columnar.batch_arrays import Arena, gather_index
from transforms.tfdata.columnar.native_batch import PieceRows, group_descriptors, lists_room, lists_to_coo
from transforms.tfdata.columnar.numpy_coo import native_available, native_coo_into, one_id_gains, piece_coo
from transforms.tfdata.core.columns import Column
from transforms.tfdata.core.csr_group import CsrGroup

__all__ = ["assemble_coo"]


def assemble_coo(
    pieces,
    groups: Sequence[Sequence[Column]],
    combiners: Mapping[str, str],
    tail: Sequence[tuple[int, np.dtype]],
    piece_rows: PieceRows | None = None,
) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
    """The COO arrays of every group of a batch, and the arena arrays asked for in `tail`.

    `pieces` are the batch's `(Loaded, rows)`. Per group, its features end to
    end: row_ids int32 (the row in the batch), col_ids, gains float32, and
    the entries per feature, int64 `[F]`. A group's features share the
    combiner of its first.

    Each group is written by the first of these that applies, into one
    arena: given `piece_rows` (the pieces as `native_batch` takes them) and
    units that hold the group's Arrow buffers, natively from those buffers
    (`_FromBuffers`); for a group whose features hold at most one id per
    row in every unit of the batch (one-hot, as Criteo's), for all its
    features at once (`_OneHot`: no merge can happen, so the entries are
    just the rows that have an id); by the native CSR kernel where it runs
    (`_Native`); else by `numpy_coo.piece_coo`, the reference of them all.
    The native ways leave unused room after the entries (merges give fewer
    entries than ids), which the returned views do not include.
    """
    # Per group: a _FromBuffers, _OneHot or _Native, or per feature [(row offset, rows, ids source, gains)].
    planned: list = []
    sizes: list[tuple[int, np.dtype]] = []
    for key, group in enumerate(groups):
        combiner = combiners.get(group[0].name, "sum")
        plan, total = _plan_group(pieces, piece_rows, key, group, combiner)
        planned.append(plan)
        sizes += [(total, np.dtype(np.int32)), (total, np.dtype(group[0].dtype)), (total, np.dtype(np.float32))]
        sizes.append((len(group), np.dtype(np.int64)))
    arrays = iter(Arena([*sizes, *tail]).arrays)
    out: list[list[np.ndarray]] = []
    for plan in planned:
        rows, cols, gains, counts = next(arrays), next(arrays), next(arrays), next(arrays)
        if isinstance(plan, _OneHot):
            plan.fill(pieces, rows, cols, gains, counts)
            out.append([rows, cols, gains, counts])
            continue
        if isinstance(plan, (_Native, _FromBuffers)):
            used = plan.fill(rows, cols, gains, counts)
            # The arena holds room for every id; the entries are its first `used`.
            out.append([rows[:used], cols[:used], gains[:used], counts])
            continue
        at = 0
        for f, items in enumerate(plan):
            first = at
            for offset, item_rows, (ids, where), item_gains in items:
                seg = slice(at, at + len(item_rows))
                np.add(item_rows, np.int32(offset), out=rows[seg], casting="unsafe")
                if where is None:
                    np.copyto(cols[seg], ids)
                else:
                    np.take(ids, where, out=cols[seg], mode="clip")
                if isinstance(item_gains, np.ndarray):
                    np.copyto(gains[seg], item_gains)
                else:
                    gains[seg] = item_gains
                at += len(item_rows)
            counts[f] = at - first
        out.append([rows, cols, gains, counts])
    return out, list(arrays)


def _plan_group(pieces, piece_rows: PieceRows | None, key: int, group: Sequence[Column], combiner: str):
    """`(plan, entries the arena must hold)` for one group: the first of the ways `assemble_coo` lists that applies."""
    if piece_rows is not None:
        from_buffers = _FromBuffers.plan(piece_rows, group, combiner)
        if from_buffers is not None:
            return from_buffers, from_buffers.room
    one_hot = _OneHot.plan(pieces, key, group, combiner)
    if one_hot is not None:
        return one_hot, one_hot.total
    if native_available(np.dtype(group[0].dtype)):
        native = _Native.plan(pieces, group, combiner)
        return native, native.room
    plan: list[list] = [[] for _ in group]
    offset = 0
    for loaded, rows in pieces:
        for f, c in enumerate(group):
            lengths, ids, weights = _piece_csr(loaded.columns[c.name], rows)
            entry_rows, entry_ids, starts, entry_gains = piece_coo(lengths, ids, weights, combiner)
            plan[f].append((offset, entry_rows, (entry_ids, starts), entry_gains))
        offset += (rows.stop - rows.start) if isinstance(rows, slice) else len(rows)
    return plan, sum(len(item[1]) for items in plan for item in items)


@dataclasses.dataclass
class _FromBuffers:
    """A batch's entries of a group written natively from its units' Arrow buffers (`native_batch`).

    The room is every id of the pieces' rows (merges can only give fewer
    entries); the entries are the arrays' first part, as for `_Native`.
    """

    descriptors: tuple[np.ndarray, np.ndarray]
    piece_rows: PieceRows
    combiner: str
    names: tuple[str, ...]
    room: int

    @classmethod
    def plan(cls, piece_rows: PieceRows, group: Sequence[Column], combiner: str) -> _FromBuffers | None:
        """The plan, or None where some unit lacks a feature's buffers.

        Raises:
          SparseValidationError: a row's offsets decrease or pass the end of its ids.
        """
        names = tuple(c.name for c in group)
        descriptors = group_descriptors(piece_rows, names)
        if descriptors is None:
            return None
        return cls(descriptors, piece_rows, combiner, names, lists_room(descriptors, piece_rows, names))

    def fill(self, rows: np.ndarray, cols: np.ndarray, gains: np.ndarray, counts: np.ndarray) -> int:
        return lists_to_coo(self.descriptors, self.piece_rows, self.combiner, rows, cols, gains, counts, self.names)


@dataclasses.dataclass
class _Native:
    """A batch's entries of a multi-id group, converted by the native kernel straight into the arena.

    Each feature's pieces (their rows' starts and lengths in the unit, a
    slice or shuffled) are converted in order, each conversion writing where
    the last ended, so the group's arrays need room for every id (the most
    a conversion gives) and hold the entries in their first part.
    """

    combiner: str
    # Per feature, its pieces: (row offset in the batch, row starts, row lengths, the unit's column).
    features: list[list[tuple[int, np.ndarray, np.ndarray, CsrGroup]]]

    @classmethod
    def plan(cls, pieces, group: Sequence[Column], combiner: str) -> _Native:
        features: list[list] = [[] for _ in group]
        offset = 0
        for loaded, rows in pieces:
            for f, c in enumerate(group):
                sparse = loaded.columns[c.name]
                splits = sparse.row_splits
                if isinstance(rows, slice):
                    starts, ends = splits[rows.start : rows.stop], splits[rows.start + 1 : rows.stop + 1]
                else:
                    # Shuffled rows are read where they lie in the unit: no gathered copy of their ids.
                    starts, ends = splits[rows], splits[rows + 1]
                features[f].append((offset, starts, ends - starts, sparse))
            offset += (rows.stop - rows.start) if isinstance(rows, slice) else len(rows)
        return cls(combiner, features)

    @property
    def room(self) -> int:
        return sum(int(lengths.sum()) for items in self.features for _, _, lengths, _ in items)

    def fill(self, rows: np.ndarray, cols: np.ndarray, gains: np.ndarray, counts: np.ndarray) -> int:
        """Writes every feature's entries, feature after feature; returns how many were written."""
        at = 0
        for f, items in enumerate(self.features):
            first = at
            for offset, starts, lengths, sparse in items:
                at += native_coo_into(
                    lengths, sparse.values, sparse.weights, self.combiner, rows[at:], cols[at:], gains[at:],
                    row_offset=offset, starts=starts,
                )
            counts[f] = at - first
        return at


@dataclasses.dataclass
class _OneHot:
    """A batch's entries of a group of one-hot features (at most one id per row in every unit).

    No merge can happen, so a feature's entries in a piece of contiguous rows are its ids
    between two splits, each at the row `Loaded.one_hot_group` gives: three slice copies per
    feature and piece and one pass over all rows, where masking and offsetting each feature's
    entries separately costs several times more Python per Criteo batch. Shuffled pieces take
    the rows that hold an id, feature by feature.
    """

    group: Sequence[Column]
    combiner: str
    units: list[tuple[np.ndarray, list[np.ndarray]]]  # per piece: its unit's `Loaded.one_hot_group`
    masks: list[list[np.ndarray] | None]  # per piece: per feature, bool over the piece's rows (shuffled pieces)
    counts: list[list[int]]  # per piece: per feature, its entries in that piece

    @classmethod
    def plan(cls, pieces, key: int, group: Sequence[Column], combiner: str) -> _OneHot | None:
        """The plan, or None when some unit of the batch has a feature with two ids in a row."""
        units, masks, counts = [], [], []
        for loaded, rows in pieces:
            unit = loaded.one_hot_group(key, group)
            if unit is None:
                return None
            units.append(unit)
            if isinstance(rows, slice):
                splits = [loaded.columns[c.name].row_splits for c in group]
                masks.append(None)
                counts.append([int(s[rows.stop]) - int(s[rows.start]) for s in splits])
            else:
                chosen = [present[rows] for present in unit[0]]
                masks.append(chosen)
                counts.append([int(np.count_nonzero(m)) for m in chosen])
        return cls(group, combiner, units, masks, counts)

    @property
    def total(self) -> int:
        return sum(sum(c) for c in self.counts)

    def fill(self, pieces, rows: np.ndarray, cols: np.ndarray, gains: np.ndarray, counts: np.ndarray) -> None:
        """Writes the entries: feature after feature, each feature's rows ascending."""
        shifts = []  # (segment, what to add to unit rows to make them batch rows)
        weighted = False
        at = 0
        for f, c in enumerate(self.group):
            offset = 0
            first = at
            for (loaded, piece_rows), unit, masks, piece_counts in zip(pieces, self.units, self.masks, self.counts):
                count = piece_counts[f]
                sparse: CsrGroup = loaded.columns[c.name]
                scalar = sparse.scalar_weight
                seg = slice(at, at + count)
                if masks is None:
                    begin = int(sparse.row_splits[piece_rows.start])
                    source = slice(begin, begin + count)
                    np.copyto(rows[seg], unit[1][f][source])
                    shifts.append((seg, offset - piece_rows.start))
                    np.copyto(cols[seg], sparse.values[source])
                    if not scalar:
                        np.copyto(gains[seg], sparse.weights[source])
                    offset += piece_rows.stop - piece_rows.start
                else:
                    chosen = np.flatnonzero(masks[f])
                    np.add(chosen, offset, out=rows[seg], casting="unsafe")
                    # The id of a row that has one sits at that row's split.
                    where = sparse.row_splits[piece_rows[chosen]]
                    np.take(sparse.values, where, out=cols[seg], mode="clip")
                    if not scalar:
                        np.take(sparse.weights, where, out=gains[seg], mode="clip")
                    offset += len(piece_rows)
                if scalar:
                    gains[seg] = sparse.weights
                weighted = weighted or not scalar or sparse.weights != 1.0
                at += count
            counts[f] = at - first
        if len(pieces) == 1 and shifts:  # one piece of contiguous rows: one pass over every feature
            if shifts[0][1]:
                rows += np.int32(shifts[0][1])
        else:
            for seg, shift in shifts:
                rows[seg] += np.int32(shift)
        # A gain of 1 (every weight 1) stays 1 under every combiner.
        if weighted and self.combiner != "sum":
            gains[:] = one_id_gains(gains, self.combiner)


def _piece_csr(sparse: CsrGroup, rows: slice | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | float]:
    """`(row lengths, ids, weights or the shared float)` of some rows of a group.

    A slice of rows gives views of the group's arrays; an index array gives
    gathered copies.
    """
    splits = sparse.row_splits
    if isinstance(rows, slice):
        sub = splits[rows.start : rows.stop + 1]
        src = slice(int(sub[0]), int(sub[-1]))
        weights = sparse.weights if sparse.scalar_weight else sparse.weights[src]
        return np.diff(sub), sparse.values[src], weights
    starts = splits[rows]
    lengths = splits[rows + 1] - starts
    index = gather_index(starts, lengths, int(lengths.sum()))
    weights = sparse.weights if sparse.scalar_weight else sparse.weights[index]
    return lengths, sparse.values[index], weights
