"""Exact value counts over Arrow arrays, for combiners that count ids.

Strings are counted in a native hash table as they are added
(`sparse_io.token_table.TokenCounter`, where it builds), and so are int64 ids
(`sparse_io.id_counts.IdCounter`, which also does the Misra-Gries step in
place); otherwise a batch is counted with one `pc.value_counts` call (the
reference, and the path for integers: `np.bincount` or `np.unique`). Tables
are summed with a hash aggregation (`Table.group_by`). Summing every new batch
into one big table would cost O(distinct values) per batch, so parts are kept
side by side and merged like a binary counter: a part is folded into its
neighbour only once it has grown to half the neighbour's size, so each value
takes part in O(log n) merges.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io import id_counts, token_table

__all__ = ["CountTable", "list_values"]

_MAX_PARTS = 24
_TEXT_TYPES = (pa.large_string(), pa.large_binary())
_RAW_BUFFER = 1 << 20  # values buffered before counting


def list_values(column: pa.Array, feature: str, transform: str) -> pa.Array:
    """The ids referenced by the rows of a list column (null rows hold none); flat columns as they are.

    Raises:
      ValueError: a null id, naming the feature and its row.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    is_list = pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
    if is_list and not column.null_count:
        offsets = column.offsets
        first = offsets[0].as_py() if len(column) else 0
        values = column.values.slice(first, (offsets[-1].as_py() - first) if len(column) else 0)
    else:
        values = pc.list_flatten(column) if is_list else column
    if values.null_count:
        pos = int(np.argmax(~values.is_valid().to_numpy(zero_copy_only=False)))
        row = pos
        if is_list:
            lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy()
            row = int(np.searchsorted(np.cumsum(lengths), pos, side="right"))
        raise ValueError(f"{transform}: feature {feature!r}: null id in row {row}")
    return values


def _normalize(values: pa.Array) -> pa.Array:
    # One value type per table, and 64-bit offsets so a table of many long
    # strings cannot overflow.
    t = values.type
    if pa.types.is_string(t) or pa.types.is_string_view(t):
        return values.cast(pa.large_string())
    if pa.types.is_binary(t) or pa.types.is_binary_view(t):
        return values.cast(pa.large_binary())
    if pa.types.is_integer(t) and t != pa.int64():
        return values.cast(pa.int64())
    return values


class CountTable:
    """value -> count over everything added or merged; exact.

    Example:
      >>> t = CountTable(); t.add(pa.array(["a", "b", "a"]))
      >>> t.sorted().to_pydict()
      {'value': ['a', 'b'], 'count': [2, 1]}
    """

    def __init__(self) -> None:
        self._parts: list[pa.Table] = []
        self._raw: list[pa.Array] = []
        self._raw_size = 0
        # Strings are counted in a native hash table as they come, where it builds (sparse_io.token_table).
        self._counter: token_table.TokenCounter | None = None
        self._counter_type: pa.DataType | None = None
        # So are null-free int64 values (sparse_io.id_counts); `_parts` then never holds int64 values.
        self._ids: id_counts.IdCounter | None = None

    def add(self, values: pa.Array) -> None:
        if len(values) == 0:
            return
        values = _normalize(values)
        if values.type in _TEXT_TYPES and token_table.available():
            if self._counter is not None and values.type != self._counter_type:
                self._flush_counter()
            if self._counter is None:
                self._counter, self._counter_type = token_table.TokenCounter(), values.type
            self._counter.add(values)
            return
        if values.type == pa.int64() and not values.null_count and id_counts.available():
            self._id_counter().add(values.to_numpy())
            return
        # Batches are counted together once enough values are buffered: one
        # value_counts over many batches instead of a count and a merge each.
        self._raw.append(values)
        self._raw_size += len(values)
        if self._raw_size >= _RAW_BUFFER:
            self._flush()

    def _id_counter(self) -> id_counts.IdCounter:
        if self._ids is None:
            self._ids = id_counts.IdCounter()
        return self._ids

    def _only_ids(self) -> bool:
        """Whether every count is in the native id table (nothing buffered, no other parts)."""
        return self._ids is not None and not (self._parts or self._raw or self._counter is not None)

    def _ids_table(self) -> pa.Table | None:
        """The native id table's counts, values ascending (as the reference's parts), or None."""
        if self._ids is None or not len(self._ids):
            return None
        values, counts = self._ids.export()
        order = np.argsort(values, kind="stable")
        return pa.table({"value": pa.array(values[order]), "count": pa.array(counts[order])})

    def _flush_counter(self) -> None:
        counter, value_type = self._counter, self._counter_type
        self._counter = self._counter_type = None
        if counter is not None and value_type is not None and len(counter):
            self._push(counter.table(value_type))

    def _flush(self) -> None:
        self._flush_counter()
        if not self._raw:
            return
        raw = self._raw[0] if len(self._raw) == 1 else pa.concat_arrays(self._raw)
        self._raw, self._raw_size = [], 0
        self._push(_value_counts(raw))

    def __getstate__(self) -> dict:
        # Ship one table of counts (not raw values), compressed: an accumulator waits in the
        # runner's shuffle as these bytes and is copied once more to be read back, and sorted ids
        # with small counts pack to about 2 bytes an entry instead of 16.
        table = self.table()
        return {"packed": None if table is None else _pack(table)}

    def __setstate__(self, state: dict) -> None:
        self.__init__()
        if state["packed"] is not None:
            self._push(_unpack(state["packed"]))

    def merge(self, other: CountTable) -> None:
        other._flush()
        for part in other._parts:
            self._push(part)
        if other._ids is not None and len(other._ids):
            self._id_counter().add(*other._ids.export())

    def _push(self, part: pa.Table) -> None:
        value = part.column("value")
        if value.type == pa.int64() and not value.null_count and id_counts.available():
            self._id_counter().add(value.to_numpy(), part.column("count").to_numpy())
            return
        self._parts.append(part)
        parts = self._parts
        while len(parts) > 1 and (2 * parts[-1].num_rows >= parts[-2].num_rows or len(parts) > _MAX_PARTS):
            last = parts.pop()
            parts[-1] = _sum(parts[-1], last)

    def table(self) -> pa.Table | None:
        """All counts as one table `(value, count)` with distinct values, or None when empty."""
        self._flush()
        ids = self._ids_table()
        if not self._parts:
            return ids
        while len(self._parts) > 1:
            last = self._parts.pop()
            self._parts[-1] = _sum(self._parts[-1], last)
        return self._parts[0] if ids is None else _sum(self._parts[0], ids)

    def __len__(self) -> int:
        if self._only_ids():
            return len(self._ids)
        table = self.table()
        return 0 if table is None else table.num_rows

    def total(self) -> int:
        self._flush()
        ids = 0 if self._ids is None else int(self._ids.export()[1].sum())
        return ids + int(sum(pc.sum(p.column("count")).as_py() or 0 for p in self._parts))

    def sorted(self, min_count: int = 1, limit: int | None = None) -> pa.Table:
        """`(value, count)` with count >= min_count, by count descending then value ascending."""
        table = self.table()
        if table is None:
            return pa.table({"value": pa.array([], pa.null()), "count": pa.array([], pa.int64())})
        if min_count > 1:
            table = table.filter(pc.greater_equal(table.column("count"), min_count))
        order = pc.sort_indices(table, [("count", "descending"), ("value", "ascending")])
        if limit is not None:
            order = order.slice(0, limit)
        return table.take(order)

    def subtract_and_prune(self, keep: int) -> int:
        """Misra-Gries step: subtract the (keep+1)-th largest count from all, drop counts <= 0.

        Returns the amount subtracted (0 when at most `keep` values are held).
        Each such step removes at least (keep + 1) times that amount of total
        count, so the sum of all amounts is at most total / (keep + 1).
        """
        if self._only_ids():
            return self._ids.prune(keep)
        table = self.table()
        if table is None or table.num_rows <= keep:
            return 0
        self._ids = None  # its counts are in `table`, which replaces every part below
        counts = table.column("count").to_numpy()
        # The (keep+1)-th largest count by selection, not a sort: the counts above it are exactly
        # those that stay positive, and no order among them is needed.
        threshold = int(np.partition(counts, counts.size - keep - 1)[counts.size - keep - 1])
        kept = counts > threshold
        values = table.column("value").filter(pa.array(kept))
        self._parts = [pa.table({"value": values, "count": pa.array(counts[kept] - threshold)})]
        return threshold


