"""Progress lines for long local runs: rows read so far and throughput.

The counter lives in the worker process, so on the local runner the lines
show the whole run; on a distributed runner each worker logs its own share
(Dataflow's monitoring UI shows the Beam counters instead). The cost is one
integer add per batch and a clock read, nothing per row.
"""

from __future__ import annotations

import logging
import time

import apache_beam as beam
import pyarrow as pa

__all__ = ["LogProgress"]

_LOGGER = logging.getLogger("sparseflow.progress")


class _ProgressFn(beam.DoFn):
    def __init__(self, every_seconds: float):
        self._every = every_seconds

    def setup(self) -> None:
        self._started = time.monotonic()
        self._last = self._started
        self._rows = 0
        self._batches = 0

    def process(self, batch: pa.RecordBatch):
        self._rows += batch.num_rows
        self._batches += 1
        now = time.monotonic()
        if now - self._last >= self._every:
            self._last = now
            elapsed = now - self._started
            _LOGGER.info(
                "read %s rows in %s batches (%.0f rows/s over %.1f s)",
                f"{self._rows:,}", self._batches, self._rows / elapsed, elapsed,
            )
        yield batch


class LogProgress(beam.PTransform):
    """Passes record batches through, logging rows read and rows/s every `every_seconds`.

    Example:
      >>> import apache_beam as beam
      >>> from transforms.testing import test_pipeline
      >>> with test_pipeline() as p:
      ...     rows = (p | beam.Create([pa.record_batch({"x": [1, 2, 3]})]) | LogProgress(5.0)
      ...               | beam.Map(lambda batch: batch.num_rows))
    """

    def __init__(self, every_seconds: float = 5.0):
        super().__init__()
        if every_seconds <= 0:
            raise ValueError(f"LogProgress: every_seconds must be positive, got {every_seconds}")
        self._every = every_seconds

    def expand(self, batches):
        return batches | beam.ParDo(_ProgressFn(self._every)).with_output_types(pa.RecordBatch)
