"""Record batches held on disk while a side input computed from them is made.

A step whose side input is computed from its own input (ApplyVocabulary after
ComputeVocabulary over the same batches) cannot start before every batch has
been read and counted, so a runner keeps the whole input between the two.
Beam's in-process runner keeps it in memory, as encoded bytes, in several
copies while it hands them over: a 2M-row Criteo ingest with 26 vocabularies
peaked at 4.9 GB of RSS for 0.9 GB of batches.

`HoldBatches` writes the batches, as they are read, to Arrow IPC files named
`.tmp-held-<id>.arrow` in a directory (any Beam filesystem; temporaries that a
failed run's roll-back removes), up to `hold_rows` rows a file, and passes on
only the file names. `ReleaseBatches(wait_for)` reads them back, in the order
they were written, once the PCollections in `wait_for` are complete: they are
its side inputs, which keeps the runner from fusing the read-back into the
step that wrote the files, so the batches flow from disk straight into the
step that needed the side input. Each file is deleted once read (a failed
run's leftovers go with its other temporaries).

`pipelines.ingest` holds batches on the local runners only
(`transforms.beam.runner.keeps_pcollections_in_memory`): a distributed runner
materializes the waiting input in its own shuffle, not in memory.

    held = batches | HoldBatches(output_dir)
    vocab = batches | ComputeVocabulary(names, vocab_dir)
    batches = held | ReleaseBatches([vocab]) | ApplyVocabulary(vocab)
"""

from __future__ import annotations

import uuid

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from sparse_io.atomic import TMP_PREFIX
from transforms.beam import coders  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam.shard_spill import return_freed_memory

__all__ = ["HoldBatches", "ReleaseBatches", "DEFAULT_HOLD_ROWS", "HELD_PREFIX"]

DEFAULT_HOLD_ROWS = 100_000
HELD_PREFIX = TMP_PREFIX + "held-"
# Uncompressed: lz4 halved the held bytes of hashed Criteo batches but cost 3.6 s of CPU per 2M rows (0.75 GB:
# 1.1 s to write, 2.5 s to read back) against 0.7 s uncompressed, on the path of every ingest that waits.
_CODEC = None
_WRITE_BUFFER = 1 << 20


class _HoldFn(beam.DoFn):
    def __init__(self, directory: str, hold_rows: int):
        self._directory = directory
        self._hold_rows = hold_rows

    def start_bundle(self):
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0

    def process(self, batch: pa.RecordBatch):
        if batch.num_rows == 0:
            return
        if self._buffer and batch.schema != self._buffer[0].schema:
            # One IPC file holds one schema; batches of another start a file of their own.
            yield self._flush()
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        if self._buffered >= self._hold_rows:
            yield self._flush()

    def finish_bundle(self):
        if self._buffer:
            yield GlobalWindows.windowed_value(self._flush())

    def _flush(self) -> str:
        path = FileSystems.join(self._directory, f"{HELD_PREFIX}{uuid.uuid4().hex}.arrow")
        options = pa.ipc.IpcWriteOptions(compression=_CODEC)
        with FileSystems.create(path) as f:
            sink = pa.BufferedOutputStream(pa.PythonFile(f, mode="w"), buffer_size=_WRITE_BUFFER)
            with pa.ipc.new_file(sink, self._buffer[0].schema, options=options) as writer:
                for batch in self._buffer:
                    writer.write_batch(batch)
            sink.flush()
        self._buffer, self._buffered = [], 0
        return_freed_memory()
        return path


class HoldBatches(beam.PTransform):
    """PCollection[pa.RecordBatch] -> PCollection[str]: the batches written to files, their paths.

    Args:
      directory: where the files go (any Beam filesystem); the caller's
        temporaries' place, such as the output directory.
      hold_rows: rows buffered per file (a batch is never split).

    Raises:
      ValueError: `hold_rows` is not a positive integer.
    """

    def __init__(self, directory: str, hold_rows: int = DEFAULT_HOLD_ROWS):
        super().__init__()
        if isinstance(hold_rows, bool) or not isinstance(hold_rows, int) or hold_rows < 1:
            raise ValueError(f"HoldBatches: hold_rows must be a positive integer, got {hold_rows!r}")
        self._directory = directory
        self._hold_rows = hold_rows

    def expand(self, batches):
        return batches | "Write" >> beam.ParDo(_HoldFn(self._directory, self._hold_rows)).with_output_types(str)


def _release(path: str, *wait_for):
    with FileSystems.open(path) as f:
        reader = pa.ipc.open_file(f)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    FileSystems.delete([path])
    yield from batches


class ReleaseBatches(beam.PTransform):
    """PCollection[str] of `HoldBatches` paths -> their batches, once every `wait_for` PCollection is complete.

    Args:
      wait_for: PCollections to wait for (their elements are not used).
    """

    def __init__(self, wait_for):
        super().__init__()
        self._wait_for = list(wait_for)

    def expand(self, paths):
        barriers = [beam.pvalue.AsIter(p) for p in self._wait_for]
        return paths | "Read" >> beam.FlatMap(_release, *barriers).with_output_types(pa.RecordBatch)