def _pack(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _unpack(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all().combine_chunks()


def _value_counts(values: pa.Array) -> pa.Table:
    """`(value, count)` of the distinct values of `values`."""
    if values.type == pa.int64() and not values.null_count:
        ids = values.to_numpy()
        low, high = int(ids.min()), int(ids.max())
        # Hashed or vocabulary ids span a small range: counting by bincount is
        # several times faster than Arrow's hash table, and than a sort while the
        # range is below ~16 ids per value slot (131,072 ids over 2**20 values:
        # 4.7 ms against 11 for np.unique; at 2**22 values the sort wins).
        if low >= 0 and high < max(8 * len(ids), 1 << 16):
            counts = np.bincount(ids, minlength=high + 1)
            present = np.flatnonzero(counts != 0)  # a bool scan: 2.4 ms against 3.2 on the int64 counts
            return pa.table({"value": pa.array(present, pa.int64()), "count": pa.array(counts[present])})
        # Otherwise numpy's vectorised sort beats the hash table too (measured 2-3x on 131,072 ids).
        present, counts = np.unique(ids, return_counts=True)
        return pa.table({"value": pa.array(present, pa.int64()), "count": pa.array(counts.astype(np.int64))})
    counted = pc.value_counts(values)
    return pa.table({"value": counted.field("values"), "count": counted.field("counts")})


def _sum(a: pa.Table, b: pa.Table) -> pa.Table:
    if a.schema.field("value").type != b.schema.field("value").type:
        b = b.set_column(0, "value", b.column("value").cast(a.schema.field("value").type))
    if a.schema.field("value").type == pa.int64():
        return _sum_int64(a, b)
    both = pa.concat_tables([a, b])
    summed = both.group_by("value", use_threads=False).aggregate([("count", "sum")])
    return pa.table({"value": summed.column("value"), "count": summed.column("count_sum")}).combine_chunks()


def _sum_int64(a: pa.Table, b: pa.Table) -> pa.Table:
    """`_sum` for int64 values, by sorting the union: faster than a hash aggregation."""
    parts = [(t.column("value").to_numpy(), t.column("count").to_numpy()) for t in (a, b)]
    # Parts are mostly sorted runs already (np.unique, bincount and this function emit sorted
    # values), which the stable sort (timsort) merges in linear time: 1.2 ms against 3.2 for 200k.
    union = np.sort(np.concatenate([values for values, _ in parts]), kind="stable")
    if len(union):
        union = union[np.concatenate([[True], union[1:] != union[:-1]])]
    counts = np.zeros(len(union), dtype=np.int64)
    for values, part_counts in parts:  # each part holds a value once, so plain indexing adds
        counts[np.searchsorted(union, values)] += part_counts
    return pa.table({"value": pa.array(union, pa.int64()), "count": pa.array(counts)})
