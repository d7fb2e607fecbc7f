"""Peak memory of a whole `pipelines.ingest` run at two log sizes 10x apart, beside the reader alone.

    python -m benchmarks.ingest_memory [--quick] [--json results.json]

A synthetic Criteo TSV log (benchmarks.reader_memory.write_criteo_log) is
written at two sizes, 10x apart (500k and 5M rows; --quick: 5k and 50k):
500k rows already (nearly) fill every buffer whose size is capped (the
100k-row spill buffer, the id count tables), so the growth to 5M is what
the log size itself adds.
Each run happens in a fresh Python process, which reports its peak resident
set (VmHWM) once after its imports and once at the end:

  ingest: `pipelines.ingest.run_ingest` with the default Criteo config (every
          C feature hashed, shuffled Parquet shards, stats.json) on the local
          in-process runner, no report;
  reader: `sparse_io.read_logs` of the same log, consuming batches as they
          come: the floor any streaming ingest could reach;
  dataset: `transforms.make_dataset` over the shards the ingest wrote, one
          shuffled epoch of COO batches of 4096 (the training input): its
          memory is its read-ahead buffers, whatever the data set's size;
  dataset_arrow: the same epoch over Arrow shards of the same rows
          (`pipelines.convert` of the ingest's output, run in a process of
          its own before the measured one starts). The shards are
          memory-mapped: pages of them the epoch has read count in the
          resident set as file-backed memory, which the kernel drops under
          pressure, while anonymous memory is what the reader allocates.
          Both dataset runs sample RssAnon and RssFile (/proc/self/status)
          after every batch and report each one's peak;
  parquet_table: `pyarrow.parquet.read_table` of those shards, the whole data
          set in memory, as a reader without streaming would hold it.

Runs alternate the contenders at each size. The table gives the median peak, its
min-max spread, the part added by the work (peak minus the post-import
peak), and the growth from the small to the large log.

What the figures show: before WriteShards spilled its shuffle to disk, the
ingest's peak grew about 190 MiB per 100k Criteo rows (1.2 GiB at 500k
rows), because the local in-process runner buffers a GroupByKey's whole
input in memory; now only spill file names are grouped
(`transforms.beam.shard_spill`). The peak then came at the very end, when
the runner copied every feature's pickled id-count accumulator (16 bytes an
entry, growing with the distinct ids seen up to the cap of the stats) to
feed the stage that merges them: single runs of 2M rows jumped from 344 to
406 MiB there (2026-12-03). The accumulators now travel as zstd-compressed
Arrow tables (about 2 bytes an entry, `transforms.beam._counts`), and the
same runs peaked at 354 MiB (500k rows), 369 (2M) and 361-401 (5M), against
349, 417-428 and 463 before. What still varies between runs of one size
(tens of MiB) is memory the allocators keep after the read stage's batches
are freed. The dataset's reader used to memory-map its shards, so its
resident set grew with the data it had read (808 -> 1,144 MiB over one
5M-row epoch); it reads them through buffers now. On Dataflow the shuffle service holds the grouped data and a
worker holds one key range of one shard at a time.

Since WriteShards encodes several shards at once (one per core, at most
`write_threads`), each shard in flight holds its own row group and key
range: the default config writes 500k rows as one shard and 5M as ten, two
at a time on 2 cores, and that second writer (plus its thread's allocator
arena) added 393 -> 476 MiB at 5M rows (2026-12-03), none of it at 500k. It
is bounded by the writers in flight, not by the log's size; the table's
row names the shards and how many were encoded at once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks._rss import add_growth, measure_alternately, measure_in_child, peak_mib, print_table, summarise
from benchmarks.reader_memory import write_criteo_log

# The ingest runs first at each size: the last two read the shards it wrote.
CONTENDERS = ("ingest", "reader", "dataset", "dataset_arrow", "parquet_table")
BATCH_SIZE = 4096


def _rss_split_mib() -> tuple[float, float]:
    """(anonymous, file-backed) resident memory of this process now, MiB (0, 0 where /proc is missing)."""
    anon = file_backed = 0.0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) / 1024
                elif line.startswith("RssFile:"):
                    file_backed = int(line.split()[1]) / 1024
    except OSError:
        pass
    return anon, file_backed


def _epoch_rows(dataset) -> tuple[int, dict]:
    """Rows of one pass, and the peaks of anonymous and file-backed memory sampled after each batch."""
    rows, peak_anon, peak_file = 0, 0.0, 0.0
    anon_before, file_before = _rss_split_mib()
    for _, label in dataset:
        rows += int(label.shape[0])
        anon, file_backed = _rss_split_mib()
        peak_anon, peak_file = max(peak_anon, anon), max(peak_file, file_backed)
    return rows, {"anon_baseline_mib": anon_before, "peak_anon_mib": peak_anon,
                  "file_baseline_mib": file_before, "peak_file_mib": peak_file}


def _convert_to_arrow(out: str) -> str:
    """`out` converted to Arrow shards beside it, by `pipelines.convert` in a process of its own."""
    import shutil
    import subprocess

    target = out + "-arrow"
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pipelines.convert", out, target, "--format", "arrow"], check=True,
                   capture_output=True)
    return target


def _child(contender: str, path: str, out: str) -> dict:
    if contender == "ingest":
        import apache_beam  # noqa: F401  (imports count in the baseline, not in the work)

        import transforms.beam  # noqa: F401
        from pipelines.ingest import run_ingest
    elif contender == "reader":
        from sparse_io import DeadLetterSink, read_logs
    elif contender in ("dataset", "dataset_arrow"):
        import tensorflow  # noqa: F401

        from transforms import make_dataset

        if contender == "dataset_arrow":
            out = _convert_to_arrow(out)
    else:
        import pyarrow.parquet as pq
    baseline = peak_mib()
    start = time.perf_counter()
    extra = {}
    if contender == "ingest":
        summary = run_ingest(
            ["--input", path, "--format", "criteo", "--output", out, "--overwrite", "--no_report",
             "--progress_seconds", "0"]
        )
        rows = summary["rows_out"]
        extra = {"shards": len([f for f in os.listdir(out) if f.startswith("part-")])}
    elif contender == "reader":
        rows = sum(batch.num_rows for batch in read_logs(path, "criteo", errors=DeadLetterSink()))
    elif contender in ("dataset", "dataset_arrow"):
        # Shuffled COO batches padded to stats.json's capacities, the way training reads them.
        rows, extra = _epoch_rows(make_dataset(out, BATCH_SIZE, shuffle=True, seed=0))
    else:
        shards = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".parquet"))
        rows = pq.read_table(shards).num_rows
    return {
        "rows": rows, "seconds": time.perf_counter() - start, "baseline_mib": baseline, "peak_mib": peak_mib(), **extra
    }


def _measure(contender: str, path: str, out: str) -> dict:
    return measure_in_child("benchmarks.ingest_memory", contender, path, out)


def run(quick: bool) -> dict:
    """Measures every contender at both sizes; returns a JSON-able dict (also printed as a markdown table)."""
    # Here, not at the top: each measured child imports this module, and the reader's must not load Beam.
    from transforms.beam.write_shards import default_write_threads

    sizes = [5_000, 50_000] if quick else [500_000, 5_000_000]
    repeats = 1 if quick else 2
    results: dict = {"benchmark": "ingest_memory", "quick": quick, "repeats": repeats, "sizes": sizes, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for rows in sizes:
            path = os.path.join(tmp, f"criteo-{rows}.tsv")
            size = write_criteo_log(path, rows, seed=rows)
            out = os.path.join(tmp, f"out-{rows}")
            # The log was just written, so it is in the page cache: one warm-up (at the small size, where it
            # is cheap) covers the rest of the start-up effects.
            runs = measure_alternately(
                lambda c, path=path, out=out: _measure(c, path, out),
                CONTENDERS,
                rows,
                repeats,
                warm_up=not quick and rows == sizes[0],
            )
            for contender, measured in runs.items():
                summary = summarise(measured, size, "work_mib")
                for key in ("peak_anon_mib", "peak_file_mib", "anon_baseline_mib"):
                    if key in measured[0]:
                        values = [m[key] for m in measured]
                        summary[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
                if "shards" in measured[0]:
                    summary["shards"] = measured[0]["shards"]
                    summary["shards_at_once"] = min(summary["shards"], default_write_threads())
                results["runs"].setdefault(contender, {})[str(rows)] = summary
    add_growth(results)
    small, large = (str(x) for x in sizes)
    for contender, by_size in results["runs"].items():
        if "peak_anon_mib" in by_size[small]:
            grew = by_size[large]["peak_anon_mib"]["median"] - by_size[small]["peak_anon_mib"]["median"]
            results[f"{contender}_anon_growth_mib"] = grew
    print_table(results, "run", "work_mib", "added by the work")
    for contender, by_size in results["runs"].items():
        for rows, r in by_size.items():
            if "peak_anon_mib" in r:
                print(f"{contender}, {int(rows):,} rows: peak anonymous {r['peak_anon_mib']['median']:.0f} MiB, "
                      f"peak file-backed {r['peak_file_mib']['median']:.0f} MiB")
        if f"{contender}_anon_growth_mib" in results:
            print(f"{contender}: peak anonymous memory grew {results[f'{contender}_anon_growth_mib']:+.0f} MiB "
                  f"from {int(small):,} to {int(large):,} rows")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5k and 50k rows; well under a minute")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", nargs=3, metavar=("CONTENDER", "PATH", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    results = run(args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
