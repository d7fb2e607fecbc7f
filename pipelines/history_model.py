"""Models of user histories: the next item a user picks, or the rating they give it.

    history ids (+ ratings as weights) --EmbeddingBag--BlockSparseDense x L--Dense(dim)--> user vector u
    target item id --------------------------------------Embedding-------------------> item vector v
    rating:    r = u . v + item bias + global bias       (squared error)
    next_item: logits = u . v' + bias' for every target v' of the batch, the
               row's own target the right answer (softmax over in-batch negatives);
               evaluation ranks u against every item of the catalogue instead

Inputs are what `transforms.make_dataset(output="coo")` yields for a history
ingest (`examples_per_event: true`): the history as a COO triple under the
item feature's name, and the target item (`target_<item>`, hashed into the
same id space) as a float32 `[B]` dense feature.
"""

from __future__ import annotations

import keras
import tensorflow as tf

import ops.layers

__all__ = ["HistoryModel", "TASKS"]

TASKS = ("rating", "next_item")
# Hashed ids travel as float32 dense features; past 2**24 they would not be exact.
MAX_EXACT_ID = 2**24


@keras.saving.register_keras_serializable(package="sparseflow")
class HistoryModel(keras.Model):
    """Two towers over a shared id space: a history tower and an item embedding.

    Args:
      item_feature: the history feature's name (its target is `target_<name>`).
      vocab_size: ids of the item feature (hash buckets), at most 2**24.
      task: "rating" (returns predicted ratings `[B]`) or "next_item"
        (returns in-batch logits `[B, B]`, row i's answer in column i).
      embedding_dim, hidden_units, density, block_size, combiner, seed: as in
        `CtrModel`; `hidden_units` multiples of `block_size`.

    Raises:
      ValueError: an unknown task or a vocabulary past 2**24 ids.
    """

    def __init__(self, item_feature: str, vocab_size: int, task: str = "rating", embedding_dim: int = 16,
                 hidden_units: tuple[int, ...] = (64,), density: float = 0.5, block_size: int = 16,
                 combiner: str = "mean", seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        if task not in TASKS:
            raise ValueError(f"HistoryModel: task must be one of {TASKS}, got {task!r}")
        if vocab_size > MAX_EXACT_ID:
            raise ValueError(f"HistoryModel: vocab_size {vocab_size} is past 2**24; target ids would not be exact")
        self.item_feature, self.vocab_size, self.task = item_feature, int(vocab_size), task
        self.embedding_dim, self.hidden_units = embedding_dim, tuple(hidden_units)
        self.density, self.block_size, self.combiner, self.seed = density, block_size, combiner, seed
        # Direct attributes: tf.train.Checkpoint follows attributes, not Keras lists.
        self.history_bag = ops.layers.EmbeddingBag(vocab_size, embedding_dim, combiner=combiner, name="history")
        for i, units in enumerate(self.hidden_units):
            setattr(self, f"hidden_{i}", ops.layers.BlockSparseDense(
                units, density=density, block_size=block_size, activation="relu", seed=seed + i, name=f"hidden_{i}"))
        self.user_projection = keras.layers.Dense(embedding_dim, name="user")
        self.items = keras.layers.Embedding(vocab_size, embedding_dim, name="items")
        self.item_bias = keras.layers.Embedding(vocab_size, 1, embeddings_initializer="zeros", name="item_bias")
        if task == "rating":  # a constant shift cancels in next_item's softmax
            self.global_bias = self.add_weight(shape=(), initializer=keras.initializers.Constant(3.0),
                                               name="global_bias")

    @property
    def target_feature(self) -> str:
        """The input name of the item each example scores: `target_<item feature>`."""
        return "target_" + self.item_feature

    @property
    def history_width(self) -> int:
        """The history embedding's width: `embedding_dim` rounded up to a multiple of `block_size`."""
        return self.embedding_dim + (-self.embedding_dim) % self.block_size

    def build(self, input_shape=None) -> None:
        """Creates every variable from the config alone."""
        self.history_bag.build()
        width = self.history_width
        for i in range(len(self.hidden_units)):
            layer = getattr(self, f"hidden_{i}")
            layer.build((None, width))
            width = layer.units
        self.user_projection.build((None, width))
        self.items.build((None,))
        self.item_bias.build((None,))

    def user_vector(self, features: dict, batch) -> tf.Tensor:
        """float32 `[B, embedding_dim]`: the history tower's output for `batch` (an int32 scalar) rows.

        Scoring it against `items` (plus `item_bias`) ranks any item for these users, the whole
        catalogue included (`pipelines.evaluation`).
        """
        x = self.history_bag((*features[self.item_feature][:3], batch))
        if self.history_width > self.embedding_dim:
            x = tf.pad(x, [[0, 0], [0, self.history_width - self.embedding_dim]])
        for i in range(len(self.hidden_units)):
            x = getattr(self, f"hidden_{i}")(x)
        return self.user_projection(x)

    def call(self, features: dict, training: bool = False) -> tf.Tensor:
        target = tf.cast(features[self.target_feature], tf.int64)
        static = target.shape[0]
        batch = tf.constant(static, tf.int32) if static is not None else tf.shape(target, out_type=tf.int32)[0]
        user = self.user_vector(features, batch)
        item = self.items(target)
        bias = tf.squeeze(self.item_bias(target), 1)
        if self.task == "next_item":
            return tf.matmul(user, item, transpose_b=True) + bias[None, :]
        return tf.reduce_sum(user * item, axis=1) + bias + self.global_bias

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(item_feature=self.item_feature, vocab_size=self.vocab_size, task=self.task,
                      embedding_dim=self.embedding_dim, hidden_units=list(self.hidden_units), density=self.density,
                      block_size=self.block_size, combiner=self.combiner, seed=self.seed)
        return config
