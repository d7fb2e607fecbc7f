"""The recommendation model the trainer builds: embedding bags, dense features, block-sparse MLP.

    sparse features --EmbeddingBag (one per id space)-+
                                                      +--concat--BlockSparseDense x L--Dense(1)--logit
    dense features  --log1p(max(x, 0)) + missing flag-+

Inputs are the COO batches `transforms.make_dataset(output="coo")` yields
(one `(row_ids, col_ids, gains)` per sparse feature, padded rows point at
row `batch_size` and are ignored) and `[B]` dense features: float32/float64
with NaN where missing, or int64 (counts, integer columns) with
`transforms.MISSING_INT` where missing, cast to float32 here, after the
missing test. Timestamp columns (a `time_unit` in schema.json) are not model
inputs: an absolute time says nothing about held-out or future rows. A COO
triple does not say how many rows its batch has, so a model without dense
features reads the row count from `features[BATCH_ROWS]` (an int scalar;
`Task.model_inputs` and the serving signature add it).
"""

from __future__ import annotations

import keras
import tensorflow as tf

import ops.layers

__all__ = ["CtrModel", "normalise_dense", "BATCH_ROWS"]

BATCH_ROWS = "__batch_rows__"


# The int64 minimum: how `transforms.make_dataset` marks a missing integer (transforms.MISSING_INT).
_MISSING_INT = -(2**63)


