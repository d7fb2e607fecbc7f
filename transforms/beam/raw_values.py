"""CountRawValues: the most frequent raw values of each sparse feature, before hashing or vocabulary lookup.

stats.json's `top_ids` are bucket numbers after hashing; a person recognises
the raw strings. Each feature's raw values are counted per Arrow batch
into a bounded, mergeable summary: strings and binary values by their 64-bit
fingerprints (`transforms.beam._fingerprint_counts.FingerprintCounts`, which
keeps one string per counter and refuses two strings with one fingerprint),
integers by value (`transforms.beam._sketches.BoundedCounts`):

  * up to `capacity` distinct values per feature the counts are exact
    (`exact: true`);
  * past it the summary keeps `capacity` counters (Misra-Gries): each listed
    count is a lower bound at most `max_undercount` below the truth, and
    `max_undercount` <= values / (capacity + 1); `distinct` is then a
    HyperLogLog estimate (0.81% standard error).

The entry each feature gets under `raw_values` in stats.json:

  {"values": int,            # raw values seen (ids before hashing, over all rows)
   "distinct": int, "exact": bool, "max_undercount": int,
   "top": [[value, count, share], ...]}   # most frequent first; share = count / values

Null values (and null rows) hold no value and are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._fingerprint_counts import TEXT_TYPES, FingerprintCounts
from transforms.beam._sketches import BoundedCounts
from transforms.beam.hash_ids import HashIds, _HashIdsFn

__all__ = ["CountRawValues", "HashIdsCountingRawValues", "RawValueCounts", "DEFAULT_RAW_CAPACITY", "DEFAULT_RAW_TOP_K"]

DEFAULT_RAW_CAPACITY = 4_096
DEFAULT_RAW_TOP_K = 50


class RawValueCounts:
    """Counts of one feature's raw values; exact up to `capacity` distinct values, then bounded. Mergeable.

    Example:
      >>> c = RawValueCounts(capacity=8); c.add(pa.array([["a", "b"], None, ["a"]]))
      >>> c.result(top_k=1)
      {'values': 3, 'distinct': 2, 'exact': True, 'max_undercount': 0, 'top': [['a', 2, 0.6666666666666666]]}
    """

    def __init__(self, capacity: int = DEFAULT_RAW_CAPACITY):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"RawValueCounts: capacity must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self.counts: FingerprintCounts | BoundedCounts | None = None  # chosen by the first values' type
        self.values = 0

    def add(self, column: pa.Array | pa.ChunkedArray) -> None:
        """Counts the values of one batch's column: a list column's items, or a flat column's values."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            column = pc.list_flatten(column)  # null rows hold no items
        if column.null_count:
            column = pc.drop_null(column)
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        if not len(column):
            return
        self.values += len(column)
        text = column.type in TEXT_TYPES
        if self.counts is None:
            self.counts = FingerprintCounts(self.capacity) if text else BoundedCounts(self.capacity)
        elif text != isinstance(self.counts, FingerprintCounts):
            raise ValueError(f"RawValueCounts: values of type {column.type} among values of another kind")
        self.counts.add(column)

    def add_hashed(self, values: pa.Array, fingerprints: np.ndarray) -> None:
        """Counts flat string values (no nulls) whose uint64 Fingerprint64s hashing already computed."""
        if not len(values):
            return
        if self.counts is None:
            self.counts = FingerprintCounts(self.capacity)
        elif not isinstance(self.counts, FingerprintCounts):
            raise ValueError(f"RawValueCounts: values of type {values.type} among values of another kind")
        self.counts.add(values, fingerprints)
        self.values += len(values)

    def merge(self, other: RawValueCounts) -> None:
        if other.counts is not None:
            if self.counts is None:
                self.counts = type(other.counts)(self.capacity)
            elif type(self.counts) is not type(other.counts):
                raise ValueError("RawValueCounts: cannot merge counts of strings with counts of other values")
            self.counts.merge(other.counts)  # type: ignore[arg-type]
        self.values += other.values

    def result(self, top_k: int = DEFAULT_RAW_TOP_K) -> dict:
        """The `raw_values` entry (see the module docstring)."""
        counts = self.counts if self.counts is not None else BoundedCounts(self.capacity)
        top = counts.top(top_k)
        return {
            "values": self.values,
            "distinct": counts.distinct(),
            "exact": counts.exact,
            "max_undercount": int(counts.max_undercount),
            "top": [[v, int(c), c / self.values] for v, c in top],
        }


