r"""`python -m pipelines.train`: train a model on an ingest output directory.

    python -m pipelines.train --data out/train --eval_data out/test \
        --model_dir out/model --steps 300 --batch_size 1024 --jit_compile

Reads the shards with `transforms.make_dataset` (COO batches padded to the
capacity stats.json records, so every step has the same shapes and XLA
compiles once) and trains what the label calls for (`pipelines.tasks`):
`--task ctr` (a 0/1 label: binary cross-entropy), `--task regression` (an
integer or real label such as a rating or a count: squared error), or on
user histories `--task rating` (squared error on the next rating) and
`--task next_item` (softmax over the batch's target items); a task that does
not fit the label is refused. It checkpoints the model, the optimizer and
the input position to --model_dir every --checkpoint_every steps. A
--model_dir that holds a checkpoint is refused unless --resume (continue
it) or --overwrite (start over) says what to do with it. At the end it
evaluates on every row of --eval_data, prints each metric beside its
baseline (`pipelines.evaluation`), appends the run to
--model_dir/train_result.json and exports a SavedModel whose
`serving_default` signature takes raw ids (the strings of the log) and
hashes them exactly as the ingest did. A run that trains no step records
nothing and exits 2.

`--strategy multi_worker` runs under `tf.distribute.MultiWorkerMirroredStrategy`
with the cluster taken from TF_CONFIG; each worker reads its own part of the
shards. Only the chief writes to --model_dir (other workers checkpoint under
`--model_dir/workers/`). Every checkpoint holds the input position of each
worker, so when all workers are restarted with the same TF_CONFIG and
--resume (how a multi-worker run recovers; --resume without a checkpoint
starts fresh, so the same command line serves both) each restores the model, the optimizer and the
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

from pipelines.evaluation import HIT_AT
from pipelines.tasks import TASK_CHOICES

_LOGGER = logging.getLogger("sparseflow.train")
_DETAIL = logging.getLogger("sparseflow.detail.train")  # shown from -v on (pipelines.cli)
CHECKPOINT_DIR = "checkpoints"
EXPORT_DIR = "export"


def _parser() -> argparse.ArgumentParser:
    from pipelines import cli

    p = cli.parser("pipelines.train", __doc__, "--data DIR --model_dir DIR [--eval_data DIR] [options]",
                   epilog=_EPILOG)
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
                   help="ctr (a 0/1 label), regression (an integer or real label: ratings, counts), rating or "
                        "next_item (history ingests); auto picks from the label in schema.json, and a task that "
                        "does not fit the label is refused")
    p.add_argument("--resume", action="store_true",
                   help="continue the checkpoint in --model_dir (none there: start fresh)")
    p.add_argument("--overwrite", action="store_true",
                   help="start over: remove the checkpoints and export in --model_dir (its train_result.json "
                        "runs are kept)")
    p.add_argument("--exclude", default="", metavar="COLUMNS",
                   help="comma-separated columns the model does not read (a feature that gives the label away)")
    p.add_argument("--export", choices=("savedmodel", "none"), default="savedmodel",
                   help="export a SavedModel taking raw ids to --model_dir/export")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--verify", choices=("sizes", "checksums", "none"), default="sizes",
                   help="how much of each data directory's _MANIFEST.json to check before training: file sizes "
                        "(default), checksums of every byte, or none (shards written without a manifest)")
    return p


_EPILOG = f"""\
held-out metrics (--eval_data): every row counts once, whatever --batch_size (the last partial batch
included), each beside its baseline from the training rows:
  ctr         log loss and AUC; always predicting the training base rate (AUC 0.5)
  regression  RMSE and MAE (rating too); always predicting the training mean
  next_item   hit@{HIT_AT} and loss against the whole item catalogue (every id of the item's hash buckets or
              vocabulary, not the other rows of a batch); always the {HIT_AT} most frequent training targets
