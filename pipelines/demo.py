"""Demo: a small synthetic Criteo log turned into Parquet shards.

    python -m pipelines.demo [--output demo_output] [--rows 20000] [--shards 4] [--seed 0]

Writes `raw/day0.tsv.gz` (a seeded synthetic log in the Criteo layout: Zipf-
distributed categorical ids, missing values, some lines short of their
trailing empty fields and two corrupt lines), reads it back with
`sparse_io.read_logs`, and writes `part-0000i-of-0000k.parquet` shards,
`schema.json` and `errors/dead_letters.jsonl` into the output directory.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparse_io import DeadLetterSink, criteo_schema, read_logs, shard_name, write_parquet_shard

_CORRUPT_LINES = 2


def synthetic_criteo_lines(rows: int, seed: int) -> list[str]:
    """Seeded Criteo-layout TSV lines: label, I1..I13, C1..C26 (8-digit hex)."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(rows) < 0.25).astype(np.int64)
    counts = np.floor(rng.lognormal(1.5, 1.5, size=(rows, 13))).astype(np.int64)
    counts[rng.random((rows, 13)) < 0.02] = -1  # Criteo's I2 and friends hold a few -1s
    ints = np.where(rng.random((rows, 13)) < 0.2, "", counts.astype(str))
    # Per column, ids drawn from a Zipf law and hashed to 32 bits, as Criteo ships them.
    ids = rng.zipf(1.3, size=(rows, 26)).astype(np.uint64) + np.arange(26, dtype=np.uint64) * np.uint64(
        1 << 20
    )
    hashed = (ids * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF)
    cats = np.where(rng.random((rows, 26)) < 0.1, "", np.char.zfill(np.char.mod("%x", hashed), 8))
    lines = []
    for r in range(rows):
        fields = [str(labels[r]), *ints[r], *cats[r]]
        if r % 3 == 0:  # as in real dumps, some lines lose their trailing empty fields
            while fields and fields[-1] == "":
                fields.pop()
        lines.append("\t".join(fields))
    for r in rng.choice(rows, size=min(_CORRUPT_LINES, rows), replace=False):
        lines[r] = lines[r].replace("\t", "\tnot-a-number\t", 1)  # one field too many, and non-numeric
    return lines


def run(output: str, rows: int, shards: int, seed: int) -> dict:
    """Generates, reads and shards the demo log; returns a JSON-able summary."""
    raw_dir = os.path.join(output, "raw")
    os.makedirs(raw_dir, exist_ok=True)
    raw_path = os.path.join(raw_dir, "day0.tsv.gz")
    with gzip.open(raw_path, "wt", encoding="utf-8") as f:
        f.write("\n".join(synthetic_criteo_lines(rows, seed)) + "\n")

    schema = criteo_schema()
    sink = DeadLetterSink()
    budget = (_CORRUPT_LINES + 0.5) / max(rows, 1)
    batches = list(read_logs(raw_path, "criteo", schema, batch_size=4096, errors=sink, error_budget=budget))
    table = pa.Table.from_batches(batches, schema=schema.arrow_schema())

    bounds = np.linspace(0, table.num_rows, shards + 1).astype(int)
    paths = []
    for i in range(shards):
        path = os.path.join(output, shard_name(i, shards, ".parquet"))
        write_parquet_shard(path, table.slice(bounds[i], bounds[i + 1] - bounds[i]).to_batches(), schema)
        paths.append(path)
    schema.save(output)
    errors_path = sink.write_jsonl(os.path.join(output, "errors", "dead_letters.jsonl"))

    present = pc.list_value_length(table.column("C1")).to_numpy(zero_copy_only=False) > 0
    return {
        "output": output,
        "raw": raw_path,
        "rows_read": table.num_rows,
        "records": sink.records,
        "dead_letters": sink.bad,
        "padded_lines": sink.padded,
        "shards": paths,
        "dead_letters_file": errors_path,
        "click_rate": float(pc.mean(table.column("label")).as_py() or 0.0),
        "distinct_C1": len(pc.unique(pc.list_flatten(table.column("C1")))),
        "C1_present": float(present.mean()) if present.size else 0.0,
    }


def _print(summary: dict) -> None:
    print(f"synthetic log      {summary['raw']}")
    print(f"records            {summary['records']}")
    print(f"rows read          {summary['rows_read']}")
    print(f"padded short lines {summary['padded_lines']}")
    print(f"dead letters       {summary['dead_letters']}  ->  {summary['dead_letters_file']}")
    print(f"click rate         {summary['click_rate']:.3f}")
    print(f"distinct C1 ids    {summary['distinct_C1']}  (present in {summary['C1_present']:.0%} of rows)")
    for path in summary["shards"]:
        print(f"shard              {path}  ({os.path.getsize(path)} bytes)")
    print(f"schema             {os.path.join(summary['output'], 'schema.json')}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="demo_output", help="output directory (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=20000, help="rows in the synthetic log")
    parser.add_argument("--shards", type=int, default=4, help="number of Parquet shards")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.rows < 0 or args.shards < 1:
        parser.error("--rows must be >= 0 and --shards >= 1")
    summary = run(args.output, args.rows, args.shards, args.seed)
    _print(summary)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
