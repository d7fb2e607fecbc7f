"""What the trainer learns from an ingest output: click-through, ratings or next items.

`resolve_task(schema, requested)` reads schema.json and picks (or checks) the
task; the returned `Task` knows which columns to read, which model to build,
its per-row loss, its held-out metrics and its serving export, so the
training loop in `pipelines.train` is the same for all three:

| task        | shards it needs                          | loss                      | held-out metrics      |
|-------------|------------------------------------------|---------------------------|-----------------------|
| `ctr`       | a label column (Criteo-style clicks)     | sigmoid cross-entropy     | loss, AUC             |
| `rating`    | a history `f` + `target_f` + `target_w`  | squared error             | RMSE, RMSE of the mean |
| `next_item` | a history `f` + `target_f`               | in-batch softmax          | loss, hit rate @10    |
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sparse_io.schema import Schema, SchemaError

__all__ = ["Task", "resolve_task", "TASK_CHOICES"]

TASK_CHOICES = ("auto", "ctr", "rating", "next_item")
_TARGET = "target_"


@dataclasses.dataclass(frozen=True)
class Task:
    """One training objective over one schema (see the module table)."""

    name: str
    features: tuple[str, ...] | None  # None: every non-label feature
    label: str
    item: str | None = None  # the history feature (rating, next_item)

    @property
    def target(self) -> str | None:
        """The input name of the item a history task scores (`target_<item>`); None for ctr."""
        return None if self.item is None else _TARGET + self.item

    def make_model(self, schema: Schema, args, hidden: tuple[int, ...]):
        """The Keras model of this task: a `CtrModel` for ctr, a `HistoryModel` otherwise.

        Args:
          schema: the shards' schema; sizes each embedding table from its id range.
          args: the parsed `pipelines.train` flags (embedding_dim, density, block_size, seed).
          hidden: the hidden layer widths.
        """
        if self.name == "ctr":
            from pipelines.model import CtrModel

            sizes = {s.name: _id_range(s) for s in schema.sparse}
            dense = [f.name for f in schema.dense if f.time_unit is None]  # timestamps: see pipelines.model
            return CtrModel(sizes, dense, embedding_dim=args.embedding_dim,
                            hidden_units=hidden, density=args.density, block_size=args.block_size, seed=args.seed)
        from pipelines.history_model import HistoryModel

        return HistoryModel(self.item, _id_range(schema[self.item]), self.name, embedding_dim=args.embedding_dim,
                            hidden_units=hidden, density=args.density, block_size=args.block_size, seed=args.seed)

    def model_inputs(self, features: dict, label) -> dict:
        """The model's input dict from a dataset element (next_item reads its target from the label)."""
        if self.name == "next_item":
            return {**features, self.target: label}
        from pipelines.model import BATCH_ROWS

        # A click model without dense features learns its row count from here.
        return {**features, BATCH_ROWS: _rows(label)}

    def per_row_loss(self, label, output):
        """float32 `[B]` losses of one batch (the trainer sums them and divides by the global batch)."""
        import tensorflow as tf

        if self.name == "ctr":
            return tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(label, tf.float32), logits=output)
        if self.name == "rating":
            return tf.square(output - tf.cast(label, tf.float32))
        answers = tf.range(tf.shape(output)[0])
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=answers, logits=output)

    def evaluate(self, model, dataset) -> dict:
        """Held-out metrics over every batch of `dataset` (`(features, label)` elements)."""
        import keras
        import tensorflow as tf

        losses, hits, labels, count = [], 0, [], 0
        auc = keras.metrics.AUC(num_thresholds=2000)
        for features, label in dataset:
            output = model(self.model_inputs(features, label), training=False)
            losses.append(float(tf.reduce_sum(self.per_row_loss(label, output))))
            count += int(tf.shape(label)[0])
            if self.name == "ctr":
                auc.update_state(tf.cast(label, tf.float32), tf.sigmoid(output))
            elif self.name == "rating":
                labels.append(label.numpy())
            else:
                # The row's own target among the 10 highest-scored targets of its batch.
                top = tf.math.top_k(output, k=min(10, int(tf.shape(output)[1]))).indices
                own = tf.range(tf.shape(output)[0])[:, None]
                hits += int(tf.reduce_sum(tf.cast(tf.reduce_any(tf.equal(top, own), axis=1), tf.int32)))
        mean_loss = float(np.sum(losses) / max(count, 1))
        result = {"eval_rows": count, "eval_loss": mean_loss}
        if self.name == "ctr":
            result["eval_auc"] = float(auc.result())
        elif self.name == "rating":
            ratings = np.concatenate(labels) if labels else np.zeros(0)
            result["eval_rmse"] = float(np.sqrt(mean_loss))
            result["eval_rmse_of_mean"] = float(np.std(ratings)) if ratings.size else float("nan")
        else:
            result["eval_hit_rate_at_10"] = hits / max(count, 1)
        return result

    def export(self, model, schema: Schema, export_dir: str, *, vocab_dir: str | None = None,
               ingest_dir: str | None = None) -> str:
        """Writes the raw-cell SavedModel (`pipelines.serving`) of the ingest output `ingest_dir`.

        Its cells are read by the rules that ingest's `_MANIFEST.json` records, its ids mapped by
        its schema.json and `vocab/` (or `vocab_dir`).
        """
        import os

        from pipelines import serving

        reading = serving.IngestReading.load(ingest_dir) if ingest_dir else None
        if vocab_dir is None and ingest_dir:
            vocab_dir = os.path.join(ingest_dir, "vocab")
        if self.name == "ctr":
            return serving.export_serving_model(model, schema, export_dir, vocab_dir=vocab_dir, reading=reading)
        return serving.export_history_model(model, schema, export_dir, vocab_dir=vocab_dir, reading=reading)


