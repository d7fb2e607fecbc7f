"""FingerprintCounts: the bounded raw-value summary of `BoundedCounts`, counted on 64-bit fingerprints of strings.

Counting strings in a hash table costs a string hash and probe per value, and
summing the tables a string hash aggregation: more than reading them. Here a
string is hashed once, vectorised (`sparse_io.string_hashes.fingerprint64`,
Farmhash Fingerprint64), or not at all where hashing the ids already did
(`add(values, fingerprints)`, from `HashIds`), and everything after is integer
work: the fingerprints wait in a buffer; when they are summed into the table
(at the moments `BoundedCounts` would compact, so the summary, its pruning and
its error bound are the same as counting the strings), one native call
(`sparse_io.raw_value_sums.sum_raw_values`) groups and counts them, gives the
sketch the new fingerprints, prunes, and gathers and checks the kept strings
where they lie. Where no compiler works the reference does the same in
numpy and Arrow (`sparse_io.fingerprint_groups.group_fingerprints` and two
gathers); `FingerprintCounts(capacity, native=False)` asks for it. Both give
the same summary, bit for bit. The table keeps,
beside each fingerprint's count, one of its strings: the first met. So
strings are kept for the table's counters only (at most
`max(2 * capacity, 65,536)` plus a buffer), never one per value, and
gathered only for the fingerprints a sum keeps (after its pruning).

Collisions (error bound): two distinct strings share a 64-bit fingerprint
with probability 2**-64 per pair, so among n distinct strings of one feature
the chance that any two do is at most n**2 / 2**65 (n = 10**6: 3e-8;
n = 10**8: 3e-4); only then could two strings' counts be summed into one.
Each time the buffer is summed, the string kept for every fingerprint the
sum keeps (the table's, or the first met) is compared with the last string
met with it there, and a mismatch raises ValueError naming both strings
instead of summing their counts. A collision goes unseen only if, in every
sum, the other string is neither the first nor the last one met with that
fingerprint, or the fingerprint is pruned; its effect is then bounded by the
other string's count (or, pruned, by `max_undercount`).

The HyperLogLog past the capacity hashes the fingerprints exactly as it
hashes strings (`_sketches.hash64` of a string is the mix of its
Fingerprint64), and sees each distinct fingerprint of every sum, so
`distinct` is the same number as counting the strings.

Example:
  >>> c = FingerprintCounts(capacity=8); c.add(pa.array(["a", "b", "a"]))
  >>> c.top(1), c.distinct(), c.exact
  ([['a', 2]], 2, True)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io import raw_value_sums
from sparse_io.fingerprint_groups import group_fingerprints
from sparse_io.string_hashes import fingerprint64
from transforms.beam._sketches import _COMPACT_IDS, HyperLogLog

__all__ = ["FingerprintCounts", "TEXT_TYPES"]

TEXT_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


class FingerprintCounts:
    """Counts of strings: exact up to `capacity` distinct ones, then Misra-Gries plus HyperLogLog. Mergeable.

    The same contract as `_sketches.BoundedCounts` (`add`, `merge`, `top`,
    `distinct`, `exact`, `max_undercount`), for flat string or binary arrays
    without nulls; `top` orders ties by the string.

    `native`: sum natively (`sparse_io.raw_value_sums`; the default where it builds) or with the numpy and
    Arrow reference (False); both give the same summary.

    Raises:
      ValueError (from `add` or `merge`): two different strings with one fingerprint (see the module doc),
        or a value type other than string/binary.
    """

    def __init__(self, capacity: int, native: bool | None = None) -> None:
        self.capacity = capacity
        # Sums run natively (`sparse_io.raw_value_sums`) where it builds, unless `native=False` (the reference).
        self.native = raw_value_sums.native_available() if native is None else native
        self.sketch: HyperLogLog | None = None
        self.max_undercount = 0
        self._pending = 0
        self._type: pa.DataType | None = None
        # The table: distinct fingerprints (int64), their counts, and one string each.
        self._fps = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._strings: pa.Array | None = None
        self._buffer: list[tuple[np.ndarray, pa.Array]] = []

    @property
    def exact(self) -> bool:
        return self.sketch is None

    def add(self, values: pa.Array, fingerprints: np.ndarray | None = None) -> None:
        """Counts `values` (flat strings or binary, no nulls); `fingerprints`: their Fingerprint64s, if known.

        The fingerprints must be Fingerprint64 (`sparse_io.string_hashes.fingerprint64`) of `values`, position
        by position, as hashing the ids computed them (any other hash would split a value's count).
        """
        if not len(values):
            return
        values = self._typed(values)
        if fingerprints is None:
            fingerprints = fingerprint64(values)
        elif len(fingerprints) != len(values):
            raise ValueError(f"FingerprintCounts: {len(fingerprints)} fingerprints for {len(values)} values")
        fps = np.asarray(fingerprints).view(np.int64)
        self._buffer.append((fps, values))
        self._pending += len(values)
        self._bound()

    def merge(self, other: FingerprintCounts) -> None:
        other._flush()
        if other._strings is not None:
            self._typed(other._strings)
        if other.sketch is not None:
            self._start_sketch()
            assert self.sketch is not None
            self.sketch.merge(other.sketch)
        elif self.sketch is not None and len(other._fps):
            self.sketch.add(pa.array(other._fps))
        if other._strings is not None and len(other._fps):
            self._flush(other._fps, other._counts, other._strings)
        self.max_undercount += other.max_undercount
        self._pending += other._pending
        self._bound()

    def distinct(self) -> int:
        self._flush()
        return len(self._fps) if self.sketch is None else self.sketch.estimate()

    def top(self, k: int) -> list[list]:
        """`[[string, count], ...]`: the `k` largest counts, ties by the string ascending."""
        self._flush()
        if self._strings is None or not len(self._fps):
            return []
        table = pa.table({"value": self._strings, "count": self._counts})
        order = pc.sort_indices(table, [("count", "descending"), ("value", "ascending")]).slice(0, k)
        table = table.take(order)
        return [[v, c] for v, c in zip(table.column("value").to_pylist(), table.column("count").to_pylist())]

    def __getstate__(self) -> dict:
        self._flush()
        return {"capacity": self.capacity, "sketch": self.sketch, "max_undercount": self.max_undercount,
                "pending": self._pending, "type": self._type, "fps": self._fps, "counts": self._counts,
                "strings": self._strings}

    def __setstate__(self, state: dict) -> None:
        self.capacity, self.sketch, self.max_undercount = state["capacity"], state["sketch"], state["max_undercount"]
        self._pending, self._type, self._buffer = state["pending"], state["type"], []
        self._fps, self._counts, self._strings = state["fps"], state["counts"], state["strings"]
        self.native = raw_value_sums.native_available()

    def _typed(self, values: pa.Array) -> pa.Array:
        """`values` in the summary's one value type (64-bit offsets once two widths meet)."""
        if values.type not in TEXT_TYPES:
            raise ValueError(f"FingerprintCounts: values must be strings or binary, got {values.type}")
        if self._type is None:
            self._type = values.type
        elif values.type != self._type:
            binary = pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)
            if binary != (pa.types.is_binary(self._type) or pa.types.is_large_binary(self._type)):
                raise ValueError(f"FingerprintCounts: values of type {values.type} after {self._type}")
            wide = pa.large_binary() if binary else pa.large_string()
            if self._type != wide:
                self._type = wide
                if self._strings is not None:
                    self._strings = self._strings.cast(wide)
                self._buffer = [(fps, v.cast(wide)) for fps, v in self._buffer]
            values = values.cast(wide)
        return values

    def _bound(self) -> None:
        # BoundedCounts._bound's schedule, so the pruning (and max_undercount) is the same as counting the strings.
        if self._pending < max(2 * self.capacity, min(16 * self.capacity, _COMPACT_IDS)):
            return
        self._pending = 0
        self._flush(prune=True)

    def _start_sketch(self) -> None:
        if self.sketch is None:
            self._flush()
            self.sketch = HyperLogLog()
            if len(self._fps):
                self.sketch.add(pa.array(self._fps))

    def _flush(self, fps: np.ndarray | None = None, counts: np.ndarray | None = None,
               strings: pa.Array | None = None, prune: bool = False) -> None:
        """Sums the buffer (each value once) and `fps`/`counts`/`strings` (a table's entries) into the table.

        With `prune`, a table of more than `2 * capacity` fingerprints is then cut to the `capacity` largest
        counts, less the next count (Misra-Gries); strings are gathered (and compared) for the kept ones only.
        """
        prune = prune and (bool(self._buffer) or fps is not None or len(self._fps) > 2 * self.capacity)
        if not self._buffer and fps is None and not prune:
            return
        # The table's entries come first, then the other table's, then the buffered values: grouped in the
        # order first met.
        tables = [(f, s, c) for f, s, c in ((self._fps, self._strings, self._counts), (fps, strings, counts))
                  if f is not None and len(f)]
        if self.native:
            self._native_sum(tables + [(f, v, None) for f, v in self._buffer], prune)
            self._buffer = []
            return
        weighted = [(f, c) for f, _, c in tables]
        chunks = [s for _, s, _ in tables] + [v for _, v in self._buffer]
        all_fps = np.concatenate([f for f, _ in weighted] + [f for f, _ in self._buffer])
        weights = np.concatenate([c for _, c in weighted]) if weighted else None
        self._buffer = []
        groups, summed, first, last = group_fingerprints(all_fps, weights)
        # The table's own fingerprints lead `groups` (they are met first, each once); a sketch that existed
        # before this sum has seen them, so it is given the others only.
        seen = len(self._fps) if self.sketch is not None else 0
        if prune and len(groups) > 2 * self.capacity and self.sketch is None:
            self.sketch = HyperLogLog()
        if self.sketch is not None:
            self.sketch.add(pa.array(groups[seen:]))  # every distinct fingerprint, before any is pruned
        if prune and len(groups) > 2 * self.capacity:
            threshold = _largest(summed, self.capacity + 1)
            kept = summed > threshold
            groups, summed, first, last = groups[kept], summed[kept] - threshold, first[kept], last[kept]
            self.max_undercount += threshold
        # One take for the first and the last string met with each kept fingerprint.
        taken = pa.chunked_array(chunks, type=self._type).take(pa.array(np.concatenate([first, last])))
        taken = taken.combine_chunks()
        kept_strings = taken.slice(0, len(first))
        _check_same(taken.slice(len(first)), kept_strings)
        self._fps, self._counts, self._strings = groups, summed, kept_strings

    def _native_sum(self, parts: list, prune: bool) -> None:
        """`_flush`'s sum in one native call: the same groups, sketch, pruning, strings and checks."""
        sketching = self.sketch is not None
        sketch = self.sketch if self.sketch is not None else HyperLogLog()  # the one a pruning sum starts
        try:
            groups, summed, strings, threshold = raw_value_sums.sum_raw_values(
                parts, prune_above=2 * self.capacity if prune else 0, rank=self.capacity + 1,
                registers=sketch.registers, register_from=len(self._fps), sketching=sketching)
        except raw_value_sums.FingerprintCollision as e:
            raise _collision(e.other, e.first) from None
        if threshold:  # it pruned (a threshold is a count, >= 1), so a sketch has started if none had
            self.sketch = sketch
        self.max_undercount += threshold
        self._fps, self._counts = groups, summed
        self._strings = strings if strings.type == self._type else strings.cast(self._type)


