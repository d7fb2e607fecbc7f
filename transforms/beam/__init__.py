"""Arrow-batched Apache Beam transforms: every element is a `pa.RecordBatch`.

Beam's Python SDK costs microseconds per element, so these transforms pass
batches of thousands of rows and do their work with pyarrow.compute and numpy;
Python runs once per batch, never once per row or id.

    with beam.Pipeline(options=in_process_options()) as p:
        batches = p | ReadLogs("logs/*.tsv", "criteo", dead_letters_path="out/errors.jsonl")
        hashed = batches | HashIds([f"C{i}" for i in range(1, 27)], num_bins=1 << 20)
        hashed | WriteShards("out/train", num_shards=8, seed=0)
"""

from sparse_io.hashing import hash_ids_arrow
from transforms.beam.coders import RecordBatchCoder
from transforms.beam.hash_ids import HashIds
from transforms.beam.histories import GroupHistories
from transforms.beam.join_tables import JoinSideTable
from transforms.beam.lookup import ApplyVocabulary, VocabularyLookup
from transforms.beam.read_logs import DEAD_LETTERS, ReadLogs
from transforms.beam.runner import IN_PROCESS_RUNNER, in_process_options
from transforms.beam.stats import ComputeStats
from transforms.beam.vocabulary import ComputeVocabulary, VocabularyFile
from transforms.beam.write_shards import WriteShards, infer_schema

__all__ = [
    "DEAD_LETTERS",
    "IN_PROCESS_RUNNER",
    "ApplyVocabulary",
    "ComputeStats",
    "ComputeVocabulary",
    "GroupHistories",
    "HashIds",
    "JoinSideTable",
    "ReadLogs",
    "RecordBatchCoder",
    "VocabularyFile",
    "VocabularyLookup",
    "WriteShards",
    "hash_ids_arrow",
    "in_process_options",
    "infer_schema",
]
