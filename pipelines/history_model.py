"""Models of user histories: the next item a user picks, or the rating they give it.

    history ids (+ ratings as weights) --EmbeddingBag-+
    side lists (event, item columns) --EmbeddingBag-+-concat--BlockSparseDense x L--Dense(dim)--> user vector u
    side numbers --log1p + missing flag-------------+
    target item id --Embedding-- (+ Embedding of each target item column) ----------------------> item vector v
    rating:    r = u . v + user bias + item bias + global bias   (squared error; the user bias from the tower)
    next_item: logits = u . v' + bias' for every target v' of the batch, the
               row's own target the right answer (softmax over in-batch negatives);
               evaluation ranks u against every item of the catalogue instead

Inputs are what `transforms.make_dataset(output="coo")` yields for a history
ingest (`examples_per_event: true`): the history as a COO triple under the
item feature's name, and the target item (`target_<item>`, hashed into the
same id space) as a float32 `[B]` dense feature. A history ingest's side
columns (`history_role` "event" and "item_column" in schema.json) come as
COO triples (lists of ids) or `[B]` numbers; its target item columns
(`target_<column>`) as `[B]` ids, embedded beside the target item.
"""

from __future__ import annotations

import keras
import tensorflow as tf

import ops.layers
from pipelines.model import normalise_dense

__all__ = ["HistoryModel", "TASKS"]

TASKS = ("rating", "next_item")
# Hashed ids travel as float32 dense features; past 2**24 they would not be exact.
MAX_EXACT_ID = 2**24