def _check_counts(top_k: int, capacity: int, where: str) -> None:
    for name, value in (("top_k", top_k), ("capacity", capacity)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name} must be a positive integer, got {value!r}")


def _raw_columns(batch: pa.RecordBatch, features: Sequence[str]):
    names = set(batch.schema.names)
    for name in features:
        if name in names:
            yield name, batch.column(name)


class _RawValuesFn(beam.CombineFn):
    def __init__(self, capacity: int, top_k: int):
        self._capacity = capacity
        self._top_k = top_k

    def create_accumulator(self):
        return RawValueCounts(self._capacity)

    def add_input(self, accumulator, column):
        if isinstance(column, tuple):  # (ids, fingerprints) from HashIdsCountingRawValues
            accumulator.add_hashed(*column)
        else:
            accumulator.add(column)
        return accumulator

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for acc in accumulators:
            merged.merge(acc)
        return merged

    def extract_output(self, accumulator):
        return accumulator.result(self._top_k)


class CountRawValues(beam.PTransform):
    """The most frequent raw values of `features`, as stats.json updates.

    Args:
      features: the sparse columns to count (a batch without one of them contributes nothing to it).
      top_k: how many values to list per feature.
      capacity: distinct values per feature counted exactly (the summary's size; see the module doc).

    Input: PCollection[pa.RecordBatch] (the batches as read, before HashIds).
    Output: PCollection[(feature, {"raw_values": entry})], one per feature seen.

    Example:
      >>> updates = raw_batches | CountRawValues(["C1", "C2"])  # doctest: +SKIP
    """

    def __init__(self, features: Sequence[str], top_k: int = DEFAULT_RAW_TOP_K,
                 capacity: int = DEFAULT_RAW_CAPACITY):
        super().__init__()
        _check_counts(top_k, capacity, "CountRawValues")
        self._features = list(features)
        self._top_k = top_k
        self._capacity = capacity

    def expand(self, batches):
        return (
            batches
            | "RawColumns" >> beam.FlatMap(_raw_columns, self._features)
            | "CountPerFeature" >> beam.CombinePerKey(_RawValuesFn(self._capacity, self._top_k))
            | "AsUpdate" >> beam.MapTuple(lambda feature, entry: (feature, {"raw_values": entry}))
        )


class HashIdsCountingRawValues(beam.PTransform):
    """`hash_ids`, and the raw values of `features` (some of its features) counted as CountRawValues counts them.

    Hashing computes every string id's Fingerprint64 anyway; counting the raw values by those fingerprints
    (`FingerprintCounts`) instead of hashing the strings again makes the count an integer count. The
    result is the same as `batches | CountRawValues(features)` beside `batches | hash_ids`.

    Output: `(hashed batches, updates)`: hash_ids's output, and CountRawValues's `(feature, {"raw_values": ...})`.

    Example:
      >>> hashed, updates = batches | HashIdsCountingRawValues(HashIds(["C1"], 1000), ["C1"])  # doctest: +SKIP
    """

    def __init__(self, hash_ids: HashIds, features: Sequence[str], top_k: int = DEFAULT_RAW_TOP_K,
                 capacity: int = DEFAULT_RAW_CAPACITY):
        super().__init__()
        _check_counts(top_k, capacity, "HashIdsCountingRawValues")
        unknown = sorted(set(features) - set(hash_ids.specs()))
        if unknown:
            raise ValueError(f"HashIdsCountingRawValues: features {unknown} are not hashed by {hash_ids.label}")
        self._hash_ids = hash_ids
        self._features = list(features)
        self._top_k = top_k
        self._capacity = capacity

    def expand(self, batches):
        fn = _HashIdsFn(self._hash_ids.specs(), self._features)
        outputs = batches | "Hash" >> beam.ParDo(fn).with_output_types(pa.RecordBatch).with_outputs(
            fn.RAW_VALUES, main="hashed")
        updates = (
            outputs[fn.RAW_VALUES]
            | "CountPerFeature" >> beam.CombinePerKey(_RawValuesFn(self._capacity, self._top_k))
            | "AsUpdate" >> beam.MapTuple(lambda feature, entry: (feature, {"raw_values": entry}))
        )
        return outputs.hashed, updates
