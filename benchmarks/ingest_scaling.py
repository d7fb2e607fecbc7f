"""How the ingest scales: time and peak RSS of hashing, vocabulary and history ingests at growing log sizes.

    python -m benchmarks.ingest_scaling [--quick] [--sizes N,N,...] [--json FILE] [--plot FILE]
    python -m benchmarks --only ingest_scaling [--quick]        (the suite's rows)

Four ingests, each a fresh Python process (`benchmarks._rss`: peak resident
set VmHWM after the imports and at the end, and the wall time of
`pipelines.ingest.run_ingest`, imports excluded), on the local in-process
runner, Parquet shards, no report:

  hashing     a synthetic Criteo TSV log (13 integer, 26 categorical
              columns with Criteo-like cardinalities,
              `benchmarks.reader_memory.write_criteo_log`), every C feature
              hashed into 1M buckets;
  vocabulary  the same log, every C feature mapped through a vocabulary
              counted at ingest (`vocabulary: {min_frequency: 2}`);
  events      an event log (user, item, timestamp, rating; 100k users
              (10k at the smaller sizes) and one user holding 30% of the
              events) ingested as flat rows, user and item hashed;
  histories   the same events grouped into one history per user
              (`histories:` with `max_length: 50`): the grouping that
              held each key partition whole before it spilled sorted runs
              (`transforms.beam.history_stream`).

Sizes: 250k, 1M, 2M and 4M rows (--quick: 5k and 20k), one run of each
ingest per size, the ingests alternating at each size.

Reported per ingest and size: seconds, rows/s, peak RSS and what the work
added to it; the growth of the peak from the smallest size to each larger
one; for the history ingest, its peak's growth from 250k to 2M events beside
the plain events ingest's (target: at most 64 MiB more) and its seconds per
million events at each size (linear time: the same figure at every size);
and a plot (`benchmarks/plots/ingest_scaling.png` in a suite run) of both
against the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks._rss import measure_in_child, peak_mib
from benchmarks.reader_memory import write_criteo_log

INGESTS = ("hashing", "vocabulary", "events", "histories")
FULL_SIZES = (250_000, 1_000_000, 2_000_000, 4_000_000)
QUICK_SIZES = (5_000, 20_000)
HOT_SHARE = 0.3
# The history target: from this size to the next one listed, the history ingest's peak grows at most
# HISTORY_TARGET_MIB more than the plain events ingest's.
HISTORY_TARGET_SIZES = (250_000, 2_000_000)
HISTORY_TARGET_MIB = 64.0

_CRITEO = """\
input: {format: criteo, schema: criteo}
features:
  "C*": %s
output: {format: parquet, num_shards: %d, shuffle: true, seed: 0}
"""
_EVENTS_SCHEMA = """\
input:
  format: tsv
  skip_header: true
  schema:
    - {name: user_id, kind: %s, dtype: string}
    - {name: item_id, kind: %s, dtype: int64}
    - {name: timestamp, kind: dense, dtype: int64}
    - {name: rating, kind: dense, dtype: float32}
"""
_EVENTS = _EVENTS_SCHEMA % ("sparse", "sparse") + """\
features:
  user_id: {hash_buckets: 1000000}
  item_id: {hash_buckets: 1000000}
output: {format: parquet, num_shards: %d, shuffle: true, seed: 0}
"""
_HISTORIES = _EVENTS_SCHEMA % ("dense", "dense") + """\
histories: {key: user_id, item: item_id, time: timestamp, weight: rating, max_length: 50, min_length: 1}
features:
  item_id: {hash_buckets: 1000000}
