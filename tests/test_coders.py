"""RecordBatchCoder: batches cross a shuffle intact, and it is the registered coder for them."""

import apache_beam as beam
import pyarrow as pa

from transforms.beam.coders import RecordBatchCoder


def test_round_trip_keeps_schema_nulls_and_slices():
    batch = pa.record_batch(
        {
            "ids": pa.array([[1, 2], None, [], [3]], pa.list_(pa.int64())),
            "name": pa.array(["a", None, "日本", ""]),
            "x": pa.array([1.5, None, 2.5, 0.0], pa.float32()),
        }
    )
    coder = RecordBatchCoder()
    for b in (batch, batch.slice(1, 2), batch.slice(0, 0)):
        decoded = coder.decode(coder.encode(b))
        assert decoded.schema.equals(b.schema) and decoded.equals(b)
    assert beam.coders.registry.get_coder(pa.RecordBatch) == coder
    kv = beam.coders.registry.get_coder(beam.typehints.Tuple[int, pa.RecordBatch])
    assert kv.decode(kv.encode((3, batch)))[1].equals(batch)
