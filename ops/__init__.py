"""ops: TensorFlow compute for sparse batches.

COO conversion and padding to a static capacity, embedding bags over COO,
block-sparse matmuls. `ops.Coo` is the COO batch type they share.
`ops.stock_ops_only()` traces graphs that must load without sparseflow
(SavedModels for serving) from stock ops only.

`ops.layers` (Keras 3 layers) is imported on first use. Without TensorFlow
(the `tf` extra) importing `ops` raises `sparse_io.extras.MissingExtraError`,
a ModuleNotFoundError whose message is the install command.
"""

from sparse_io.extras import require

require("tensorflow", "ops")

from ops._native import stock_ops_only
from ops.block_layouts import banded_layout, magnitude_layout, random_layout
from ops.block_sparse import BlockSparseMatMul, block_sparse_matmul
from ops.convert_to_coo import convert_to_coo
from ops.coo import Coo
from ops.embedding_bag import embedding_bag
from ops.pad_coo import pad_coo
from ops.to_coo import to_coo

__all__ = [
    "BlockSparseMatMul",
    "Coo",
    "banded_layout",
    "block_sparse_matmul",
    "convert_to_coo",
    "embedding_bag",
    "layers",
    "magnitude_layout",
    "pad_coo",
    "random_layout",
    "stock_ops_only",
    "to_coo",
]


def __getattr__(name: str):
    if name == "layers":
        import importlib

        return importlib.import_module("ops.layers")
    raise AttributeError(f"module 'ops' has no attribute {name!r}")