def normalise_dense(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns `(log1p(max(x, 0)) with 0 for missing, 1.0 where x was missing)`, both float32 `[B]`.

    `x` is float (NaN is missing) or integer (the int64 minimum is missing).
    Counts in click logs span orders of magnitude; the log keeps them in a
    range an MLP trains on, and the flag lets the model tell 0 from missing.
    """
    if x.dtype.is_integer:
        missing = tf.equal(tf.cast(x, tf.int64), _MISSING_INT)
    else:
        missing = tf.math.is_nan(x)
    x = tf.cast(x, tf.float32)
    value = tf.math.log1p(tf.maximum(tf.where(missing, tf.zeros_like(x), x), 0.0))
    return value, tf.cast(missing, tf.float32)


@keras.saving.register_keras_serializable(package="sparseflow")
class CtrModel(keras.Model):
    """Binary click model over sparse and dense features.

    Args:
      vocab_sizes: sparse feature name -> number of ids (hash buckets).
      dense_features: names of the dense (numeric) features.
      embedding_dim: width of every embedding table.
      hidden_units: widths of the block-sparse hidden layers (multiples of
        `block_size`).
      density: fraction of weight blocks kept in each hidden layer.
      block_size: block edge of the block-sparse layers.
      combiner: how ids of one row combine ("sum", "mean", "sqrtn").
      seed: seeds the block layouts.
      tables: sparse feature -> shared table name, for features that share one id space (schema.json's
        `shared_vocabulary`): they look up ONE `EmbeddingBag` (each still gives its own bag of the row's
        ids); the others get a table each.
      output_shift, output_scale: the output is `output_shift + output_scale * head(x)`. A click model keeps
        0 and 1 (a logit); a regression model starts from the training labels' mean and spread, so its first
        step predicts the mean and the head learns deviations of order 1 whatever the label's units.

    Call: `model(features)` with the dict described in the module docstring;
    returns `[B]`: logits of a click model, predictions of a regression model.

    Example:
      >>> model = CtrModel({"user": 10}, ["age"], hidden_units=(16,), block_size=16, output_shift=3.5)
      >>> model.build()  # doctest: +SKIP
    """

    def __init__(
        self,
        vocab_sizes: dict[str, int],
        dense_features: list[str],
        embedding_dim: int = 16,
        hidden_units: tuple[int, ...] = (256, 128),
        density: float = 0.25,
        block_size: int = 32,
        combiner: str = "mean",
        seed: int = 0,
        output_shift: float = 0.0,
        output_scale: float = 1.0,
        tables: dict[str, str] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_sizes = dict(sorted(vocab_sizes.items()))
        self.tables = {name: table for name, table in sorted((tables or {}).items())}
        unknown = sorted(set(self.tables) - set(self.vocab_sizes))
        if unknown:
            raise ValueError(f"CtrModel: tables names {unknown[0]!r}, which is not a sparse feature of vocab_sizes")
        self.dense_features = list(dense_features)
        self.embedding_dim = embedding_dim
        self.hidden_units = tuple(hidden_units)
        self.density = density
        self.block_size = block_size
        self.combiner = combiner
        self.seed = seed
        self.output_shift, self.output_scale = float(output_shift), float(output_scale)
        # Each layer is a direct attribute: TensorFlow checkpoints follow attributes, not
        # the dicts and lists Keras tracks, and a layer they miss is silently not saved.
        for name, size in self.vocab_sizes.items():
            if name not in self.tables:
                layer = ops.layers.EmbeddingBag(size, embedding_dim, combiner=combiner, name=f"embedding_{name}")
                setattr(self, f"embedding_{name}", layer)
        for table in sorted(set(self.tables.values())):
            sizes = {self.vocab_sizes[n] for n, t in self.tables.items() if t == table}
            if len(sizes) != 1:
                raise ValueError(f"CtrModel: the features of shared table {table!r} have different id ranges "
                                 f"{sorted(sizes)}; one table needs one")
            layer = ops.layers.EmbeddingBag(sizes.pop(), embedding_dim, combiner=combiner,
                                            name=f"shared_embedding_{table}")
            setattr(self, f"shared_embedding_{table}", layer)
        for i, units in enumerate(self.hidden_units):
            layer = ops.layers.BlockSparseDense(
                units, density=density, block_size=block_size, activation="relu", seed=seed + i, name=f"hidden_{i}"
            )
            setattr(self, f"hidden_{i}", layer)
        self.head = keras.layers.Dense(1, name="logit")

    @property
    def embeddings(self) -> dict:
        """Sparse feature name -> its `EmbeddingBag` layer (the same layer for the features of a shared table)."""
        return {name: getattr(self, f"shared_embedding_{self.tables[name]}" if name in self.tables
                              else f"embedding_{name}") for name in self.vocab_sizes}

    @property
    def hidden(self) -> list:
        """The `BlockSparseDense` hidden layers, input side first."""
        return [getattr(self, f"hidden_{i}") for i in range(len(self.hidden_units))]

    @property
    def feature_width(self) -> int:
        """Width of the concatenated features entering the first hidden layer (padded to the block)."""
        width = len(self.vocab_sizes) * self.embedding_dim + 2 * len(self.dense_features)
        return width + (-width) % self.block_size

    def build(self, input_shape=None) -> None:
        """Creates every variable; the shapes follow from the config alone, not from a batch."""
        for layer in {id(layer): layer for layer in self.embeddings.values()}.values():  # a shared one once
            layer.build()
        width = self.feature_width
        for layer in self.hidden:
            layer.build((None, width))
            width = layer.units
        self.head.build((None, width))

    def call(self, features: dict, training: bool = False) -> tf.Tensor:
        batch = self._batch_size(features)
        parts = [
            self.embeddings[name]((*features[name][:3], batch)) for name in self.vocab_sizes
        ]
        for name in self.dense_features:
            value, missing = normalise_dense(features[name])
            parts.append(tf.stack([value, missing], axis=1))
        x = tf.concat(parts, axis=1)
        # Block-sparse layers need a feature width that is a multiple of the block.
        pad = self.feature_width - x.shape[-1]
        if pad:
            x = tf.pad(x, [[0, 0], [0, pad]])
        for layer in self.hidden:
            x = layer(x)
        out = tf.squeeze(self.head(x), axis=1)
        if self.output_scale != 1.0 or self.output_shift != 0.0:
            out = self.output_shift + self.output_scale * out
        return out

    def _batch_size(self, features: dict):
        for name in self.dense_features:
            static = features[name].shape[0]
            # A constant batch keeps the embedding output shape static for XLA
            # (Keras layers take tensors, not Python ints, in their inputs).
            return tf.constant(static, tf.int32) if static is not None else tf.shape(features[name])[0]
        if BATCH_ROWS in features:
            return tf.cast(features[BATCH_ROWS], tf.int32)
        raise ValueError(f"CtrModel has no dense feature: give the batch's row count as features[{BATCH_ROWS!r}]")

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            vocab_sizes=self.vocab_sizes,
            dense_features=self.dense_features,
            embedding_dim=self.embedding_dim,
            hidden_units=list(self.hidden_units),
            density=self.density,
            block_size=self.block_size,
            combiner=self.combiner,
            seed=self.seed,
            output_shift=self.output_shift,
            output_scale=self.output_scale,
            tables=self.tables,
        )
        return config
