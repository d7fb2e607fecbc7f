r"""`python -m pipelines.train`: train a model on an ingest output directory.

    python -m pipelines.train --data out/train --eval_data out/test \
        --model_dir out/model --steps 300 --batch_size 1024 --jit_compile

Reads the shards with `transforms.make_dataset` (COO batches padded to the
capacity stats.json records, so every step has the same shapes and XLA
compiles once) and trains what the schema calls for (`pipelines.tasks`):
`CtrModel` with binary cross-entropy on click logs, or `HistoryModel` on
user histories (`--task rating`: squared error on the next rating;
`--task next_item`: softmax over the batch's target items). It checkpoints
the model, the optimizer and the input position to --model_dir every
--checkpoint_every steps, and resumes from there when restarted. At the end
it evaluates on --eval_data and exports a SavedModel whose `serving_default`
signature takes raw ids (the strings of the log) and hashes them exactly as
the ingest did.

`--strategy multi_worker` runs under `tf.distribute.MultiWorkerMirroredStrategy`
with the cluster taken from TF_CONFIG; each worker reads its own part of the
shards. Only the chief writes to --model_dir (other workers checkpoint under
`--model_dir/workers/`). Every checkpoint holds the input position of each
worker, so when all workers are restarted with the same TF_CONFIG (how a
multi-worker run recovers) each restores the model, the optimizer and the
step and goes on reading its own part of the data where it stopped. A run
with another number of workers than the checkpoint's splits the data
differently: it restores the model, the optimizer and the step, logs a
warning, and every worker reads its part from the start.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

__all__ = ["train", "main", "TrainResult"]

from pipelines.tasks import TASK_CHOICES

_LOGGER = logging.getLogger("sparseflow.train")
CHECKPOINT_DIR = "checkpoints"
EXPORT_DIR = "export"


def _parser() -> argparse.ArgumentParser:
    from pipelines import cli

    p = cli.parser("pipelines.train", __doc__, "--data DIR --model_dir DIR [--eval_data DIR] [options]")
    p.add_argument("--data", required=True, metavar="DIR", help="ingest output directory with the training shards")
    p.add_argument("--eval_data", default=None, metavar="DIR",
                   help="ingest output directory of held-out rows (default: no held-out metrics)")
    p.add_argument("--model_dir", required=True, metavar="DIR", help="checkpoints and the exported model go here")
    p.add_argument("--batch_size", type=int, default=1024, help="rows per training step")
    p.add_argument("--steps", type=int, default=None, help="train this many steps in all (default: --epochs)")
    p.add_argument("--epochs", type=int, default=1, help="passes over --data when --steps is not given")
    p.add_argument("--learning_rate", type=float, default=2e-3, help="Adam's learning rate")
    p.add_argument("--embedding_dim", type=int, default=16, help="width of every embedding")
    p.add_argument("--hidden_units", default="256,128", help="comma-separated block-sparse layer widths")
    p.add_argument("--density", type=float, default=0.25, help="fraction of blocks kept per hidden layer")
    p.add_argument("--block_size", type=int, default=32, choices=(8, 16, 32, 64),
                   help="block edge of the block-sparse layers")
    p.add_argument("--jit_compile", action="store_true", help="compile the train step with XLA")
    p.add_argument("--checkpoint_every", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights and the shuffle")
    p.add_argument("--strategy", choices=("default", "multi_worker"), default="default",
                   help="multi_worker: MultiWorkerMirroredStrategy with the cluster in TF_CONFIG")
    p.add_argument("--task", choices=TASK_CHOICES, default="auto",
                   help="ctr (a label column), rating or next_item (history ingests); auto picks from schema.json")
    p.add_argument("--export", choices=("savedmodel", "none"), default="savedmodel",
                   help="export a SavedModel taking raw ids to --model_dir/export")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--verify", choices=("sizes", "checksums", "none"), default="sizes",
                   help="how much of each data directory's _MANIFEST.json to check before training: file sizes "
                        "(default), checksums of every byte, or none (shards written without a manifest)")
    return p


class TrainResult(dict):
    """What `train` returns: steps, final loss, eval loss/AUC, paths, examples/s."""


def _dataset(args, task, directory: str, *, training: bool, start=None, input_context=None, dropped=None):
    from transforms.tfdata.dataset import make_dataset

    return make_dataset(
        directory,
        args.batch_size,
        shuffle=training,
        seed=args.seed,
        num_epochs=None if training and args.steps else (args.epochs if training else 1),
        output="coo",
        capacities="stats",
        # stats.json's capacity bounds consecutive rows; a shuffled batch can hold more
        # ids. Those few are dropped and counted rather than stopping the run.
        overflow="drop",
        dropped=dropped,
        # next_item scores a row against the other targets of its batch: batches stay full.
        drop_remainder=training or task.name == "next_item",
        features=task.features,
        label=task.label,
        combiner="mean",
        start=start,
        return_position=training,
        input_context=input_context,
        # Parquet or Arrow shards (TFRecord shards hold no resumable position: make_dataset says so).
        verify=_recheck(args.verify),
    )


class _Progress:
    """A one-line progress bar with examples/s and the running loss."""

    def __init__(self, total: int | None, batch_size: int, quiet: bool):
        self.total, self.batch_size, self.quiet = total, batch_size, quiet
        self.started = time.monotonic()
        self.last_print = 0.0

    def update(self, step: int, done_here: int, loss: float, final: bool = False) -> None:
        now = time.monotonic()
        if self.quiet or (not final and now - self.last_print < 0.5):
            return
        self.last_print = now
        rate = done_here * self.batch_size / max(now - self.started, 1e-9)
        if self.total:
            filled = int(30 * step / self.total)
            bar = f"[{'=' * filled}{'.' * (30 - filled)}] {step}/{self.total}"
        else:
            bar = f"step {step}"
        end = "\n" if final else ""
        print(f"\r{bar}  loss {loss:.4f}  {rate:,.0f} examples/s", end=end, file=sys.stderr, flush=True)


def _recheck(level: str) -> str:
    # The directories were verified to `level` when training started; each dataset made later checks sizes only.
    return "none" if level == "none" else "sizes"


def _args(argv: list[str]) -> tuple[argparse.Namespace, tuple[int, ...]]:
    """Parsed flags and the hidden widths; a bad value exits 2 with one line naming the flag."""
    p = _parser()
    args = p.parse_args(argv)
    for flag in ("batch_size", "epochs", "embedding_dim", "checkpoint_every"):
        if getattr(args, flag) <= 0:
            p.error(f"--{flag} must be positive, got {getattr(args, flag)}")
    if args.steps is not None and args.steps <= 0:
        p.error(f"--steps must be positive, got {args.steps}")
    if not args.learning_rate > 0:  # also rejects NaN
        p.error(f"--learning_rate must be positive, got {args.learning_rate}")
    if not 0 < args.density <= 1:
        p.error(f"--density must be in (0, 1], got {args.density}")
    try:
        hidden = tuple(int(u) for u in args.hidden_units.split(",") if u.strip())
    except ValueError:
        p.error(f"--hidden_units must be comma-separated integers, got {args.hidden_units!r}")
    if any(u <= 0 or u % args.block_size for u in hidden):
        p.error(f"--hidden_units {args.hidden_units} must be positive multiples of --block_size {args.block_size}")
    return args, hidden


def train(argv: list[str]) -> TrainResult:
    """Runs training as the command line `argv` asks; returns a `TrainResult`.

    Raises:
      SystemExit: bad flags or flag values (the usage line and one line naming the flag, exit status 2).
      UsageError: --eval_data maps a feature's raw values to other ids than --data (`sparse_io.id_space`),
        or a gs:// path and no Google Cloud credentials (`pipelines.credentials`).
      ValueError / FileNotFoundError: data directories that are not ingest outputs.
    """
    args, hidden = _args(argv)
    from pipelines.credentials import check_cloud_credentials

    check_cloud_credentials({"--data": args.data, "--eval_data": args.eval_data, "--model_dir": args.model_dir})

    import keras
    import tensorflow as tf

    from pipelines.tasks import resolve_task
    from sparse_io.manifest import verify_directory
    from sparse_io.schema import Schema
    from transforms.tfdata.core.state import InputState

    # Before anything is read: a killed or partial ingest output is refused, not trained on.
    for directory in (args.data, args.eval_data):
        if directory:
            verify_directory(directory, args.verify)
    schema = Schema.load(args.data)
    if args.eval_data:
        _check_eval_id_spaces(schema, args.eval_data)
    task = resolve_task(schema, args.task)
    _LOGGER.info("task %s: features %s, label %s", task.name, task.features or "all", task.label)
    keras.utils.set_random_seed(args.seed)

    multi_worker = args.strategy == "multi_worker"
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if multi_worker else tf.distribute.get_strategy()
    workers = _num_workers(strategy) if multi_worker else 1
    with strategy.scope():
        model = task.make_model(schema, args, hidden)
        model.build()
        optimizer = keras.optimizers.Adam(args.learning_rate)
        # Variables exist before the restore, so every saved value finds its place at once.
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        # Multi-worker: one row per worker, the same on all of them (`_cluster_positions`), so whichever
        # worker's checkpoint is restored, the chief's in --model_dir included, every worker finds its own
        # row there. A per-worker value would instead be saved only in the file of the worker that held it.
        position = tf.Variable(tf.zeros([workers, 4] if multi_worker else [4], tf.int64), trainable=False,
                               name="input_position")

    chief = _is_chief(strategy)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step, position=position)
    # Every worker takes part in a save; only the chief's lands in --model_dir.
    checkpoint_dir = os.path.join(args.model_dir, CHECKPOINT_DIR) if chief else _worker_dir(args.model_dir, strategy)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=2)
    restored = manager.latest_checkpoint
    saved_shape = _saved_position_shape(restored) if restored else None
    if restored and saved_shape != position.shape.as_list():
        # Positions saved by another number of workers belong to another split of the data (each worker's
        # part depends on the count), so none of them says where a worker of this cluster stopped.
        _LOGGER.warning("%s holds %s, this run has %d: the model, optimizer and step are restored, "
                        "and every worker reads its input from the start",
                        restored, _describe_positions(saved_shape), workers)
        tf.train.Checkpoint(model=model, optimizer=optimizer, step=step).restore(restored).expect_partial()
    elif restored:
        checkpoint.restore(restored)
    starts = [InputState.from_tensor(row) if row[3] != 0 else None for row in position.numpy().reshape(-1, 4)]
    if restored:
        _LOGGER.info("resumed from %s at step %d", restored, int(step.numpy()))

    dropped = tf.Variable(0, dtype=tf.int64, trainable=False, name="dropped_ids")
    this_worker = 0  # the input pipeline (part of the data) of this process, set by make_input

    def make_input(context):
        nonlocal this_worker
        this_worker = context.input_pipeline_id if context is not None else 0
        start = starts[this_worker]
        if start is not None:
            _LOGGER.info("worker %d resumes its input at %s", this_worker, start)
        return _dataset(args, task, args.data, training=True, start=start, input_context=context, dropped=dropped)

    if multi_worker:
        dataset = strategy.distribute_datasets_from_function(make_input)
    else:
        dataset = make_input(None)

    def save(after) -> None:
        # `after` is the position after the last trained batch (None when this process trained none).
        if multi_worker and after is not None:
            position.assign(_cluster_positions(strategy, after, this_worker, workers))
        manager.save(checkpoint_number=step)

    global_batch = args.batch_size * strategy.num_replicas_in_sync

    def replica_step(features, label):
        with tf.GradientTape() as tape:
            output = model(task.model_inputs(features, label), training=True)
            per_row = task.per_row_loss(label, output)
            # Summed over the replica's rows and divided by the global batch: replicas add up to the mean.
            loss = tf.reduce_sum(per_row) / global_batch
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    compiled_step = tf.function(replica_step, jit_compile=args.jit_compile, reduce_retracing=True)

    @tf.function
    def distributed_step(features, label):
        losses = strategy.run(compiled_step, args=(features, label))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    total = args.steps
    _LOGGER.info("training on %s (the first step builds the graph) ...", args.data)
    progress = _Progress(total, global_batch, args.quiet)
    loss_value = float("nan")
    done_here = 0
    after = None
    started = time.monotonic()
    for element in dataset:
        if total is not None and int(step.numpy()) >= total:
            break
        features, label, after = element
        loss_value = float(distributed_step(features, label))
        step.assign_add(1)
        done_here += 1
        if not multi_worker:
            position.assign(after)
        progress.update(int(step.numpy()), done_here, loss_value)
        if int(step.numpy()) % args.checkpoint_every == 0:
            save(after)
    elapsed = time.monotonic() - started
    progress.update(int(step.numpy()), done_here, loss_value, final=True)
    save(after)

    if int(dropped.numpy()):
        _LOGGER.warning("%d ids past the stats.json capacity of their shuffled batch were dropped",
                        int(dropped.numpy()))
    result = TrainResult(
        task=task.name,
        dropped_ids=int(dropped.numpy()),
        steps=int(step.numpy()),
        loss=loss_value,
        examples_per_second=done_here * global_batch / max(elapsed, 1e-9),
        model_dir=args.model_dir,
    )
    if not chief:
        return result
    if args.eval_data:
        _LOGGER.info("evaluating on %s ...", args.eval_data)
        result.update(evaluate(model, task, args.eval_data, args.batch_size, verify=_recheck(args.verify)))
    if args.export == "savedmodel":
        _LOGGER.info("exporting the SavedModel to %s ...", os.path.join(args.model_dir, EXPORT_DIR))
        result["export"] = task.export(model, schema, os.path.join(args.model_dir, EXPORT_DIR),
                                       ingest_dir=args.data)
    with open(os.path.join(args.model_dir, "train_result.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    return result


def _check_eval_id_spaces(schema, eval_dir: str) -> None:
    """Held-out data must map raw values to the ids the model is trained on; UsageError naming the feature."""
    from pipelines.errors import UsageError
    from sparse_io.id_space import IdSpaceMismatch, check_same_id_spaces
    from sparse_io.schema import Schema

    try:
        check_same_id_spaces(schema, Schema.load(eval_dir), other_name=f"--eval_data {eval_dir}")
    except IdSpaceMismatch as e:
        raise UsageError(str(e)) from None


def _is_chief(strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().jobs
    return task_type == "chief" or (task_type == "worker" and task_id == 0 and not has_chief)


def _num_workers(strategy) -> int:
    """The workers of a MultiWorkerMirroredStrategy cluster (chief included): one input pipeline each."""
    spec = strategy.cluster_resolver.cluster_spec()
    return max(1, sum(spec.num_tasks(job) for job in ("chief", "worker") if job in spec.jobs))


def _saved_position_shape(path: str) -> list[int] | None:
    """The shape of the input position saved in checkpoint `path`; None when it has none."""
    import tensorflow as tf

    return tf.train.load_checkpoint(path).get_variable_to_shape_map().get("position/.ATTRIBUTES/VARIABLE_VALUE")


def _describe_positions(shape: list[int] | None) -> str:
    if shape is None:
        return "no input position"
    if len(shape) == 1:
        return "the input position of 1 worker (single-worker training)"
    return f"the input positions of {shape[0]} workers"


def _cluster_positions(strategy, after, this_worker: int, workers: int):
    """The `[workers, 4]` input positions of the whole cluster, the same on every worker.

    `after` is this worker's per-replica position of its last trained batch. Its replicas take consecutive
    batches of the worker's dataset in replica order, so the last one's position is the worker's. Every
    worker puts it in its own row (zeros elsewhere) and the rows are summed across the cluster, which
    leaves each row exactly as its worker wrote it. A collective: every worker calls it at the same step.
    """
    import tensorflow as tf

    local = strategy.experimental_local_results(after)
    mine = tf.scatter_nd([[this_worker]], tf.reshape(local[-1], [1, 4]), [workers, 4])
    replicas = len(local)
    rows = strategy.experimental_distribute_values_from_function(
        lambda ctx: mine if ctx.replica_id_in_sync_group % replicas == replicas - 1 else tf.zeros_like(mine))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, rows, axis=None)


def _worker_dir(model_dir: str, strategy) -> str:
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, "workers", f"{resolver.task_type}-{resolver.task_id}", CHECKPOINT_DIR)


def evaluate(model, task, directory: str, batch_size: int, *, verify: str = "sizes") -> dict:
    """The task's held-out metrics (see `pipelines.tasks`) of `model` on every row of an ingest output."""
    from transforms.tfdata.dataset import make_dataset

    dataset = make_dataset(directory, batch_size, shuffle=False, output="coo", combiner="mean",
                           features=task.features, label=task.label,
                           drop_remainder=task.name == "next_item", verify=verify)
    return task.evaluate(model, dataset)


def main(argv: list[str] | None = None) -> None:
    """Runs `python -m pipelines.train` with `argv` (default: the command line); errors exit as the module doc says."""
    from pipelines import cli

    argv = sys.argv[1:] if argv is None else argv
    with cli.cli_errors("pipelines.train"):
        verbose = _parser().parse_args(argv).verbose
        cli.configure_logging(verbose)
        cli.quiet_tensorflow_import(verbose)
        result = train(argv)
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()}
        print(json.dumps(shown, indent=2))


if __name__ == "__main__":
    main()
