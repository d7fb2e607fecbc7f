"""ops: TensorFlow compute for sparse batches.

COO conversion and padding to a static capacity, embedding bags over COO,
block-sparse matmuls. `ops.Coo` is the COO batch type they share.
`ops.stock_ops_only()` traces graphs that must load without sparseflow
(SavedModels for serving) from stock ops only.

Each exported name (and `ops.layers`, the Keras 3 layers) is imported on first
use, so that `python -m ops.build --help` and the submodules that need no
TensorFlow yet do not load it. Without TensorFlow (the `tf` extra) importing
`ops` raises `sparse_io.extras.MissingExtraError`, a ModuleNotFoundError whose
message is the install command.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from sparse_io.extras import require

require("tensorflow", "ops")

if TYPE_CHECKING:
    from ops import layers
    from ops._native import stock_ops_only
    from ops.block_layouts import banded_layout, magnitude_layout, random_layout
    from ops.block_sparse import BlockSparseMatMul, block_sparse_matmul
    from ops.convert_to_coo import convert_to_coo
    from ops.coo import Coo
    from ops.embedding_bag import embedding_bag
    from ops.pad_coo import pad_coo
    from ops.to_coo import to_coo

# exported name -> the submodule that defines it (None: the name is the submodule itself).
_HOMES: dict[str, str | None] = {
    "BlockSparseMatMul": "ops.block_sparse",
    "Coo": "ops.coo",
    "banded_layout": "ops.block_layouts",
    "block_sparse_matmul": "ops.block_sparse",
    "convert_to_coo": "ops.convert_to_coo",
    "embedding_bag": "ops.embedding_bag",
    "layers": None,
    "magnitude_layout": "ops.block_layouts",
    "pad_coo": "ops.pad_coo",
    "random_layout": "ops.block_layouts",
    "stock_ops_only": "ops._native",
    "to_coo": "ops.to_coo",
}

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


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'ops' has no attribute {name!r}")
    home = _HOMES[name]
    value = importlib.import_module(f"ops.{name}") if home is None else getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


class _Package(types.ModuleType):
    """The `ops` module's type: `ops.to_coo` stays the function when its submodule `ops.to_coo` is imported.

    The import system binds each loaded submodule on its package, which would shadow the four functions
    named like their modules (`to_coo`, `convert_to_coo`, `embedding_bag`, `pad_coo`); those bind the
    function instead, as the package's eager imports did.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _HOMES.get(name) == value.__name__ == f"ops.{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