def _every_row_layout(k_blocks: int, n_blocks: int, density: float, seed: int):
    """`ops.random_layout(..., every_column=True)` with one more block in each block row that has none."""
    import numpy as np

    layout = ops.random_layout(k_blocks, n_blocks, density, seed=seed, every_column=True)
    empty = np.flatnonzero(~layout.any(axis=1))
    layout[empty, np.random.default_rng(seed).integers(n_blocks, size=empty.size)] = True
    return layout


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
      side_sparse: input name -> id range of each list of ids the user tower
        embeds beside the history (event columns, item-column lists).
      side_dense: input names of the numbers the user tower takes (`[B]`,
        NaN or `transforms.MISSING_INT` where missing).
      target_sides: input name -> id range of each `[B]` id describing the
        target (`target_<item column>`), embedded into the item vector.
      tables: side list -> shared table name, for side lists that share one
        id space (schema.json's `shared_vocabulary`): they look up ONE
        embedding table (each still gives its own bag).

    Raises:
      ValueError: an unknown task or a vocabulary past 2**24 ids.
    """

    def __init__(self, item_feature: str, vocab_size: int, task: str = "rating", embedding_dim: int = 16,
                 hidden_units: tuple[int, ...] = (64,), density: float = 0.5, block_size: int = 16,
                 combiner: str = "mean", seed: int = 0, side_sparse: dict[str, int] | None = None,
                 side_dense: list[str] | tuple[str, ...] = (), target_sides: dict[str, int] | None = None,
                 tables: dict[str, str] | None = None, **kwargs):
        super().__init__(**kwargs)
        if task not in TASKS:
            raise ValueError(f"HistoryModel: task must be one of {TASKS}, got {task!r}")
        if vocab_size > MAX_EXACT_ID:
            raise ValueError(f"HistoryModel: vocab_size {vocab_size} is past 2**24; target ids would not be exact")
        self.item_feature, self.vocab_size, self.task = item_feature, int(vocab_size), task
        self.embedding_dim, self.hidden_units = embedding_dim, tuple(hidden_units)
        self.density, self.block_size, self.combiner, self.seed = density, block_size, combiner, seed
        self.side_sparse = dict(sorted((side_sparse or {}).items()))
        self.side_dense = list(side_dense)
        self.target_sides = dict(sorted((target_sides or {}).items()))
        # Direct attributes: tf.train.Checkpoint follows attributes, not Keras lists.
        self.history_bag = ops.layers.EmbeddingBag(vocab_size, embedding_dim, combiner=combiner, name="history")
        for i, units in enumerate(self.hidden_units):
            # The first layer reads every input block: one with no block in the layout (a side input's
            # embedding) would never reach the output, and never learn.
            shape = dict(layout=_every_row_layout(self.history_width // block_size, units // block_size, density,
                                                  seed)) if i == 0 else dict(density=density)
            setattr(self, f"hidden_{i}", ops.layers.BlockSparseDense(
                units, **shape, block_size=block_size, activation="relu", seed=seed + i, name=f"hidden_{i}"))
        self.user_projection = keras.layers.Dense(embedding_dim, name="user")
        self.items = keras.layers.Embedding(vocab_size, embedding_dim, name="items")
        self.item_bias = keras.layers.Embedding(vocab_size, 1, embeddings_initializer="zeros", name="item_bias")
        self.tables = {n: t for n, t in sorted((tables or {}).items())}
        unknown = sorted(set(self.tables) - set(self.side_sparse))
        if unknown:
            raise ValueError(f"HistoryModel: tables names {unknown[0]!r}, which is not a side list")
        first_of: dict[str, int] = {}  # shared table -> the index of the side list that owns its layer
        for i, (name, size) in enumerate(self.side_sparse.items()):
            table = self.tables.get(name)
            if table in first_of:
                owner = getattr(self, f"side_{first_of[table]}")
                if owner.vocab_size != size:
                    raise ValueError(f"HistoryModel: the side lists of shared table {table!r} have different "
                                     f"id ranges ({owner.vocab_size}, {size}); one table needs one")
                setattr(self, f"side_{i}", owner)  # the same layer: one table
                continue
            if table is not None:
                first_of[table] = i
            setattr(self, f"side_{i}", ops.layers.EmbeddingBag(
                size, embedding_dim, combiner=combiner, name=f"shared_{table}" if table else f"side_{name}"))
        for i, (name, size) in enumerate(self.target_sides.items()):
            setattr(self, f"target_side_{i}", keras.layers.Embedding(size, embedding_dim, name=f"target_{name}"))
        if task == "rating":  # a constant shift (and a per-user one) cancels in next_item's softmax
            # r = u . v + user bias + item bias + global bias: a user's (or context's) level needs no item.
            self.user_bias = keras.layers.Dense(1, name="user_bias")
            self.global_bias = self.add_weight(shape=(), initializer=keras.initializers.Constant(3.0),
                                               name="global_bias")

    @property
    def target_feature(self) -> str:
        """The input name of the item each example scores: `target_<item feature>`."""
        return "target_" + self.item_feature

    @property
    def user_features_width(self) -> int:
        """The user tower's input width: the history's and side lists' embeddings, and two per side number."""
        return self.embedding_dim * (1 + len(self.side_sparse)) + 2 * len(self.side_dense)

    @property
    def history_width(self) -> int:
        """The user tower's input width rounded up to a multiple of `block_size`."""
        return self.user_features_width + (-self.user_features_width) % self.block_size

    def build(self, input_shape=None) -> None:
        """Creates every variable from the config alone."""
        self.history_bag.build()
        width = self.history_width
        for i in range(len(self.hidden_units)):
            layer = getattr(self, f"hidden_{i}")
            layer.build((None, width))
            width = layer.units
        self.user_projection.build((None, width))
        if self.task == "rating":
            self.user_bias.build((None, width))
        self.items.build((None,))
        self.item_bias.build((None,))
        sides = [getattr(self, f"side_{i}") for i in range(len(self.side_sparse))]
        for layer in {id(layer): layer for layer in sides}.values():  # a shared table once
            layer.build()
        for i in range(len(self.target_sides)):
            getattr(self, f"target_side_{i}").build((None,))

    def _user_hidden(self, features: dict, batch) -> tf.Tensor:
        """float32 `[B, hidden_units[-1]]`: the history and the event's side columns through the hidden layers."""
        parts = [self.history_bag((*features[self.item_feature][:3], batch))]
        parts += [getattr(self, f"side_{i}")((*features[name][:3], batch)) for i, name in enumerate(self.side_sparse)]
        for name in self.side_dense:
            value, missing = normalise_dense(features[name])
            parts.append(tf.stack([value, missing], axis=1))
        x = tf.concat(parts, axis=1) if len(parts) > 1 else parts[0]
        if self.history_width > self.user_features_width:
            x = tf.pad(x, [[0, 0], [0, self.history_width - self.user_features_width]])
        for i in range(len(self.hidden_units)):
            x = getattr(self, f"hidden_{i}")(x)
        return x

    def user_vector(self, features: dict, batch) -> tf.Tensor:
        """float32 `[B, embedding_dim]`: the history tower's output for `batch` (an int32 scalar) rows.

        Scoring it against `items` (plus `item_bias`) ranks any item for these users, the whole
        catalogue included (`pipelines.evaluation`).
        """
        return self.user_projection(self._user_hidden(features, batch))

    def call(self, features: dict, training: bool = False) -> tf.Tensor:
        target = tf.cast(features[self.target_feature], tf.int64)
        static = target.shape[0]
        batch = tf.constant(static, tf.int32) if static is not None else tf.shape(target, out_type=tf.int32)[0]
        hidden = self._user_hidden(features, batch)
        user = self.user_projection(hidden)
        item = self.items(target)
        for i, name in enumerate(self.target_sides):
            item = item + getattr(self, f"target_side_{i}")(tf.cast(features[name], tf.int64))
        bias = tf.squeeze(self.item_bias(target), 1)
        if self.task == "next_item":
            return tf.matmul(user, item, transpose_b=True) + bias[None, :]
        return tf.reduce_sum(user * item, axis=1) + tf.squeeze(self.user_bias(hidden), 1) + bias + self.global_bias

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(item_feature=self.item_feature, vocab_size=self.vocab_size, task=self.task,
                      embedding_dim=self.embedding_dim, hidden_units=list(self.hidden_units), density=self.density,
                      block_size=self.block_size, combiner=self.combiner, seed=self.seed,
                      side_sparse=self.side_sparse, side_dense=self.side_dense, target_sides=self.target_sides,
                      tables=self.tables)
        return config
