"""The crosses of a serving signature: their source columns as inputs, their ids as the ingest made them.

A cross feature (schema.json `cross`) is not a log column, so a serving
client cannot send it: the signature takes the cross's source columns as raw
cells instead (parsed by the ingest's rules, `transforms.tfdata.logs.cells`)
and crosses their raw values with `transforms.tfdata.crosses.GraphCross`, the
graph twin of the `CrossSpec` the ingest applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf

from sparse_io.id_maps import spec_of_feature
from sparse_io.schema import FeatureSpec, Schema, SchemaError
from transforms.tfdata.crosses import GraphCross

__all__ = ["CrossInputs"]


class CrossInputs(tf.Module):
    """The cross features among a model's sparse features, and the raw source columns they need.

    Attributes:
      crosses: the cross features' schema.json specs.
      sources: the raw specs (the log's dtypes) of every source column, in first-use order.

    Raises:
      SchemaError: a cross's source is not a column of the raw schema (an ingest without a recorded reading).
    """

    def __init__(self, specs: Sequence[FeatureSpec], schema: Schema, raw: Schema | None):
        super().__init__()
        self.crosses = [s for s in specs if s.cross]
        self.maps = {s.name: GraphCross(spec_of_feature(s)) for s in self.crosses}  # type: ignore[arg-type]
        sources: dict[str, FeatureSpec] = {}
        for spec in self.crosses:
            for column in spec.cross or ():
                if raw is None or column not in raw:
                    raise SchemaError(f"cross {spec.name!r}: the raw column {column!r} is not in the ingest's "
                                      "recorded schema; export with the ingest's reading (its _MANIFEST.json)")
                sources.setdefault(column, raw[column])
        self.sources = list(sources.values())

    def __call__(self, columns: Mapping[str, object]) -> dict:
        """Cross name -> `[B, None]` int64 RaggedTensor of ids, from the parsed (or typed) source columns."""
        return {spec.name: self.maps[spec.name]([columns[c] for c in spec.cross or ()]) for spec in self.crosses}
