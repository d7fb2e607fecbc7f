"""Reading Criteo logs and writing tf.train.Examples: sparse_io against the usual alternatives.

    python -m benchmarks.io_formats [--quick]

1. Criteo TSV -> Arrow record batches with the Criteo schema.
   ours: `sparse_io.read_logs` (vectorised per block, validated, short lines padded);
   peer: a per-row Python reader (csv module, per-field conversion, pa.RecordBatch.from_pydict);
   ref:  bare `pyarrow.csv.read_csv` (no validation, needs every line complete), as a ceiling.
2. Record batch -> serialized tf.train.Example per row.
   ours: `sparse_io.example_encoding.encode_examples` (numpy, whole batch);
   peer: one `tf.train.Example` built per row, then `SerializeToString()`.

Runs alternate ours and the peers in the same process after a warm-up; the
table gives medians, min-max spread and the peer/ours ratio of medians.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.csv as pcsv

from pipelines.synthetic import synthetic_criteo_lines
from sparse_io import DeadLetterSink, criteo_schema, read_logs
from sparse_io.example_encoding import encode_examples


def _per_row_python_reader(path: str, schema) -> pa.RecordBatch:
    columns: dict[str, list] = {name: [] for name in schema.names}
    with open(path, newline="") as f:
        for fields in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            fields += [""] * (40 - len(fields))
            columns["label"].append(int(fields[0]))
            for i in range(1, 14):
                columns[f"I{i}"].append(float(fields[i]) if fields[i] else None)
            for i in range(14, 40):
                value = fields[i]
                if value:
                    int(value, 16)  # the same hex check the vectorised reader does
                columns[f"C{i - 13}"].append([value] if value else [])
    return pa.RecordBatch.from_pydict(columns, schema=schema.arrow_schema())


def _bare_pyarrow_csv(path: str, schema) -> pa.Table:
    return pcsv.read_csv(
        path,
        read_options=pcsv.ReadOptions(column_names=schema.names),
        parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False),
        convert_options=pcsv.ConvertOptions(
            column_types={f.name: (pa.string() if f.is_sparse else f.arrow_type()) for f in schema}
        ),
    )


def _ours_reader(path: str, schema) -> int:
    sink = DeadLetterSink()
    return sum(b.num_rows for b in read_logs(path, "criteo", schema, batch_size=8192, errors=sink))


def _per_row_examples(table: pa.Table) -> list[bytes]:
    import tensorflow as tf

    out = []
    for row in table.to_pylist():
        feature = {}
        for name, value in row.items():
            if name.startswith("C"):
                feature[name] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[v.encode() for v in value])
                )
            elif name == "label":
                feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
            else:
                feature[name] = tf.train.Feature(
                    float_list=tf.train.FloatList(value=[] if value is None else [value])
                )
        out.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return out


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _compare(label: str, rows: int, contenders: dict, repeats: int) -> dict:
    for fn in contenders.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():  # alternate, so load changes hit all alike
            times[name].append(_time(fn))
    result = {"task": label, "rows": rows, "repeats": repeats, "seconds": {}}
    ours = statistics.median(times["ours"])
    for name, ts in times.items():
        med = statistics.median(ts)
        result["seconds"][name] = {
            "median": med,
            "min": min(ts),
            "max": max(ts),
            "rows_per_s": rows / med,
            "ratio_to_ours": med / ours,
        }
    return result


def run(quick: bool) -> dict:
    """Runs both comparisons; returns a JSON-able dict (also printed as a markdown table)."""
    rows = 5000 if quick else 50000
    encode_rows = 2000 if quick else 20000
    repeats = 3 if quick else 5
    schema = criteo_schema()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "day0.tsv")
        lines = [line for line in synthetic_criteo_lines(rows + 10, seed=1) if "not-a-number" not in line][
            :rows
        ]
        # Complete lines only, so the bare pyarrow.csv reference can read the file too.
        with open(path, "w") as f:
            for line in lines:
                f.write(line + "\t" * (39 - line.count("\t")) + "\n")
        read = _compare(
            "criteo tsv -> arrow",
            rows,
            {
                "ours": lambda: _ours_reader(path, schema),
                "per-row python": lambda: _per_row_python_reader(path, schema),
                "bare pyarrow.csv": lambda: _bare_pyarrow_csv(path, schema),
            },
            repeats,
        )
        table = pa.Table.from_batches(list(read_logs(path, "criteo", schema)))
    batch = table.slice(0, encode_rows).combine_chunks().to_batches()[0]
    encode = _compare(
        "arrow -> tf.train.Example bytes",
        batch.num_rows,
        {
            "ours": lambda: encode_examples(batch, schema),
            "per-row tf.train.Example": lambda: _per_row_examples(pa.Table.from_batches([batch])),
        },
        repeats,
    )
    results = {"benchmark": "io_formats", "quick": quick, "results": [read, encode]}
    _print_table(results)
    return results


def _print_table(results: dict) -> None:
    print("| task | implementation | rows | median s | min-max s | rows/s | time vs ours |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in results["results"]:
        for name, s in r["seconds"].items():
            print(
                f"| {r['task']} | {name} | {r['rows']} | {s['median']:.3f} | {s['min']:.3f}-{s['max']:.3f} "
                f"| {s['rows_per_s']:,.0f} | {s['ratio_to_ours']:.2f}x |"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, finishes in well under a minute")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = run(args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
