"""Runs every benchmark and writes RESULTS.md, results.json and plots/*.png.

    python -m benchmarks [--quick] [--only NAME[,NAME]] [--output DIR]      (or: make bench ARGS=...)

Each benchmark (see benchmarks.suite.BENCHMARKS) runs in this process on
generated data, ours and its peers alternately after a warm-up; their
results are brought to one table (benchmarks.suite) and written to DIR:
RESULTS.md, results.json and plots/{throughput,block_sparse,batch_size}.png.

A full run writes into benchmarks/ (the committed results) unless --output
says otherwise. A --quick run (small data, few repetitions: a smoke run of
about a minute or two) writes into a fresh temporary directory unless
--output is given, so it never overwrites the committed full results.

`--merge` (with --only) runs the named benchmarks and replaces only their
runs, rows and results in DIR's existing results.json, keeping every other
benchmark's from the run that made them; RESULTS.md then says, for each
benchmark run separately, its own date, commit and load.

A benchmark that fails is reported (progress line, a FAILED row and its
traceback in RESULTS.md) and the others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.suite import BENCHMARKS, data_sizes, normalise, run_benchmark
from pipelines import cli

DEFAULT_OUTPUT = os.path.dirname(os.path.abspath(__file__))


def _names(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown benchmark(s) {unknown or value!r}; known: {', '.join(BENCHMARKS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser("benchmarks", __doc__, "[--quick] [--only NAME[,NAME]] [--output DIR]",
                        epilog="A benchmark that fails is reported and the others still run; the exit status is "
                        "then 1.")
    parser.add_argument("--quick", action="store_true", help="small data, few repetitions (a smoke run)")
    parser.add_argument("--only", type=_names, metavar="NAME[,NAME]",
                        help=f"comma-separated subset of: {', '.join(BENCHMARKS)} (default: all)")
    parser.add_argument(
        "--output", metavar="DIR",
        help="directory for RESULTS.md, results.json and plots/ (default: benchmarks/ for a full run, "
        "a new temporary directory for --quick)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --only: replace only those benchmarks' rows in the existing results.json of the output directory",
    )
    args = parser.parse_args(argv)
    cli.configure_logging(args.verbose)
    if args.merge and not args.only:
        parser.error("--merge needs --only naming the benchmarks to run again")
    output = args.output or (tempfile.mkdtemp(prefix="sparseflow-bench-quick-") if args.quick else DEFAULT_OUTPUT)
    os.makedirs(output, exist_ok=True)

    from benchmarks.report import environment, write_results

    env = environment()
    names = args.only or list(BENCHMARKS)
    began = time.perf_counter()
    runs, rows, results = [], [], {}
    for index, name in enumerate(names, 1):
        print(f"[benchmarks] {index}/{len(names)}, {time.perf_counter() - began:.0f} s elapsed", flush=True)
        run = run_benchmark(name, args.quick, log=lambda line: print(line, flush=True))
        if "result" in run:
            try:
                rows += normalise(name, run["result"])
                run["sizes"] = data_sizes(name, run["result"])
                results[name] = run["result"]
            except Exception:  # a result of an unexpected shape is a failure of that benchmark too
                import traceback

                run = {"name": name, "seconds": run["seconds"], "error": traceback.format_exc(limit=8)}
                print(f"[benchmarks] {name}: FAILED to read its result", flush=True)
        runs.append(run)

    from benchmarks.plots import write_plots

    plots, plot_notes = ([], []) if args.merge else write_plots(rows, results, os.path.join(output, "plots"))
    report = {
        "quick": args.quick,
        "environment": env,
        "seconds": time.perf_counter() - began,
        "runs": [{k: v for k, v in run.items() if k != "result"} for run in runs],
        "rows": rows,
        "plots": plots,
        "plot_notes": plot_notes,
        "results": results,
    }
    if args.merge:
        report = merge_into_previous(report, os.path.join(output, "results.json"))
        report["plots"], report["plot_notes"] = write_plots(
            report["rows"], report["results"], os.path.join(output, "plots")
        )
    markdown, data = write_results(report, output)
    failed = [run["name"] for run in runs if "error" in run]
    print(f"[benchmarks] wrote {markdown}, {data} and {len(plots)} plot(s) in {os.path.join(output, 'plots')}")
    if failed:
        print(f"[benchmarks] FAILED: {', '.join(failed)} (tracebacks in {markdown})", file=sys.stderr)
        return 1
    return 0


def merge_into_previous(report: dict, previous_path: str) -> dict:
    """`report`'s benchmarks put in place of the same benchmarks in the results at `previous_path`.

    The previous run's environment stays the report's; each run taken from
    `report` keeps its own environment (date, commit, load) in its entry.
    Runs and rows follow the suite's order. Raises FileNotFoundError when
    there are no previous results to merge into.
    """
    import json

    with open(previous_path, encoding="utf-8") as f:
        previous = json.load(f)
    fresh = {run["name"] for run in report["runs"]}
    runs = {run["name"]: run for run in previous["runs"] if run["name"] not in fresh}
    runs.update({run["name"]: dict(run, environment=report["environment"]) for run in report["runs"]})
    rows = [row for row in previous["rows"] if row["benchmark"] not in fresh] + report["rows"]
    results = {k: v for k, v in previous.get("results", {}).items() if k not in fresh} | report["results"]
    order = {name: i for i, name in enumerate(BENCHMARKS)}
    return dict(
        previous,
        runs=sorted(runs.values(), key=lambda run: order.get(run["name"], len(order))),
        rows=sorted(rows, key=lambda row: order.get(row["benchmark"], len(order))),
        results=results,
        seconds=previous["seconds"],
    )


if __name__ == "__main__":
    sys.exit(main())
