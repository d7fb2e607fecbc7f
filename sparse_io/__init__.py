"""sparse_io: the sparse data model, Arrow/TensorFlow bridges, log readers and shard writers.

TensorFlow is only imported when a TensorFlow bridge is first used.
"""

from sparse_io.arrow import csr_from_arrow, csr_to_arrow
from sparse_io.csr import CooBatch, CsrBatch, SparseValidationError
from sparse_io.schema import FeatureSpec, Schema, SchemaError, criteo_schema, weights_column

_TF_BRIDGES = ("csr_to_ragged", "csr_to_sparse", "csr_from_ragged", "csr_from_sparse")

__all__ = [
    "CooBatch",
    "CsrBatch",
    "FeatureSpec",
    "Schema",
    "SchemaError",
    "SparseValidationError",
    "criteo_schema",
    "csr_from_arrow",
    "csr_to_arrow",
    "weights_column",
    *_TF_BRIDGES,
]


def __getattr__(name: str):
    if name in _TF_BRIDGES:
        from sparse_io import tf_bridge

        return getattr(tf_bridge, name)
    raise AttributeError(f"module 'sparse_io' has no attribute {name!r}")
