"""HashIds: string or integer ids to Keras-identical hash buckets, a batch at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io.hashing import normalize_salt
from sparse_io.id_maps import HashSpec, hash_arrow_columns
from sparse_io.schema import Schema
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._columns import feature_names, num_values, replace_column, require_columns

__all__ = ["HashIds"]


class _HashIdsFn(beam.DoFn):
    """Hashes a batch's columns; with `raw_values`, also emits those features' ids on the RAW_VALUES output.

    Each RAW_VALUES element is `(feature, (ids, fingerprints))`: the flat ids of the batch's column (null rows
    hold none) and their uint64 Fingerprint64, as hashing computed them; or `(feature, column)` where they cannot
    be reused (a salted hash, integer ids, null rows that still reference ids).
    """

    RAW_VALUES = "raw_values"

    def __init__(self, specs: dict[str, HashSpec], raw_values: Sequence[str] = ()):
        self._specs = specs
        self._raw = frozenset(raw_values)
        self._ids = beam.metrics.Metrics.counter("sparseflow.HashIds", "ids_hashed")

    def process(self, batch: pa.RecordBatch):
        require_columns(batch, self._specs, "HashIds")
        names = list(self._specs)
        columns = [batch.column(n) for n in names]
        hashes: list | None = [] if self._raw else None
        hashed = hash_arrow_columns(columns, [self._specs[n] for n in names], names, hashes)
        count = 0
        for name, column in zip(names, hashed):
            batch = replace_column(batch, name, column)
            count += num_values(column)
        self._ids.inc(count)
        yield batch
        if hashes is not None:
            for name, raw, (ids, fingerprints) in zip(names, columns, hashes):
                if name in self._raw:
                    reuse = self._specs[name].salt is None and _ids_of_valid_rows(raw, ids)
                    yield beam.pvalue.TaggedOutput(self.RAW_VALUES, (name, (ids, fingerprints) if reuse else raw))


def _ids_of_valid_rows(column: pa.Array | pa.ChunkedArray, ids: pa.Array) -> bool:
    """Whether `ids` are strings and exactly the ids of `column`'s non-null rows (what raw values count)."""
    if ids.type not in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
        return False
    if not column.null_count:
        return True
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return False
    return (pc.sum(pc.list_value_length(column)).as_py() or 0) == len(ids)


class HashIds(beam.PTransform):
    """Replaces id columns by int64 hash buckets, bit-identical to `keras.layers.Hashing`.

    A bucket is `Fingerprint64(utf8(id)) % num_bins` (TensorFlow's
    `to_hash_bucket_fast`), or with a `salt` the keyed SipHash of
    `to_hash_bucket_strong`; integers are hashed through their decimal text,
    as Keras does. So `keras.layers.Hashing(num_bins, salt=salt)` at serving
    time maps a raw id to the same bucket as this transform did at ingest.
    Each feature's mapping is a `sparse_io.id_maps.HashSpec` (its Arrow side
    runs here; `transforms.tfdata.ids.GraphIdMap` is its graph side).
    Computed in numpy over each batch's Arrow buffers (no TensorFlow, no
    Python call per id); row structure, null rows and weight columns are kept.

    Args:
      features: the column name(s) to hash: `list<string>`, `list<int*>` or a
        flat string/integer column.
      num_bins: bucket count for every feature, or a mapping feature -> count.
      salt: None, an int, or two ints (Keras's `salt`), each within int64.
      mask_value: Keras's `mask_value`: that value goes to bucket 0 and the
        others to `1 + hash % (num_bins - 1)`.

    Input/output: PCollection[pa.RecordBatch]; each hashed column becomes
    `list<int64>` (or `int64` for a flat column).

    Raises (at construction): ValueError for no features, a bucket count that
    is not a positive integer, a feature missing from a `num_bins` mapping, or
    a bad salt. While running: ValueError naming the feature for a missing
    column, a null id (with its row) or a column type that cannot be hashed.

    Example:
      >>> from apache_beam.testing.util import assert_that
      >>> from sparse_io.hashing import hash_ids_arrow
      >>> from transforms.testing import equal_to_rows
      >>> expected = hash_ids_arrow(pa.array([["a"], []]), 1000).to_pylist()  # what HashIds runs per batch
      >>> with beam.Pipeline("FnApiRunner") as p:
      ...     hashed = (p | beam.Create([pa.record_batch({"C1": [["a"], []]})])
      ...                 | HashIds(["C1"], num_bins=1000))
      ...     _ = assert_that(hashed, equal_to_rows([{"C1": expected[0]}, {"C1": []}]))
    """

    def __init__(
        self,
        features: str | Sequence[str],
        num_bins: int | Mapping[str, int],
        salt: int | Sequence[int] | None = None,
        *,
        mask_value: str | int | None = None,
    ):
        super().__init__()
        names = feature_names(features, "HashIds")
        if isinstance(num_bins, Mapping):
            missing = [n for n in names if n not in num_bins]
            if missing:
                raise ValueError(f"HashIds: num_bins has no entry for feature(s) {missing}")
            bins = {n: num_bins[n] for n in names}
        else:
            bins = dict.fromkeys(names, num_bins)
        for name, value in bins.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"HashIds: feature {name!r}: num_bins must be a positive integer, got {value!r}"
                )
        self._bins = bins
        self._salt = normalize_salt(salt)
        self._mask_value = mask_value

    def output_schema(self, schema: Schema) -> Schema:
        """`schema` with each hashed feature's dtype int64 and `hash_buckets` set."""
        for name, bins in self._bins.items():
            schema = schema.replace(name, dtype="int64", hash_buckets=bins)
        return schema

    def specs(self) -> dict[str, HashSpec]:
        """Each feature's mapping, as the transform applies it."""
        return {name: HashSpec(bins, self._salt, self._mask_value) for name, bins in self._bins.items()}

    def expand(self, batches):
        return batches | "Hash" >> beam.ParDo(_HashIdsFn(self.specs())).with_output_types(pa.RecordBatch)
