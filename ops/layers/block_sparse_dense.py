"""`BlockSparseDense`: a Keras 3 dense layer whose kernel is block-sparse."""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from ops.block_layouts import check_layout, random_layout
from ops.block_sparse import BlockSparseMatMul

__all__ = ["BlockSparseDense"]


@keras.saving.register_keras_serializable(package="sparseflow")
class BlockSparseDense(keras.layers.Layer):
    """`activation(x @ W + bias)` with W `[K, units]` made of `block_size` square blocks.

    Args:
      units: output width, a multiple of block_size.
      density: fraction of blocks kept, drawn at build time with `seed`
        (`ops.random_layout(..., every_column=True)`: every output block gets
        at least one input block, so no unit is stuck at its bias); or
      layout: a bool `[K / block_size, units / block_size]` array (or a list
        of "0"/"1" strings, one per block row, as `get_config` writes it).
        Give exactly one of density and layout.
      block_size: block edge.
      activation, use_bias, bias_initializer: as in `keras.layers.Dense`.
      kernel_initializer: Keras initializer of the `[nnz_blocks, bs, bs]`
        blocks; by default Glorot-uniform scaled to the connections each
        unit really has (blocks per column and per row times block_size).
      seed: seed of the random layout and of the default initializer.

    Input `[..., K]`, output `[..., units]`. The kernel is the weight
    `kernel` `[nnz_blocks, bs, bs]`; `layer.plan` is its `BlockSparseMatMul`.

    Example:
      >>> layer = BlockSparseDense(64, density=0.25, block_size=16)
      >>> layer(tf.ones([2, 32])).shape
      TensorShape([2, 64])
    """

    def __init__(
        self,
        units: int,
        density: float | None = None,
        layout=None,
        block_size: int = 32,
        activation=None,
        use_bias: bool = True,
        kernel_initializer=None,
        bias_initializer="zeros",
        seed: int = 0,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if (density is None) == (layout is None):
            raise ValueError("BlockSparseDense: give exactly one of density and layout")
        if block_size < 1 or units < 1 or units % block_size:
            raise ValueError(
                f"BlockSparseDense: units ({units}) must be a positive multiple of block_size ({block_size})"
            )
        if density is not None and not 0.0 <= density <= 1.0:
            raise ValueError(f"BlockSparseDense: density must be in [0, 1], got {density}")
        self.units = int(units)
        self.density = None if density is None else float(density)
        self.layout = None if layout is None else _parse_layout(layout)
        if self.layout is not None and self.layout.shape[1] * block_size != units:
            raise ValueError(
                f"BlockSparseDense: layout has {self.layout.shape[1]} block columns, units/block_size is "
                f"{units // block_size}"
            )
        self.block_size = int(block_size)
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = (
            None if kernel_initializer is None else keras.initializers.get(kernel_initializer)
        )
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = int(seed)
        self.plan: BlockSparseMatMul | None = None

    def build(self, input_shape) -> None:
        features = input_shape[-1]
        if features is None or features % self.block_size:
            raise ValueError(
                f"BlockSparseDense {self.name}: input features ({features}) must be a known multiple of "
                f"block_size ({self.block_size})"
            )
        grid = (features // self.block_size, self.units // self.block_size)
        layout = self.layout
        if layout is None:
            assert self.density is not None  # __init__ takes exactly one of density and layout
            layout = self.layout = random_layout(*grid, self.density, seed=self.seed, every_column=True)
        elif layout.shape != grid:
            raise ValueError(
                f"BlockSparseDense {self.name}: layout shape {layout.shape} != block grid {grid}"
            )
        plan = self.plan = BlockSparseMatMul(layout, self.block_size)
        self.kernel = self.add_weight(
            shape=plan.weight_shape, initializer=self._default_initializer(plan), name="kernel"
        )
        self.bias = (
            self.add_weight(shape=(self.units,), initializer=self.bias_initializer, name="bias")
            if self.use_bias
            else None
        )

    def call(self, inputs):
        x = tf.convert_to_tensor(inputs)
        rows = tf.reshape(x, (-1, x.shape[-1]))
        assert self.plan is not None  # Keras builds a layer before its first call
        y = self.plan(rows, tf.cast(self.kernel.value, rows.dtype))
        y = tf.reshape(y, tf.concat([tf.shape(x)[:-1], [self.units]], axis=0))
        if self.bias is not None:
            y = y + tf.cast(self.bias.value, y.dtype)
        return self.activation(y)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            units=self.units,
            # Once built the layout is stored, so loading never depends on redrawing it.
            density=None if self.layout is not None else self.density,
            layout=None
            if self.layout is None
            else ["".join("1" if b else "0" for b in row) for row in self.layout],
            block_size=self.block_size,
            activation=keras.activations.serialize(self.activation),
            use_bias=self.use_bias,
            kernel_initializer=None
            if self.kernel_initializer is None
            else keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            seed=self.seed,
        )
        return config

    def _default_initializer(self, plan: BlockSparseMatMul):
        if self.kernel_initializer is not None:
            return self.kernel_initializer
        nnz, (k_blocks, n_blocks) = plan.nnz_blocks, plan.layout.shape
        fan_in = max(nnz / n_blocks, 1.0) * self.block_size
        fan_out = max(nnz / k_blocks, 1.0) * self.block_size
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        return keras.initializers.RandomUniform(-limit, limit, seed=self.seed)


def _parse_layout(layout) -> np.ndarray:
    if isinstance(layout, (list, tuple)) and layout and all(isinstance(row, str) for row in layout):
        if any(set(row) - {"0", "1"} for row in layout) or len({len(row) for row in layout}) != 1:
            raise ValueError("BlockSparseDense: a layout given as strings needs equal-length rows of 0 and 1")
        return np.array([[c == "1" for c in row] for row in layout], dtype=bool)
    return check_layout(layout, "BlockSparseDense")
