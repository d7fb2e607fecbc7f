"""`python -m pipelines.demo` (`make demo`): the whole flow on a seeded synthetic log.

    logs -> ingest (Beam, local runner) -> shards + schema.json + stats.json
         -> tf.data COO batches padded to the stats.json capacity
         -> embedding bags + block-sparse MLP, trained a few hundred steps
         -> loss and AUC on held-out rows, a SavedModel taking raw ids

With no arguments it generates a training day and a held-out day of
Criteo-format logs under `demo_output/raw/`. With `--input` (and `--format`,
`--config`) it runs on your data instead; `--eval_input` names held-out logs
(without it the AUC is measured on the training rows and says so).

Each run trains a fresh model in `<output>/model` (the previous one is
replaced) unless `--resume` continues it. A batch size larger than the
training rows is cut to the rows, said once. With held-out rows, training
stops early when their loss stops falling (`pipelines.early_stopping`), and
the summary sets the held-out loss and AUC beside the base-rate baseline:
always predicting the training rows' click rate (AUC 0.5).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time

from pipelines import cli
from pipelines.errors import UsageError
from sparse_io.formats import LOG_FORMATS
from sparse_io.stats_file import Stats

__all__ = ["main", "run_demo"]

DEMO_CONFIG = os.path.join(os.path.dirname(__file__), "configs", "demo.yaml")


def _args(argv: list[str]) -> argparse.Namespace:
    p = cli.parser("pipelines.demo", __doc__, "[--input PATTERN --format F [--eval_input PATTERN]] [options]")
    p.add_argument("--output", default="demo_output", metavar="DIR", help="where everything goes")
    p.add_argument("--input", default=None, metavar="PATTERN", help="your logs instead of the synthetic ones")
    p.add_argument("--eval_input", default=None, metavar="PATTERN", help="held-out logs (with --input)")
    p.add_argument("--format", default="criteo", choices=LOG_FORMATS, help="format of --input and --eval_input")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="ingest config (default: pipelines/configs/demo.yaml)")
    p.add_argument("--rows", type=int, default=60_000, help="synthetic training rows")
    p.add_argument("--eval_rows", type=int, default=15_000, help="synthetic held-out rows")
    p.add_argument("--steps", type=int, default=300, help="most training steps")
    p.add_argument("--batch_size", type=int, default=512, help="rows per training step, cut to the training rows")
    p.add_argument("--resume", action="store_true", help="continue the model in <output>/model")
    p.add_argument("--early_stopping", action=argparse.BooleanOptionalAction, default=True,
                   help="stop when the held-out loss stops falling (with held-out rows)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic logs, the weights and the shuffle")
    p.add_argument("--jit_compile", action="store_true", help="compile the train step with XLA")
    args = p.parse_args(argv)
    if args.eval_input and not args.input:
        p.error("--eval_input needs --input")
    if args.rows <= 0 or args.eval_rows <= 0 or args.steps <= 0 or args.batch_size <= 0:
        p.error("--rows, --eval_rows, --steps and --batch_size must be positive")
    return args


def run_demo(argv: list[str]) -> dict:
    """Runs the demo as `argv` asks; returns its summary (also printed by `main`)."""
    from pipelines.early_stopping import train_with_early_stopping
    from pipelines.ingest import run_ingest
    from pipelines.report import summary_text
    from pipelines.synthetic import write_synthetic_criteo
    from pipelines.train import train
    from pipelines.train_runs import record_run

    args = _args(argv)
    started = time.monotonic()
    out = args.output
    model_dir = os.path.join(out, "model")
    done = _prepare_model_dir(model_dir, args.resume, args.steps)
    if args.input:
        train_logs, eval_logs = args.input, args.eval_input
    else:
        print(f"generating {args.rows:,} + {args.eval_rows:,} synthetic Criteo rows under {out}/raw ...")
        # Seeds 1000k and 1000k+1 share one click model: a training day and a held-out day.
        world = 1000 * (args.seed + 1)
        train_logs = write_synthetic_criteo(os.path.join(out, "raw", "train.tsv.gz"), args.rows, world)
        eval_logs = write_synthetic_criteo(os.path.join(out, "raw", "heldout.tsv.gz"), args.eval_rows, world + 1)
    config = args.config or DEMO_CONFIG
    ingested = {}
    for name, logs in (("train", train_logs), ("heldout", eval_logs)):
        if logs is None:
            continue
        print(f"ingesting {logs} -> {out}/{name}")
        summary = run_ingest([
            "--input", logs, "--format", args.format, "--config", config,
            "--output", os.path.join(out, name), "--overwrite",
        ])
        print(summary_text(summary))
        ingested[name] = summary
    held_out = "heldout" in ingested
    eval_dir = os.path.join(out, "heldout" if held_out else "train")
    train_stats = _stats(os.path.join(out, "train"))
    rows = int(train_stats.get("num_rows", 0))
    if rows == 0:
        raise UsageError(f"{train_logs} gave no training rows (see {out}/train/report.html): nothing to train on")
    batch_size = args.batch_size
    if batch_size > rows:
        print(f"--batch_size {batch_size} is more than the {rows:,} training rows: using batches of {rows:,}")
        batch_size = rows
    train_argv = [
        "--data", os.path.join(out, "train"), "--eval_data", eval_dir, "--model_dir", model_dir,
        "--batch_size", str(batch_size), "--seed", str(args.seed),
        *(["--jit_compile"] if args.jit_compile else []),
    ]
    if args.early_stopping and held_out:
        print(f"training up to {args.steps} steps of {batch_size:,} rows, stopping when the held-out loss "
              "stops falling ...")
        result = train_with_early_stopping(train_argv, model_dir, args.steps, done, rows // batch_size)
    else:
        print(f"training {args.steps - done} steps of {batch_size:,} rows ...")
        result = train([*train_argv, "--resume", "--steps", str(args.steps)])
        result["stopped_at"] = None
    if math.isnan(result["loss"]):  # no step ran: never report a loss nothing produced
        raise UsageError(f"no training step ran on {out}/train ({rows:,} rows, batches of {batch_size:,})")
    result["batch_size"] = batch_size
    result["evaluated_on"] = "held-out rows" if held_out else "training rows (no --eval_input)"
    baseline = _base_rate_baseline(train_stats, _stats(eval_dir))
    if baseline is not None:
        result["base_rate"], result["baseline_loss"] = baseline
    # The demo's summary of the whole run (early-stopping rounds included) is its own entry.
    record_run(model_dir, {**result, "program": "pipelines.demo"})
    result["seconds"] = time.monotonic() - started
    result["report"] = ingested["train"].get("report")
    return result


def _stats(directory: str) -> dict:
    stats = Stats.load_if_present(directory)
    return dict(stats.data) if stats is not None else {}


# What `pipelines.train` writes into a model directory; anything else there is not the demo's to delete.
_MODEL_ENTRIES = {"checkpoints", "export", "train_result.json", "workers", "best_checkpoints"}


def _prepare_model_dir(model_dir: str, resume: bool, steps: int) -> int:
    """Empties `model_dir` for a fresh model (or keeps it with `resume`); returns the steps already done."""
    if not os.path.isdir(model_dir):
        return 0
    if not resume:
        foreign = sorted(set(os.listdir(model_dir)) - _MODEL_ENTRIES)
        if foreign:
            raise UsageError(f"{model_dir} holds {foreign}, which the demo did not write; choose another --output")
        print(f"starting a fresh model in {model_dir} (--resume continues the previous one)")
        shutil.rmtree(model_dir)
        return 0
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    done = int(latest.rsplit("-", 1)[1]) if latest else 0
    if done >= steps:
        raise UsageError(
            f"--resume: the model in {model_dir} has trained {done} steps already, and --steps is {steps}: "
            f"nothing left to train (give --steps above {done}, or drop --resume for a fresh model)"
        )
    print(f"resuming the model in {model_dir} at step {done}")
    return done


def _base_rate_baseline(train_stats: dict, eval_stats: dict) -> tuple[float, float] | None:
    """(training click rate, log loss on the evaluated rows of always predicting it); None without 0/1 labels."""
    counts = [dict((int(v), c) for v, c in s.get("label", {}).get("value_counts", [])) for s in (train_stats,
                                                                                                eval_stats)]
    if not all(counts) or any(set(c) - {0, 1} for c in counts):
        return None
    (train, held) = counts
    rate = train.get(1, 0) / (train.get(0, 0) + train.get(1, 0))
    if not 0 < rate < 1:
        return None
    positives, negatives = held.get(1, 0), held.get(0, 0)
    loss = -(positives * math.log(rate) + negatives * math.log(1 - rate)) / (positives + negatives)
    return rate, loss


def main(argv: list[str] | None = None) -> None:
    """Runs `python -m pipelines.demo` with `argv` (default: the command line); errors exit as the module doc says."""
    from pipelines.errors import quiet_beam_tracebacks

    argv = sys.argv[1:] if argv is None else argv
    with cli.cli_errors("pipelines.demo"):
        verbose = _args(argv).verbose
        cli.configure_logging(verbose)
        quiet_beam_tracebacks()
        cli.quiet_tensorflow_import(verbose)
        r = run_demo(argv)
        print()
        print("sparseflow demo done")
        print(f"  shards + schema.json + stats.json    {os.path.dirname(r['model_dir'])}/train")
        print(f"  ingest report                        {r['report']}")
        print(f"  model checkpoints and SavedModel     {r['model_dir']}")
        stopped = f" (early stopping: the held-out loss rose at step {r['stopped_at']})" if r["stopped_at"] else ""
        print(f"  steps trained                        {r['steps']}, batches of {r['batch_size']:,} rows{stopped}")
        print(f"  training loss, last batch            {r['loss']:.4f}")
        if "eval_auc" in r:
            print(f"  loss / AUC on {r['evaluated_on']:<22} {r['eval_loss']:.4f} / {r['eval_auc']:.3f}")
            if "baseline_loss" in r:
                if r["evaluated_on"] == "held-out rows":
                    beats = r["eval_loss"] < r["baseline_loss"]
                    verdict = "the model beats it" if beats else "the model does NOT beat it"
                else:  # a memorising model wins on rows it trained on; that says nothing
                    verdict = "on rows the model trained on: give --eval_input for a fair comparison"
                print(f"  base rate {r['base_rate']:.3f}, always predicted    {r['baseline_loss']:.4f} / 0.500"
                      f"  ({verdict})")
        else:  # a history ingest: its task's metrics (pipelines.tasks)
            for key in sorted(k for k in r if k.startswith("eval_") and k != "eval_rows"):
                print(f"  {key[5:]} on {r['evaluated_on']:<22} {r[key]:.4f}")
        print(f"  total time                           {r['seconds']:.0f} s")


if __name__ == "__main__":
    main()
