"""`EmbeddingBag`: a Keras 3 layer that combines the embeddings of each sample's ids."""

from __future__ import annotations

import keras
import tensorflow as tf

from ops._coo_checks import after, require
from ops._xla import in_xla_context
from ops.convert_to_coo import COMBINERS
from ops.coo import Coo, split_coo
from ops.embedding_bag import PARTITION_STRATEGIES, embedding_bag
from ops.to_coo import to_coo

__all__ = ["EmbeddingBag"]


@keras.saving.register_keras_serializable(package="sparseflow")
class EmbeddingBag(keras.layers.Layer):
    """Embeds a bag of ids per sample: `out[s] = combine(table[ids of s], weights of s)`.

    Args:
      vocab_size: number of ids; ids must lie in `[0, vocab_size)`.
      dim: embedding width.
      combiner: "sum", "mean" or "sqrtn", applied to ragged, sparse and dict
        inputs (by `ops.to_coo`). COO tuples carry gains already combined.
      num_shards: split the table into this many variables (same result).
      partition_strategy: "mod" (id i in shard i % num_shards) or "div"
        (consecutive id ranges, the first `vocab_size % num_shards` shards one
        row longer).
      sample_count: number of samples of COO inputs that do not carry their
        own (a static output shape, as XLA needs). Without either, a COO
        input's count is `max(row_ids) + 1`, and a COO that ends in padding
        entries is an error (see Raises).
      embeddings_initializer: Keras initializer of the table.

    Inputs (one of):
      - `tf.RaggedTensor` `[batch, None]` of int ids;
      - 2-D `tf.SparseTensor` `[batch, max_ids]` of int ids, indices sorted by row;
      - an `ops.Coo` (what `make_dataset(output="coo")` yields per feature),
        or `(row_ids, col_ids, gains)` / `(row_ids, col_ids, gains,
        sample_count)` tuples (sample_count an int scalar tensor): COO as
        `ops.convert_to_coo` / `ops.pad_coo` write it (padding rows equal to
        sample_count are ignored). The input's own sample_count wins over
        the layer's;
      - `{"ids": ragged or sparse ids, "weights": same-shaped float weights}`.

    Output: `[batch, dim]` in the layer's compute dtype. The table gradient is
    a `tf.IndexedSlices` over the batch's distinct ids.

    Raises:
      tf.errors.InvalidArgumentError: a COO input with no sample count (none
        carried, none given to the layer) whose last row looks like padding
        (every entry of it has col_id 0 and gain 0, as `ops.pad_coo` writes
        padding): counting it would return `[batch + 1, dim]`. Pass the
        `ops.Coo` from make_dataset whole, a 4-tuple, or `sample_count=`.
        (Not checked inside XLA-compiled functions, which need a static
        sample count anyway.)

    Example:
      >>> layer = EmbeddingBag(vocab_size=100, dim=8, combiner="mean")
      >>> layer(tf.ragged.constant([[1, 2, 2], [7]], dtype=tf.int64)).shape
      TensorShape([2, 8])
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        combiner: str = "mean",
        num_shards: int = 1,
        partition_strategy: str = "mod",
        sample_count: int | None = None,
        embeddings_initializer="uniform",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if vocab_size < 1 or dim < 1:
            raise ValueError(f"EmbeddingBag: vocab_size and dim must be >= 1, got {vocab_size} and {dim}")
        if combiner not in COMBINERS:
            raise ValueError(f"EmbeddingBag: combiner must be one of {COMBINERS}, got {combiner!r}")
        if not 1 <= num_shards <= vocab_size:
            raise ValueError(f"EmbeddingBag: num_shards must be in [1, vocab_size], got {num_shards}")
        if partition_strategy not in PARTITION_STRATEGIES:
            raise ValueError(
                f"EmbeddingBag: partition_strategy must be one of {PARTITION_STRATEGIES}, "
                f"got {partition_strategy!r}"
            )
        if sample_count is not None and sample_count < 0:
            raise ValueError(f"EmbeddingBag: sample_count must be >= 0, got {sample_count}")
        self.vocab_size = int(vocab_size)
        self.dim = int(dim)
        self.combiner = combiner
        self.num_shards = int(num_shards)
        self.partition_strategy = partition_strategy
        self.sample_count = None if sample_count is None else int(sample_count)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self._shard_names: list[str] = []

    def __call__(self, inputs, *args, **kwargs):
        # Keras refuses an input that mixes tensors with Python values, and an ops.Coo from
        # ops.pad_coo or ops.to_coo carries a known sample count as a Python int (or None).
        if isinstance(inputs, Coo) and not tf.is_tensor(inputs.sample_count):
            count = inputs.sample_count
            inputs = tuple(inputs[:3]) if count is None else inputs._replace(sample_count=tf.constant(count, tf.int32))
        return super().__call__(inputs, *args, **kwargs)

    def shard_sizes(self) -> list[int]:
        """Rows of each shard: `ceil((vocab - s) / shards)` for "mod", the same counts in order for "div"."""
        base, extra = divmod(self.vocab_size, self.num_shards)
        return [base + (1 if s < extra else 0) for s in range(self.num_shards)]

    def build(self, input_shape=None) -> None:
        names = (
            ["embeddings"] if self.num_shards == 1 else [f"embeddings_{s}" for s in range(self.num_shards)]
        )
        # Direct attributes, not a list: tf.train.Checkpoint follows attributes only.
        for name, rows in zip(names, self.shard_sizes()):
            setattr(self, name, self.add_weight(shape=(rows, self.dim), initializer=self.embeddings_initializer,
                                                name=name))
        self._shard_names = names

    @property
    def shards(self) -> list:
        """The table's variables, shard 0 first (empty before `build`)."""
        return [getattr(self, name) for name in self._shard_names]

    def call(self, inputs):
        row_ids, col_ids, gains, sample_count = self._coo(inputs)
        table = [shard.value for shard in self.shards]  # the tf.Variables: their gather gradient is sparse
        out = embedding_bag(
            table,
            row_ids,
            col_ids,
            gains,
            sample_count,
            partition_strategy=self.partition_strategy,
            name=self.name,
        )
        return tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        if isinstance(input_shape, dict):
            input_shape = input_shape["ids"]
        if (
            isinstance(input_shape, (list, tuple))
            and input_shape
            and isinstance(input_shape[0], (list, tuple))
        ):
            return (self.sample_count, self.dim)  # a COO tuple: the batch size is not in its shapes
        return (input_shape[0], self.dim)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            dim=self.dim,
            combiner=self.combiner,
            num_shards=self.num_shards,
            partition_strategy=self.partition_strategy,
            sample_count=self.sample_count,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
        )
        return config

    def _coo(self, inputs):
        """(row_ids, col_ids, gains, sample_count) for any accepted input kind."""
        if isinstance(inputs, dict):
            if "ids" not in inputs:
                raise ValueError(
                    f"EmbeddingBag {self.name}: a dict input needs an 'ids' entry, got {list(inputs)}"
                )
            return self._combined(inputs["ids"], inputs.get("weights"))
        if isinstance(inputs, (tf.RaggedTensor, tf.SparseTensor)):
            return self._combined(inputs, None)
        if isinstance(inputs, (list, tuple)) and len(inputs) in (3, 4):
            row_ids, col_ids, gains, sample_count = split_coo(inputs)
            if sample_count is None:
                sample_count = self.sample_count
            if sample_count is None:
                row_ids, sample_count = self._counted_samples(row_ids, col_ids, gains)
            return row_ids, col_ids, gains, sample_count
        raise ValueError(
            f"EmbeddingBag {self.name}: expected a RaggedTensor, a SparseTensor, a (row_ids, col_ids, gains"
            f"[, sample_count]) tuple or a dict with 'ids' and 'weights', got {type(inputs).__name__}"
        )

    def _counted_samples(self, row_ids, col_ids, gains):
        """(row_ids, max(row_ids) + 1), refusing a COO whose last row is padding."""
        row_ids = tf.convert_to_tensor(row_ids)
        rows = tf.cast(row_ids, tf.int64)
        last = tf.reduce_max(tf.concat([rows, tf.constant([-1], tf.int64)], 0))
        if not in_xla_context():
            is_padding = tf.logical_and(tf.equal(tf.cast(col_ids, tf.int64), 0), tf.equal(gains, 0))
            padded = tf.logical_and(
                tf.size(rows) > 0, tf.reduce_all(tf.logical_or(tf.not_equal(rows, last), is_padding))
            )
            check = require(
                tf.logical_not(padded),
                f"EmbeddingBag {self.name}: this COO input carries no sample_count and its last row looks like "
                "padding (every entry col_id 0, gain 0, as ops.pad_coo writes it), so max(row_ids) + 1 would "
                "return one row too many; pass the ops.Coo from make_dataset whole (it carries sample_count), a "
                "(row_ids, col_ids, gains, sample_count) tuple, or EmbeddingBag(sample_count=...)",
            )
            (rows,) = after([check], rows)
            last = tf.reduce_max(tf.concat([rows, tf.constant([-1], tf.int64)], 0))
            row_ids = tf.cast(rows, row_ids.dtype)
        return row_ids, tf.cast(last, tf.int32) + 1

    def _combined(self, ids, weights):
        return tuple(to_coo(ids, weights=weights, combiner=self.combiner, name=self.name))
