"""Peak memory of reading a Criteo log: streaming read_logs stays flat as the log grows 10x.

    python -m benchmarks.reader_memory [--quick] [--json results.json]

A synthetic Criteo TSV log (label, I1..I13, C1..C26; about 10% missing values)
is written at two sizes, 10x apart (200k and 2M rows; --quick: 10k and 100k,
one repetition).
Each read runs in a fresh Python process, which reports its peak resident set
(VmHWM from /proc/self/status, falling back to ru_maxrss) once before reading
(after imports) and once after:

  ours: `sparse_io.read_logs(path, "criteo")`, consuming each batch as it comes
        (only the row count is kept), default batch_size 8192;
  peer: `pyarrow.csv.read_csv` of the whole file into one table, the usual way
        to load such a log, whose memory grows with the file.

Runs alternate ours and peer at each size; the table gives the median peak,
the min-max spread, the part added by reading (peak minus the post-import
peak), and how much each grew from the small to the large log.

The reader's peak settles after about 20 blocks (some 160k rows at the
default batch size: allocator pools and caches warming up), then stays put
however long the log is; so the --quick sizes show part of that warm-up as
growth, and the full sizes are the ones to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from benchmarks._rss import add_growth, measure_alternately, measure_in_child, peak_mib, print_table, summarise

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_CHUNK_ROWS = 100_000


# --- the synthetic log --------------------------------------------------------------------------------


def _hex8(values: np.ndarray) -> pa.Array:
    """uint32 values as 8-digit lowercase hex strings, without a Python loop."""
    shifts = np.arange(28, -4, -4, dtype=np.uint32)
    digits = _HEX[(values[:, None] >> shifts) & np.uint32(0xF)]  # [n, 8] ASCII codes
    return pa.array(np.ascontiguousarray(digits).view("S8").ravel(), pa.binary(8)).cast(pa.string())


def _chunk(rng: np.random.Generator, rows: int) -> pa.Table:
    columns = {"label": pa.array((rng.random(rows) < 0.25).astype(np.int64)).cast(pa.string())}
    for i in range(1, 14):
        counts = np.floor(rng.lognormal(1.5, 1.5, rows)).astype(np.int64)
        columns[f"I{i}"] = pa.array(counts, mask=rng.random(rows) < 0.1).cast(pa.string())
    for i in range(1, 27):
        ids = rng.zipf(1.3, rows).astype(np.uint64) + np.uint64(i << 20)
        hashed = ((ids * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        missing = pa.array(rng.random(rows) < 0.1)
        columns[f"C{i}"] = pc.if_else(missing, pa.scalar(None, pa.string()), _hex8(hashed))
    return pa.table(columns)


def write_criteo_log(path: str, rows: int, seed: int = 0) -> int:
    """Writes `rows` Criteo-layout TSV lines to `path` (missing values as empty fields); returns its size."""
    rng = np.random.default_rng(seed)
    options = pcsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    writer = None
    with open(path, "wb") as f:
        for start in range(0, rows, _CHUNK_ROWS):
            table = _chunk(rng, min(_CHUNK_ROWS, rows - start))
            if writer is None:
                writer = pcsv.CSVWriter(f, table.schema, write_options=options)
            writer.write_table(table)
        if writer is not None:
            writer.close()
    return os.path.getsize(path)


# --- one measurement, in a fresh process --------------------------------------------------------------


def _child(contender: str, path: str) -> dict:
    if contender == "ours":
        from sparse_io import DeadLetterSink, read_logs
    baseline = peak_mib()
    start = time.perf_counter()
    if contender == "ours":
        sink = DeadLetterSink()
        rows = sum(batch.num_rows for batch in read_logs(path, "criteo", errors=sink))
    else:
        names = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
        types = {n: pa.int64() if n == "label" else pa.float32() if n.startswith("I") else pa.string() for n in names}
        table = pcsv.read_csv(
            path,
            read_options=pcsv.ReadOptions(column_names=names),
            parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False),
            convert_options=pcsv.ConvertOptions(column_types=types),
        )
        rows = table.num_rows
    return {"rows": rows, "seconds": time.perf_counter() - start, "baseline_mib": baseline, "peak_mib": peak_mib()}


def _measure(contender: str, path: str) -> dict:
    return measure_in_child("benchmarks.reader_memory", contender, path)


# --- the benchmark ------------------------------------------------------------------------------------


def run(quick: bool) -> dict:
    """Measures both contenders at both sizes; returns a JSON-able dict (also printed as a markdown table)."""
    sizes = [10_000, 100_000] if quick else [200_000, 2_000_000]
    repeats = 1 if quick else 3
    results: dict = {"benchmark": "reader_memory", "quick": quick, "repeats": repeats, "sizes": sizes, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for rows in sizes:
            path = os.path.join(tmp, f"criteo-{rows}.tsv")
            size = write_criteo_log(path, rows, seed=rows)
            runs = measure_alternately(
                lambda c, path=path: _measure(c, path), ("ours", "peer"), rows, repeats, warm_up=not quick
            )
            for contender, measured in runs.items():
                results["runs"].setdefault(contender, {})[str(rows)] = summarise(measured, size, "reading_mib")
    add_growth(results)
    print_table(results, "reader", "reading_mib", "added by reading")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k and 100k rows, one repetition; well under a minute")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", nargs=2, metavar=("CONTENDER", "PATH"), help=argparse.SUPPRESS)
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