def _check_same(values: pa.Array, kept: pa.Array) -> None:
    """ValueError unless each of `values` is the string kept for its fingerprint (`kept`, position by position)."""
    same = pc.equal(values, kept)
    if not pc.all(same).as_py():
        where = int(np.flatnonzero(~same.to_numpy(zero_copy_only=False))[0])
        raise _collision(values[where].as_py(), kept[where].as_py())


def _collision(other, kept) -> ValueError:
    """The error of both sums (native and reference) for `other` met with the fingerprint of `kept`."""
    return ValueError(f"FingerprintCounts: {other!r} and {kept!r} share a 64-bit fingerprint; their counts cannot "
                      "be kept apart")


def _largest(counts: np.ndarray, rank: int) -> int:
    """The `rank`-th largest of `counts` (1 <= rank <= counts.size).

    Most counts are small, where a selection among many equal values is slow: they are tallied instead
    (np.bincount of the counts below 2**16), and only a threshold among the larger ones needs selecting.
    The tally is as long as the largest small count, not 2**16: a sum's counts are mostly in the tens.
    """
    cap = 1 << 16
    small = counts < cap
    large = counts[~small]
    if large.size >= rank:
        return int(np.partition(large, large.size - rank)[large.size - rank])
    tally = np.bincount(counts[small])
    # The largest c with (number of counts >= c) >= rank, among the small ones.
    at_least = np.cumsum(tally[::-1])[::-1] + large.size
    return int(np.flatnonzero(at_least >= rank)[-1])
