"""`python -m pipelines.demo` (`make demo`): the whole flow on a seeded synthetic log.

    logs -> ingest (Beam, local runner) -> shards + schema.json + stats.json
         -> tf.data COO batches padded to the stats.json capacity
         -> embedding bags + block-sparse MLP, trained a few hundred steps
         -> loss and AUC on held-out rows, a SavedModel taking raw ids

With no arguments it generates a training day and a held-out day of
Criteo-format logs under `demo_output/raw/`. With `--input` (and `--format`,
`--config`) it runs on your data instead; `--eval_input` names held-out logs
(without it the AUC is measured on the training rows and says so).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from pipelines import cli
from sparse_io.readers import LOG_FORMATS

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
    p.add_argument("--steps", type=int, default=300, help="training steps")
    p.add_argument("--batch_size", type=int, default=512, help="rows per training step")
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
    from pipelines.ingest import run_ingest
    from pipelines.report import summary_text
    from pipelines.synthetic import write_synthetic_criteo
    from pipelines.train import train

    args = _args(argv)
    started = time.monotonic()
    out = args.output
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
    eval_dir = os.path.join(out, "heldout" if "heldout" in ingested else "train")
    print(f"training {args.steps} steps of {args.batch_size} rows ...")
    result = train([
        "--data", os.path.join(out, "train"), "--eval_data", eval_dir,
        "--model_dir", os.path.join(out, "model"), "--steps", str(args.steps),
        "--batch_size", str(args.batch_size), "--seed", str(args.seed),
        *(["--jit_compile"] if args.jit_compile else []),
    ])
    result["evaluated_on"] = "held-out rows" if "heldout" in ingested else "training rows (no --eval_input)"
    result["seconds"] = time.monotonic() - started
    result["report"] = ingested["train"].get("report")
    return result


def main(argv: list[str] | None = None) -> None:
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
        print(f"  shards + schema.json + stats.json   {os.path.dirname(r['model_dir'])}/train")
        print(f"  ingest report                        {r['report']}")
        print(f"  model checkpoints and SavedModel     {r['model_dir']}")
        print(f"  final training loss                  {r['loss']:.4f}")
        if "eval_auc" in r:
            print(f"  loss / AUC on {r['evaluated_on']:<22} {r['eval_loss']:.4f} / {r['eval_auc']:.3f}")
        else:  # a history ingest: its task's metrics (pipelines.tasks)
            for key in sorted(k for k in r if k.startswith("eval_") and k != "eval_rows"):
                print(f"  {key[5:]} on {r['evaluated_on']:<22} {r[key]:.4f}")
        print(f"  total time                           {r['seconds']:.0f} s")


if __name__ == "__main__":
    main()