output: {format: parquet, num_shards: %d, shuffle: true, seed: 0}
"""


def _shards(rows: int) -> int:
    return max(1, min(8, rows // 500_000))


def config_text(ingest: str, rows: int) -> str:
    """The YAML config of `ingest` for a log of `rows` rows."""
    shards = _shards(rows)
    if ingest == "hashing":
        return _CRITEO % ("{hash_buckets: 1000000}", shards)
    if ingest == "vocabulary":
        return _CRITEO % ("{vocabulary: {min_frequency: 2}}", shards)
    return (_EVENTS if ingest == "events" else _HISTORIES) % shards


def write_event_log(path: str, rows: int, seed: int = 0, users: int | None = None) -> int:
    """A TSV event log with a header: user_id, item_id, timestamp, rating; user "u0" holds HOT_SHARE of the rows.

    Returns the file's size in bytes.
    """
    users = users or (100_000 if rows >= 1_000_000 else 10_000)
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write("user_id\titem_id\ttimestamp\trating\n")
        for start in range(0, rows, 200_000):
            n = min(200_000, rows - start)
            user = np.where(rng.random(n) < HOT_SHARE, 0, rng.integers(1, users, n))
            item = rng.zipf(1.3, n) % 5_000_000
            stamp = 1_600_000_000 + rng.integers(0, 86_400 * 365, n)
            rating = rng.integers(1, 6, n)
            f.writelines(f"u{u}\t{i}\t{t}\t{r}.0\n" for u, i, t, r in zip(user, item, stamp, rating))
    return os.path.getsize(path)


# --- one measurement, in a child process ---------------------------------------------------------------------------


def _child(ingest: str, path: str, config: str, out: str) -> dict:
    import apache_beam  # noqa: F401  (imports count in the baseline, not in the work)

    import transforms.beam  # noqa: F401
    from pipelines.ingest import run_ingest

    baseline = peak_mib()
    start = time.perf_counter()
    fmt = ["--format", "criteo"] if ingest in ("hashing", "vocabulary") else []
    summary = run_ingest(["--input", path, *fmt, "--config", config, "--output", out, "--overwrite", "--no_report",
                          "--progress_seconds", "0"])
    return {"rows_in": summary["rows_in"], "rows_out": summary["rows_out"], "seconds": time.perf_counter() - start,
            "baseline_mib": baseline, "peak_mib": peak_mib()}


def _measure(ingest: str, path: str, rows: int, tmp: str) -> dict:
    config = os.path.join(tmp, f"{ingest}-{rows}.yaml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(config_text(ingest, rows))
    out = os.path.join(tmp, f"out-{ingest}")
    measured = measure_in_child("benchmarks.ingest_scaling", ingest, path, config, out)
    if measured["rows_in"] != rows:
        raise RuntimeError(f"the {ingest} ingest read {measured['rows_in']} of {rows} rows")
    return measured


# --- the benchmark -------------------------------------------------------------------------------------------------


def _growth(results: dict) -> None:
    sizes = [str(s) for s in results["sizes"]]
    for by_size in results["runs"].values():
        first = by_size[sizes[0]]["peak_mib"]
        for size in sizes:
            by_size[size]["growth_mib"] = by_size[size]["peak_mib"] - first
            by_size[size]["s_per_million"] = by_size[size]["seconds"] / (int(size) / 1e6)
    low, high = (str(s) for s in HISTORY_TARGET_SIZES)
    if low in sizes and high in sizes:
        runs = results["runs"]
        history = runs["histories"][high]["peak_mib"] - runs["histories"][low]["peak_mib"]
        events = runs["events"][high]["peak_mib"] - runs["events"][low]["peak_mib"]
        results["history_target"] = {"sizes": list(HISTORY_TARGET_SIZES), "histories_growth_mib": history,
                                     "events_growth_mib": events, "excess_mib": history - events,
                                     "target_mib": HISTORY_TARGET_MIB, "met": history - events <= HISTORY_TARGET_MIB}


def print_table(results: dict) -> None:
    print("| ingest | rows | seconds | rows/s | s per 1M rows | peak RSS MiB | added by the work MiB | "
          "growth since the smallest MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for ingest, by_size in results["runs"].items():
        for rows, r in by_size.items():
            print(f"| {ingest} | {int(rows):,} | {r['seconds']:.1f} | {int(rows) / r['seconds']:,.0f} | "
                  f"{r['s_per_million']:.1f} | {r['peak_mib']:.0f} | {r['peak_mib'] - r['baseline_mib']:.0f} | "
                  f"{r['growth_mib']:+.0f} |")
    target = results.get("history_target")
    if target:
        low, high = target["sizes"]
        print(f"\nhistories' peak grew {target['histories_growth_mib']:+.0f} MiB from {low:,} to {high:,} events, "
              f"the plain events ingest's {target['events_growth_mib']:+.0f} MiB: {target['excess_mib']:+.0f} MiB "
              f"more (target <= {target['target_mib']:.0f}: {'met' if target['met'] else 'NOT met'})")


def scaling_plot(results: dict, path: str) -> None:
    """Seconds and peak RSS against rows, one line per ingest (needs matplotlib, the `plots` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for ingest, by_size in results["runs"].items():
        rows = [int(r) / 1e6 for r in by_size]
        left.plot(rows, [r["seconds"] for r in by_size.values()], marker="o", label=ingest)
        right.plot(rows, [r["peak_mib"] for r in by_size.values()], marker="o", label=ingest)
    left.set(xlabel="rows (millions)", ylabel="seconds (imports excluded)", title="ingest time")
    right.set(xlabel="rows (millions)", ylabel="peak RSS (MiB)", title="ingest peak memory")
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def run(quick: bool, sizes: tuple[int, ...] | None = None) -> dict:
    """Measures every ingest at every size; returns a JSON-able dict (also printed as a markdown table)."""
    sizes = tuple(sizes or (QUICK_SIZES if quick else FULL_SIZES))
    results: dict = {"benchmark": "ingest_scaling", "quick": quick, "sizes": list(sizes),
                     "runs": {ingest: {} for ingest in INGESTS}}
    with tempfile.TemporaryDirectory() as tmp:
        for rows in sizes:
            criteo = os.path.join(tmp, f"criteo-{rows}.tsv")
            events = os.path.join(tmp, f"events-{rows}.tsv")
            write_criteo_log(criteo, rows, seed=rows)
            write_event_log(events, rows, seed=rows)
            # Alternating, starting with another ingest at each size: load drifts hit every ingest alike.
            turn = sizes.index(rows) % len(INGESTS)
            for ingest in INGESTS[turn:] + INGESTS[:turn]:
                path = criteo if ingest in ("hashing", "vocabulary") else events
                print(f"[ingest_scaling] {ingest}, {rows:,} rows ...", file=sys.stderr, flush=True)
                results["runs"][ingest][str(rows)] = _measure(ingest, path, rows, tmp)
            for path in (criteo, events):
                os.remove(path)
    results["runs"] = {ingest: dict(sorted(by.items(), key=lambda kv: int(kv[0])))
                       for ingest, by in results["runs"].items()}
    _growth(results)
    print_table(results)
    return results


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        print(json.dumps(_child(*argv[1:])))
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest_scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5k and 20k rows")
    parser.add_argument("--sizes", help="comma-separated row counts (default 250k,1M,2M,4M)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--plot", help="write the plot (PNG) here")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else None
    results = run(args.quick, sizes)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    if args.plot:
        scaling_plot(results, args.plot)


if __name__ == "__main__":
    main()
