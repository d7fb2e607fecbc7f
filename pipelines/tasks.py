"""What the trainer learns from an ingest output: clicks, ratings and counts, or next items.

`resolve_task(schema, requested, label_stats)` reads schema.json (and the
label's stats.json entry) and picks the task, or checks that the one asked
for fits the label; the returned `Task` knows which columns to read, which
model to build, its per-row loss and its serving export, so the training
loop in `pipelines.train` is the same for all four. Held-out metrics and
their baselines are `pipelines.evaluation`'s.

| task         | shards it needs                               | loss                  | held-out metrics  |
|--------------|-----------------------------------------------|-----------------------|-------------------|
| `ctr`        | a 0/1 label (`label_type: binary`)            | sigmoid cross-entropy | log loss, AUC     |
| `regression` | an `integer` or `real` label (ratings, counts) | squared error        | RMSE, MAE         |
| `rating`     | a history `f` + `target_f` + a target rating  | squared error         | RMSE, MAE         |
| `next_item`  | a history `f` + `target_f`                    | in-batch softmax      | catalogue hit@10  |

`auto` picks `ctr` for a binary label, `regression` for any other label,
and `rating` (with a target rating) or `next_item` on a history ingest.
A task that does not fit the data (ctr on ratings 1..5, regression on
clicks, a history task on a flat log) raises `TaskError` naming the label's
values.
"""

from __future__ import annotations

import dataclasses

from pipelines.errors import UsageError
from sparse_io.output_files import VOCAB_DIR
from sparse_io.schema import Schema, SchemaError

__all__ = ["Task", "TaskError", "resolve_task", "describe_label_values", "history_sides", "TASK_CHOICES", "FLAT_TASKS"]

TASK_CHOICES = ("auto", "ctr", "regression", "rating", "next_item")
FLAT_TASKS = ("ctr", "regression")
_TARGET = "target_"


class TaskError(UsageError, ValueError):
    """The task asked for does not fit the shards (exit status 2 in the command-line programs)."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One training objective over one schema (see the module table).

    Attributes:
      name: "ctr", "regression", "rating" or "next_item".
      features: the input columns the model reads (flat tasks: every non-label column not excluded).
      label: the column the loss compares with.
      item: the history feature (rating, next_item); None for flat tasks.
    """

    name: str
    features: tuple[str, ...] | None  # None: every non-label feature
    label: str
    item: str | None = None  # the history feature (rating, next_item)
    sides: tuple[str, ...] = ()  # a history's side inputs (`history_sides`), among `features`

    @property
    def target(self) -> str | None:
        """The input name of the item a history task scores (`target_<item>`); None for flat tasks."""
        return None if self.item is None else _TARGET + self.item

    @property
    def flat(self) -> bool:
        """A task over a flat log (one label per row): ctr or regression."""
        return self.name in FLAT_TASKS

    def model_schema(self, schema: Schema) -> Schema:
        """The columns of `schema` the model reads (flat tasks: what `--exclude` left)."""
        return schema if self.features is None else schema.select(self.features)

    def make_model(self, schema: Schema, args, hidden: tuple[int, ...], baseline: dict | None = None):
        """The Keras model of this task: a `CtrModel` for ctr and regression, a `HistoryModel` otherwise.

        Args:
          schema: the shards' schema; sizes each embedding table from its id range.
          args: the parsed `pipelines.train` flags (embedding_dim, density, block_size, seed).
          hidden: the hidden layer widths.
          baseline: `pipelines.evaluation.training_baseline`'s dict; a regression model starts from its
            `label_mean` and `label_scale`.
        """
        baseline = baseline or {}
        if self.flat:
            from pipelines.model import CtrModel

            used = self.model_schema(schema)
            sizes = {s.name: _id_range(s) for s in used.sparse}
            dense = [f.name for f in used.dense if f.time_unit is None]  # timestamps: see pipelines.model
            shift = baseline.get("label_mean", 0.0) if self.name == "regression" else 0.0
            scale = baseline.get("label_scale", 1.0) if self.name == "regression" else 1.0
            # Features sharing one vocabulary (one id space) share one embedding table.
            tables = {s.name: s.shared_vocabulary for s in used.sparse if s.shared_vocabulary}
            return CtrModel(sizes, dense, embedding_dim=args.embedding_dim, hidden_units=hidden,
                            density=args.density, block_size=args.block_size, seed=args.seed,
                            output_shift=shift, output_scale=scale, tables=tables)
        from pipelines.history_model import HistoryModel

        lists = {n: _id_range(schema[n]) for n in self.sides if schema[n].is_sparse}
        targets = {n: _id_range(schema[n]) for n in self.sides if schema[n].history_role == "target"}
        numbers = [n for n in self.sides if n not in lists and n not in targets]
        return HistoryModel(self.item, _id_range(schema[self.item]), self.name, embedding_dim=args.embedding_dim,
                            hidden_units=hidden, density=args.density, block_size=args.block_size, seed=args.seed,
                            side_sparse=lists, side_dense=numbers, target_sides=targets,
                            tables={n: schema[n].shared_vocabulary for n in lists if schema[n].shared_vocabulary})

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
        if self.name in ("regression", "rating"):
            return tf.square(output - tf.cast(label, tf.float32))
        # next_item trains against the other targets of its batch (evaluation ranks the whole catalogue).
        answers = tf.range(tf.shape(output)[0])
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=answers, logits=output)

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
            vocab_dir = os.path.join(ingest_dir, VOCAB_DIR)
        if self.flat:
            output = "probability" if self.name == "ctr" else "prediction"
            return serving.export_serving_model(model, self.model_schema(schema), export_dir, vocab_dir=vocab_dir,
                                                reading=reading, output=output)
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


