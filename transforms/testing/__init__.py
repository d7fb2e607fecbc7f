"""Tools for unit-testing Beam pipelines built around our transforms, on the DirectRunner.

Importing this package loads Beam and pyarrow, never TensorFlow.

- `test_pipeline(**options)`: a `TestPipeline` on the DirectRunner, offline,
  with no Prism download attempt.
- `CreateLogs(lines_or_records, log_format, schema=None, **reader_options)`:
  `ReadLogs` over lines or records held in the test (the reader's own
  parsing, dead letters and batching).
- matchers for `assert_that` over PCollections of `pa.RecordBatch`:
  `equal_to_rows` (rows, order-insensitive by default), `has_schema`
  (columns and types) and `dead_letters` (count and reasons).
- `ingest_in_memory(lines_or_records, config)`: the whole ingest
  (`python -m pipelines.ingest`) on a few lines, returning the shards' rows,
  schema.json, stats.json and dead letters.

Example (a pytest test)::

    import apache_beam as beam
    from apache_beam.testing.util import assert_that
    from transforms.beam import HashIds
    from transforms.testing import CreateLogs, dead_letters, equal_to_rows, test_pipeline

    def test_my_pipeline():
        with test_pipeline() as p:
            batches, dead = p | CreateLogs(lines, "criteo", error_budget=None, with_dead_letters=True)
            hashed = batches | HashIds("C1", num_bins=100)
            assert_that(hashed, equal_to_rows([{"C1": [42]}], columns=["C1"]))
            assert_that(dead, dead_letters(["C2"]), label="dead")
"""

from transforms.testing.create_logs import MEMORY_SOURCE, CreateLogs, encode_logs
from transforms.testing.ingest import IngestOutput, ingest_in_memory
from transforms.testing.matchers import dead_letters, equal_to_rows, has_schema
from transforms.testing.pipeline import direct_runner, test_pipeline

__all__ = [
    "MEMORY_SOURCE",
    "CreateLogs",
    "IngestOutput",
    "dead_letters",
    "direct_runner",
    "encode_logs",
    "equal_to_rows",
    "has_schema",
    "ingest_in_memory",
    "test_pipeline",
]
