"""ops: TensorFlow compute for sparse batches: embedding bags and block-sparse matmuls.

`ops.layers` (Keras 3 layers) is imported on first use.
"""

from ops.block_layouts import banded_layout, magnitude_layout, random_layout
from ops.block_sparse import BlockSparseMatMul, block_sparse_matmul
from ops.embedding_bag import embedding_bag

__all__ = [
    "BlockSparseMatMul",
    "banded_layout",
    "block_sparse_matmul",
    "embedding_bag",
    "layers",
    "magnitude_layout",
    "random_layout",
]


def __getattr__(name: str):
    if name == "layers":
        import importlib

        return importlib.import_module("ops.layers")
    raise AttributeError(f"module 'ops' has no attribute {name!r}")