def history_sides(schema: Schema, item: str) -> tuple[str, ...]:
    """The side inputs of history feature `item`'s model, from schema.json's `history_role`s.

    Every "event" column (lists of ids and numbers; timestamps left out, as
    for click models), every "item_column" list and each item column's target
    `target_<column>`. The key, the time and the target item and weight are
    not side inputs. A schema without roles (an older ingest) has none.
    """
    item_columns = [f.name for f in schema if f.history_role == "item_column"]
    sides = [f.name for f in schema if f.history_role == "event" and f.time_unit is None] + item_columns
    sides += [_TARGET + name for name in item_columns if _TARGET + name in schema]
    for name in sides:
        spec = schema[name]
        if not spec.is_sparse and spec.dtype == "string":
            raise SchemaError(f"feature {name!r}: a string the history model cannot take (ingest it as a sparse "
                              "feature with hash_buckets or a vocabulary)")
    return tuple(sides)


def describe_label_values(label_stats: dict | None) -> str:
    """The label's values as stats.json records them: "values 1, 2, 3, 4, 5" or "values from 0 to 352698".

    Example:
      >>> describe_label_values({"min": 1.0, "max": 5.0, "value_counts": [[1, 10], [5, 3]]})
      'values 1, 5'
      >>> describe_label_values({"min": 0.5, "max": 7.25})
      'values from 0.5 to 7.25'
    """
    if not label_stats or "min" not in label_stats:
        return "values not recorded in stats.json"
    counts = label_stats.get("value_counts")
    if counts:
        return "values " + ", ".join(_number(v) for v, _ in counts)
    return f"values from {_number(label_stats['min'])} to {_number(label_stats['max'])}"


def _number(value) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _only_zero_one(label_stats: dict | None) -> bool:
    counts = (label_stats or {}).get("value_counts")
    return bool(counts) and {float(v) for v, _ in counts} <= {0.0, 1.0}


def resolve_task(schema: Schema, requested: str = "auto", label_stats: dict | None = None, *,
                 exclude: tuple[str, ...] = ()) -> Task:
    """The task `requested` (or the one the label implies for "auto") over `schema`.

    Args:
      schema: the training shards' schema.
      requested: one of `TASK_CHOICES`.
      label_stats: the label's stats.json entry (min, max, value_counts): names the label's values in a
        refusal, and lets ctr train on an `integer` label that holds only 0 and 1.
      exclude: columns the model must not read (`--exclude`).

    Raises:
      TaskError: an unknown task, a task that does not fit the label (one line naming its values), a schema
        without the columns a history task needs, or an `exclude` that names no feature, the label, or a
        column a history task needs.
    """
    if requested not in TASK_CHOICES:
        raise TaskError(f"--task must be one of {TASK_CHOICES}, got {requested!r}")
    unknown = [name for name in exclude if name not in schema.names]
    if unknown:
        raise TaskError(f"--exclude {','.join(exclude)}: no feature(s) {unknown} in schema.json; it has {schema.names}")
    label = schema.label
    if requested == "auto" and label is not None:
        requested = "ctr" if label.binary_label else "regression"
    if requested in FLAT_TASKS:
        return _flat_task(schema, requested, label_stats, exclude)
    return _history_task(schema, requested, exclude)


def _flat_task(schema: Schema, requested: str, label_stats: dict | None, exclude: tuple[str, ...]) -> Task:
    label = schema.label
    if label is None:
        raise TaskError(f"--task {requested}: schema.json has no label feature (a history ingest trains "
                        f"--task rating or next_item); it has {schema.names}")
    values = describe_label_values(label_stats)
    kind = label.label_type or ("binary" if label.binary_label else "real")
    if requested == "ctr" and not (label.binary_label or _only_zero_one(label_stats)):
        raise TaskError(f"--task ctr needs a 0/1 click label, but label {label.name!r} (label_type {kind}) has "
                        f"{values}: use --task regression")
    if requested == "regression" and label.binary_label:
        raise TaskError(f"--task regression needs an integer or real label, but label {label.name!r} (label_type "
                        f"binary: clicks) has {values}: use --task ctr")
    if label.name in exclude:
        raise TaskError(f"--exclude {label.name}: that is the label the task learns")
    features = tuple(n for n in schema.names if n != label.name and n not in exclude)
    return Task(requested, features, label.name)


def _history_task(schema: Schema, requested: str, exclude: tuple[str, ...]) -> Task:
    dense = [f.name for f in schema.dense]
    # An item column's list has its target_ column too: only the item is the history feature.
    items = [f.name for f in schema.sparse if _TARGET + f.name in dense and f.history_role in (None, "item")]
    listed = items + [f.name for f in schema if f.history_role == "item_column"]
    targets = [name for name in dense if name.startswith(_TARGET) and name[len(_TARGET):] not in listed]
    if requested == "auto":
        requested = "rating" if items and targets else "next_item"
    if len(items) != 1:
        raise TaskError(
            f"--task {requested}: needs a history ingest (histories.examples_per_event): exactly one history "
            f"feature f with a target_f column; found {items or 'none'} in {schema.names}"
        )
    item = items[0]
    needed = [item, _TARGET + item] + (targets if requested == "rating" else [])
    clash = [name for name in exclude if name in needed]
    if clash:
        raise TaskError(f"--exclude: --task {requested} cannot train without {clash}")
    sides = tuple(name for name in history_sides(schema, item) if name not in exclude)
    if requested == "next_item":
        return Task("next_item", (item, *sides), _TARGET + item, item, sides)
    if len(targets) != 1:
        raise TaskError(f"--task rating: needs one target rating column (target_<weight>); found {targets or 'none'}")
    return Task("rating", (item, _TARGET + item, *sides), targets[0], item, sides)
