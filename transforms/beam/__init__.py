"""Arrow-batched Apache Beam transforms: every element is a `pa.RecordBatch`.

Beam's Python SDK costs microseconds per element, so these transforms pass
batches of thousands of rows and do their work with pyarrow.compute and numpy;
Python runs once per batch, never once per row or id.
"""

from sparse_io.hashing import hash_ids_arrow
from transforms.beam.coders import RecordBatchCoder
from transforms.beam.hash_ids import HashIds
from transforms.beam.runner import IN_PROCESS_RUNNER, in_process_options

__all__ = [
    "IN_PROCESS_RUNNER",
    "HashIds",
    "RecordBatchCoder",
    "hash_ids_arrow",
    "in_process_options",
]