def _rows(label):
    """int32 scalar: the label's row count, a constant when the shape is static (XLA compiles it in)."""
    import tensorflow as tf

    static = label.shape[0]
    return tf.constant(static, tf.int32) if static is not None else tf.shape(label, out_type=tf.int32)[0]


def _id_range(spec) -> int:
    size = spec.vocabulary_size or spec.hash_buckets
    if size is None:
        raise SchemaError(
            f"feature {spec.name!r}: schema.json gives neither hash_buckets nor vocabulary_size; "
            "the trainer needs the id range to size its table"
        )
    return size


def resolve_task(schema: Schema, requested: str = "auto") -> Task:
    """The task `requested` (or the one the schema implies for "auto") over `schema`.

    Raises:
      ValueError: an unknown task, or a schema without the columns the task needs.
    """
    if requested not in TASK_CHOICES:
        raise ValueError(f"--task must be one of {TASK_CHOICES}, got {requested!r}")
    dense = [f.name for f in schema.dense]
    items = [f.name for f in schema.sparse if _TARGET + f.name in dense]
    targets = [name for name in dense if name.startswith(_TARGET) and name[len(_TARGET):] not in items]
    if requested == "auto":
        requested = "ctr" if schema.label is not None else "rating" if items and targets else "next_item"
    if requested == "ctr":
        if schema.label is None:
            raise ValueError(f"--task ctr: schema.json has no label feature; it has {schema.names}")
        return Task("ctr", None, schema.label.name)
    if len(items) != 1:
        raise ValueError(
            f"--task {requested}: needs exactly one history feature f with a target_f column "
            f"(an ingest with histories.examples_per_event); found {items or 'none'} in {schema.names}"
        )
    item = items[0]
    if requested == "next_item":
        return Task("next_item", (item,), _TARGET + item, item)
    if len(targets) != 1:
        raise ValueError(f"--task rating: needs one target rating column (target_<weight>); found {targets or 'none'}")
    return Task("rating", (item, _TARGET + item), targets[0], item)