results: printed as JSON and appended to --model_dir/train_result.json ({{"runs": [...]}}, one entry per run)."""


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
        # Training batches are full (static shapes; next_item's in-batch negatives).
        drop_remainder=training,
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
    if args.resume and args.overwrite:
        p.error("--resume continues the checkpoint and --overwrite removes it: give one")
    args.exclude = tuple(c.strip() for c in args.exclude.split(",") if c.strip())
    return args, hidden


def train(argv: list[str], *, export_only: bool = False, announce_task: bool = True) -> TrainResult:
    """Runs training as the command line `argv` asks; returns a `TrainResult`.

    `export_only` (for `pipelines.early_stopping`): restore the latest checkpoint of --model_dir and export
    it, training nothing and recording no run. `announce_task`: log the task line (a caller that trains in
    several runs, as early stopping does, says it for the first only); never when only exporting.

    Raises:
      SystemExit: bad flags or flag values (the usage line and one line naming the flag, exit status 2).
      UsageError: --eval_data maps a feature's raw values to other ids than --data (`sparse_io.id_space`),
        a gs:// path and no Google Cloud credentials (`pipelines.credentials`), a checkpointed --model_dir
        without --resume or --overwrite, a run that would train no step, or a task that does not fit the
        label (`pipelines.tasks.TaskError`).
      ValueError / FileNotFoundError: data directories that are not ingest outputs.
    """
    args, hidden = _args(argv)
    from pipelines.credentials import check_cloud_credentials
    from sparse_io.extras import require

    require("tensorflow", "pipelines.train")  # found, not imported: that waits until the data are checked

    check_cloud_credentials({"--data": args.data, "--eval_data": args.eval_data, "--model_dir": args.model_dir})

    from pipelines.errors import DataError, UsageError
    from pipelines.evaluation import label_stats, training_baseline
    from pipelines.tasks import resolve_task
    from pipelines.train_runs import check_model_dir, record_run
    from sparse_io.manifest import verify_directory
    from sparse_io.schema import Schema

    # Before anything is read: a killed or partial ingest output is refused, not trained on.
    for flag, directory in (("--data", args.data), ("--eval_data", args.eval_data)):
        if directory:
            manifest = verify_directory(directory, args.verify)
            if manifest is not None and not sum(e["rows"] for e in manifest["shards"]):
                raise DataError(f"{flag} {directory}: the output holds no rows (an empty log?); nothing to "
                                f"{'train on' if flag == '--data' else 'evaluate'}")
    schema = Schema.load(args.data)
    if args.eval_data:
        _check_eval_id_spaces(schema, args.eval_data)
    stats = label_stats(args.data, schema.label.name) if schema.label is not None else None
    task = resolve_task(schema, args.task, stats, exclude=args.exclude)
    if announce_task and not export_only:
        _LOGGER.info("task %s: features %s, label %s", task.name, ",".join(task.features or ()) or "all",
                     task.label)

    # TensorFlow (seconds to import) only once the flags, the data's manifests and the task are known to be good.
    from pipelines.cli import quiet_tensorflow_import

    quiet_tensorflow_import(args.verbose)
    import keras
    import tensorflow as tf

    from transforms.tfdata.core.state import InputState


    multi_worker = args.strategy == "multi_worker"
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if multi_worker else tf.distribute.get_strategy()
    workers = _num_workers(strategy) if multi_worker else 1
    chief = _is_chief(strategy)
    # Every worker takes part in a save; only the chief's lands in --model_dir.
    checkpoint_dir = os.path.join(args.model_dir, CHECKPOINT_DIR) if chief else _worker_dir(args.model_dir, strategy)
    started_as = "resumed" if export_only else check_model_dir(
        args.model_dir, checkpoint_dir, resume=args.resume, overwrite=args.overwrite, chief=chief)

    baseline = training_baseline(task, args.data, verify=_recheck(args.verify))
    keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = task.make_model(schema, args, hidden, baseline)
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

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step, position=position)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=2)
    restored = manager.latest_checkpoint
    if export_only and not restored:
        raise UsageError(f"--model_dir {args.model_dir} holds no checkpoint to export")
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
        _DETAIL.info("resumed from %s at step %d", restored, int(step.numpy()))
    total = args.steps
    if not export_only and total is not None and int(step.numpy()) >= total:
        raise UsageError(f"--resume: the checkpoint in {args.model_dir} is at step {int(step.numpy())} and --steps "
                         f"is {total}: nothing to train (give --steps above {int(step.numpy())})")

    leaks = _warn_label_leaks(args, task, schema) if chief and task.flat and not export_only else []
    dropped = tf.Variable(0, dtype=tf.int64, trainable=False, name="dropped_ids")
    this_worker = 0  # the input pipeline (part of the data) of this process, set by make_input

    def make_input(context):
        nonlocal this_worker
        this_worker = context.input_pipeline_id if context is not None else 0
        start = starts[this_worker]
        if start is not None:
            _DETAIL.info("worker %d resumes its input at %s", this_worker, start)
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

    progress = _Progress(total, global_batch, args.quiet)
    loss_value = float("nan")
    done_here = 0
    after = None
    started = time.monotonic()
    if not export_only:
        _LOGGER.info("training on %s (the first step builds the graph) ...", args.data)
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
        if not done_here:  # nothing trained: no loss to report and no run to record
            raise UsageError(f"no training step ran on {args.data} (--model_dir {args.model_dir} at step "
                             f"{int(step.numpy())}, batches of {args.batch_size:,} rows): nothing to train")
        progress.update(int(step.numpy()), done_here, loss_value, final=True)
        save(after)
    elapsed = time.monotonic() - started

    if int(dropped.numpy()):
        _LOGGER.warning("%d ids past the stats.json capacity of their shuffled batch were dropped",
                        int(dropped.numpy()))
    result = TrainResult(
        task=task.name,
        started=started_as,
        dropped_ids=int(dropped.numpy()),
        steps=int(step.numpy()),
        steps_this_run=done_here,
        loss=loss_value,
        examples_per_second=done_here * global_batch / max(elapsed, 1e-9),
        model_dir=args.model_dir,
    )
    if args.exclude:
        result["excluded"] = list(args.exclude)
    if leaks:
        result["label_leaks"] = leaks
    result.update({k: v for k, v in baseline.items() if k != "popular_items"})
    if not chief:
        return result
    if args.eval_data and not export_only:
        from pipelines.evaluation import summary_line

        _LOGGER.info("evaluating on every row of %s ...", args.eval_data)
        result.update(evaluate(model, task, args.eval_data, args.batch_size, baseline, verify=_recheck(args.verify)))
        line = summary_line(task.name, result)
        if line:
            _LOGGER.info("%s", line)
    if args.export == "savedmodel":
        _LOGGER.info("exporting the SavedModel to %s ...", os.path.join(args.model_dir, EXPORT_DIR))
        result["export"] = task.export(model, schema, os.path.join(args.model_dir, EXPORT_DIR),
                                       ingest_dir=args.data)
    if not export_only:
        record_run(args.model_dir, result)
    return result


def _warn_label_leaks(args, task, schema) -> list[dict]:
    """Warns (one line each) about every model feature that determines the label on the training rows."""
    from pipelines.leakage import label_leaks

    leaks = label_leaks(args.data, task, schema, verify=_recheck(args.verify))
    for leak in leaks:
        _LOGGER.warning("feature %r gives the label %r away: it %s; --exclude %s drops it",
                        leak["feature"], task.label, leak["reason"], leak["feature"])
    return leaks


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


def evaluate(model, task, directory: str, batch_size: int, baseline: dict | None = None, *,
             verify: str = "sizes") -> dict:
    """The task's held-out metrics (`pipelines.evaluation`) of `model` on every row of an ingest output.

    Every row counts once whatever `batch_size`: the last partial batch is evaluated, and fewer rows than
    one batch are one partial batch. `baseline`: `pipelines.evaluation.training_baseline`'s dict.
    """
    from pipelines.evaluation import evaluate as evaluate_task
    from transforms.tfdata.dataset import make_dataset

    dataset = make_dataset(directory, batch_size, shuffle=False, output="coo", combiner="mean",
                           features=task.features, label=task.label, drop_remainder=False, verify=verify)
    return evaluate_task(model, task, dataset, baseline or {})


def main(argv: list[str] | None = None) -> None:
    """Runs `python -m pipelines.train` with `argv` (default: the command line); errors exit as the module doc says."""
    from pipelines import cli

    argv = sys.argv[1:] if argv is None else argv
    with cli.cli_errors("pipelines.train"):
        verbose = _parser().parse_args(argv).verbose
        cli.configure_logging(verbose)
        result = train(argv)
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()}
        print(json.dumps(shown, indent=2))


if __name__ == "__main__":
    main()
