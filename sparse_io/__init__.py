"""sparse_io: the sparse data model, Arrow/TensorFlow bridges, log readers and shard writers.

TensorFlow is only imported when a TensorFlow bridge or a TFRecord reader is first used, and
Beam (whose FileSystems write local and remote paths) only when a file is first written.
"""

from sparse_io.arrow import csr_from_arrow, csr_to_arrow
from sparse_io.arrow_shards import ARROW_CODECS, read_arrow_shard, write_arrow_shard
from sparse_io.csr import CsrBatch, SparseValidationError
from sparse_io.dead_letters import DeadLetter, DeadLetterSink, ErrorBudgetExceeded
from sparse_io.errors import CorruptFileError
from sparse_io.example_encoding import encode_examples
from sparse_io.formats import LOG_FORMATS, SHARD_FORMATS, shard_format_of
from sparse_io.manifest import ManifestError, commit_directory, verify_directory
from sparse_io.output_files import shard_name
from sparse_io.parquet_shards import PARQUET_CODECS, read_parquet_shard, write_parquet_shard
from sparse_io.readers import FORMATS, read_file, read_logs
from sparse_io.schema import FeatureSpec, Schema, SchemaError, criteo_schema, weights_column
from sparse_io.shard_set import ShardReport, SkippedShard, iter_shards
from sparse_io.tfrecord import read_tfrecord_shard, write_tfrecord_shard

_TF_BRIDGES = ("csr_to_ragged", "csr_to_sparse", "csr_from_ragged", "csr_from_sparse")

__all__ = [
    "ARROW_CODECS",
    "FORMATS",
    "LOG_FORMATS",
    "PARQUET_CODECS",
    "SHARD_FORMATS",
    "CorruptFileError",
    "CsrBatch",
    "DeadLetter",
    "DeadLetterSink",
    "ErrorBudgetExceeded",
    "FeatureSpec",
    "ManifestError",
    "Schema",
    "SchemaError",
    "ShardReport",
    "SkippedShard",
    "SparseValidationError",
    "commit_directory",
    "criteo_schema",
    "csr_from_arrow",
    "csr_to_arrow",
    "encode_examples",
    "iter_shards",
    "read_file",
    "read_logs",
    "read_arrow_shard",
    "read_parquet_shard",
    "read_tfrecord_shard",
    "shard_format_of",
    "shard_name",
    "verify_directory",
    "write_arrow_shard",
    "write_parquet_shard",
    "write_tfrecord_shard",
    "weights_column",
    *_TF_BRIDGES,
]


def __getattr__(name: str):
    if name in _TF_BRIDGES:
        from sparse_io import tf_bridge

        return getattr(tf_bridge, name)
    raise AttributeError(f"module 'sparse_io' has no attribute {name!r}")
