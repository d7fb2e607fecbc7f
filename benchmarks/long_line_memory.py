"""Peak memory with one very long line among normal lines, against the same log without it.

    python -m benchmarks.long_line_memory [--stage ingest|reader] [--rows N] [--line-mib 200]
                                          [--max-line-bytes 16777216] [--json results.json]

Writes a synthetic Criteo TSV log of `--rows` lines twice: as it is, and
with one line of `--line-mib` MiB (one field of "x", no newline inside)
in its middle. Each is read in a fresh Python process, which reports its
peak resident set (VmHWM) after its imports and at the end:

  ingest: `pipelines.ingest` (local in-process runner, every C feature
          hashed, `input.max_line_bytes` from the flag, error budget 1%);
  reader: `sparse_io.read_logs` alone, consuming batches as they come.

The long line must come out as one dead letter (its reason gives the
length and the limit) and every other line as a row, and its cost in
memory is bounded by `max_line_bytes`, not by the line: the line is read
past in chunks. Printed: both peaks, their ratio, and the difference.

Measured (2 shared CPU cores, 2026-12-05), ingest stage, 100,000 normal
rows (23 MiB), one 200 MiB line, the default max_line_bytes (16 MiB):
peak 313 MiB with the line, 315 MiB without (0.99x); the line is one dead
letter. Before the limit existed the same run peaked at 2,092 MiB against
309 (6.8x; +1,783 MiB, about 9x the line's size). Reader stage, 2,000 rows
and a 40 MiB line against a 256 KiB limit (the suite's scaled-down check):
189 vs 185 MiB, where it was 554 vs 189 before.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from benchmarks._rss import measure_in_child, peak_mib
from benchmarks.reader_memory import write_criteo_log

__all__ = ["write_log_with_long_line", "measure", "main"]

_PIECE = 1 << 20


def write_log_with_long_line(path: str, rows: int, line_bytes: int) -> int:
    """`rows` Criteo lines at `path`, with one `line_bytes`-byte line in the middle when `line_bytes` > 0.

    The long line is written a MiB at a time, so writing it holds no more. Returns the file size.
    """
    write_criteo_log(path, rows, seed=rows)
    if line_bytes <= 0:
        return os.path.getsize(path)
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    middle = len(lines) // 2
    with open(path, "wb") as f:
        f.writelines(lines[:middle])
        f.write(b"1\t")
        left = line_bytes - 2
        while left > 0:
            step = min(_PIECE, left)
            f.write(b"x" * step)
            left -= step
        f.write(b"\n")
        f.writelines(lines[middle:])
    return os.path.getsize(path)


def _child(stage: str, path: str, max_line_bytes: int, out: str) -> dict:
    if stage == "ingest":
        import apache_beam  # noqa: F401  (imports count in the baseline, not in the work)
        import yaml

        import transforms.beam  # noqa: F401
        from pipelines.ingest import run_ingest
    else:
        from sparse_io import DeadLetterSink, read_logs
    baseline = peak_mib()
    start = time.perf_counter()
    if stage == "ingest":
        config = os.path.join(os.path.dirname(out), "config.yaml")
        inp = {"format": "criteo", **({"max_line_bytes": max_line_bytes} if max_line_bytes else {})}
        with open(config, "w") as f:
            yaml.safe_dump(
                {"input": inp, "features": {"C*": {"hash_buckets": 100_000}}, "output": {"num_shards": 1},
                 "error_budget": 0.01},
                f,
            )
        summary = run_ingest(["--input", path, "--config", config, "--output", out, "--overwrite", "--no_report",
                              "--progress_seconds", "0"])
        rows, bad = summary["rows_out"], summary["bad_records"]
        with open(os.path.join(out, "errors", "dead_letters.jsonl")) as f:
            reasons = [json.loads(line)["reason"] for line in f]
    else:
        sink = DeadLetterSink()
        limit = {"max_line_bytes": max_line_bytes} if max_line_bytes else {}  # 0: the reader's default
        rows = sum(b.num_rows for b in read_logs(path, "criteo", errors=sink, error_budget=0.01, **limit))
        bad, reasons = sink.bad, [letter.reason for letter in sink]
    return {"rows": rows, "bad": bad, "reasons": reasons[:3], "seconds": time.perf_counter() - start,
            "baseline_mib": baseline, "peak_mib": peak_mib()}


def measure(stage: str, rows: int, line_bytes: int, max_line_bytes: int) -> dict:
    """Both logs measured in fresh processes; returns the two runs, the peak ratio and the difference (MiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name, size in (("without", 0), ("with", line_bytes)):
            path = os.path.join(tmp, f"{name}.tsv")
            file_bytes = write_log_with_long_line(path, rows, size)
            out = os.path.join(tmp, f"out-{name}", "shards")
            os.makedirs(os.path.dirname(out))
            runs[name] = measure_in_child("benchmarks.long_line_memory", stage, path, str(max_line_bytes), out)
            runs[name]["file_mib"] = file_bytes / 2**20
    return {
        "benchmark": "long_line_memory", "stage": stage, "rows": rows, "line_bytes": line_bytes,
        "max_line_bytes": max_line_bytes, "runs": runs,
        "peak_ratio": runs["with"]["peak_mib"] / runs["without"]["peak_mib"],
        "peak_added_mib": runs["with"]["peak_mib"] - runs["without"]["peak_mib"],
    }


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        print(json.dumps(_child(argv[1], argv[2], int(argv[3]), argv[4])))
        return {}
    parser = argparse.ArgumentParser(prog="python -m benchmarks.long_line_memory", description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=("ingest", "reader"), default="ingest")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--line-mib", type=float, default=200.0)
    parser.add_argument("--max-line-bytes", type=int, default=16 << 20, help="0: leave the default")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    result = measure(args.stage, args.rows, int(args.line_mib * 2**20), args.max_line_bytes)
    for name, run in result["runs"].items():
        print(f"{name} the long line: log {run['file_mib']:.0f} MiB, peak RSS {run['peak_mib']:.0f} MiB "
              f"(after imports {run['baseline_mib']:.0f}), {run['rows']:,} rows, {run['bad']} bad, "
              f"{run['seconds']:.1f} s; {run['reasons'][:1]}")
    print(f"peak with / without: {result['peak_ratio']:.2f}x ({result['peak_added_mib']:+.0f} MiB)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
