"""Keras 3 layers over the ops: `EmbeddingBag` and `BlockSparseDense` (TensorFlow backend).

Both are registered as serialisable under the "sparseflow" package, so a
`.keras` file that uses them loads once `ops.layers` is imported.
"""

from ops.layers.block_sparse_dense import BlockSparseDense
from ops.layers.embedding_bag import EmbeddingBag

__all__ = ["BlockSparseDense", "EmbeddingBag"]
