"""CrossFeatures: appends cross columns (`sparse_io.crosses.CrossSpec`) to each batch, from its raw columns.

Runs before hashing and vocabulary lookup, so a cross sees the raw values
(`keras.layers.HashedCrossing` semantics); the sources stay in the batch for
their own mapping.
"""

from __future__ import annotations

from collections.abc import Mapping

import apache_beam as beam
import pyarrow as pa

from sparse_io.crosses import CrossSpec
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam._columns import require_columns

__all__ = ["CrossFeatures", "OVERFLOW"]

OVERFLOW = "cross_overflow"  # stats.json's entry of a cross: {"rows": n, "dropped": n, "max_per_row": n}


class _CrossFn(beam.DoFn):
    def __init__(self, specs: dict[str, CrossSpec]):
        self._specs = specs

    def process(self, batch: pa.RecordBatch):
        for name, spec in self._specs.items():
            require_columns(batch, spec.sources, f"CrossFeatures({name})")
            ids, overflow = spec.apply_arrow([batch.column(s) for s in spec.sources], name)
            batch = batch.append_column(name, ids)
            if overflow.rows:
                yield beam.pvalue.TaggedOutput(OVERFLOW, (name, (overflow.rows, overflow.dropped)))
        yield batch


def _sum_pairs(pairs) -> tuple[int, int]:
    rows = dropped = 0
    for r, d in pairs:
        rows, dropped = rows + r, dropped + d
    return rows, dropped


def _as_update(item, specs: Mapping[str, CrossSpec]):
    name, (rows, dropped) = item
    return name, {OVERFLOW: {"rows": rows, "dropped": dropped, "max_per_row": specs[name].max_per_row}}


class CrossFeatures(beam.PTransform):
    """Adds one `list<int64>` column per cross, named by the cross; returns (batches, overflow updates).

    Args:
      specs: cross name -> `CrossSpec` (its sources must be columns of every batch).

    Output: a pair of PCollections: the batches with the cross columns
    appended, and one `(name, {"cross_overflow": {"rows", "dropped",
    "max_per_row"}})` per cross (zeros when nothing was cut), for stats.json.

    Example:
      >>> import apache_beam as beam
      >>> with beam.Pipeline() as p:
      ...     batches, overflow = (p | beam.Create([pa.record_batch({"u": ["a"], "o": [1]})])
      ...                          | CrossFeatures({"x": CrossSpec(("u", "o"), 1000)}))
      ...     _ = batches | beam.Map(lambda b: print(b.column("x").to_pylist()))
      [[485]]
    """

    def __init__(self, specs: Mapping[str, CrossSpec]):
        super().__init__()
        if not specs:
            raise ValueError("CrossFeatures: no crosses given")
        self._specs = dict(specs)

    def expand(self, batches):
        # Typed, so the batches take the Arrow coder wherever the runner encodes or sizes them (pickling a
        # sampled batch to measure it cost more than the crosses themselves).
        crossed = batches | "Cross" >> beam.ParDo(_CrossFn(self._specs)).with_output_types(
            pa.RecordBatch).with_outputs(OVERFLOW, main="batches")
        zeros = batches.pipeline | "Zeros" >> beam.Create([(name, (0, 0)) for name in sorted(self._specs)])
        updates = (
            (zeros, crossed[OVERFLOW]) | "AllCounts" >> beam.Flatten()
            | "Sum" >> beam.CombinePerKey(_sum_pairs)
            | "AsUpdate" >> beam.Map(_as_update, self._specs)
        )
        return crossed.batches, updates

