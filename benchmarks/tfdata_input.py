"""Shards to ready COO batches (batch 4096): make_dataset against the standard tf.data input path.

    python -m benchmarks.tfdata_input [--quick] [--json out.json]

Two synthetic data sets, each written once as Parquet and as TFRecord
shards (sparse_io writers):
  criteo: label, 13 dense floats, 26 single-id features (10% missing);
  multi:  label, 8 weighted features of ~10 ids a row (Poisson).

Contenders, per data set, each from files to COO batches (row_ids, col_ids,
gains per feature):
  ours parquet   make_dataset over the Parquet shards (pyarrow reader, output="coo");
  ours arrow     make_dataset over Arrow shards of the same rows (memory-mapped, not decoded);
  ours graph     make_dataset over the TFRecord shards (graph-native, output="coo");
  standard       TFRecordDataset -> batch -> tf.io.parse_example (VarLenFeature)
                 -> SparseTensors -> the combine inputs (row ids, ids, weights) per feature;
  pyarrow.parquet  pq.read_table of the same Parquet shards: the decode limit;
  memcpy         numpy copy of the same number of id bytes;
  memcpy batch bytes  numpy copy of as many bytes as the COO batches of one pass
                 hold (row ids, ids, gains, dense columns, label): the physical limit
                 of a reader that only moves the bytes it delivers.
Each data set is written once per format (Parquet zstd, TFRecord, Arrow
uncompressed) and the bytes on disk are reported beside the speeds.
Each tf.data contender is taken two ways: "eager", `next()` in a Python
loop (each element becomes Python objects), and "graph", `next()` inside a
`tf.function` loop, as a compiled training step takes its batches.
A timed repetition is one pass over the data on a pipeline of its own,
built and run for one untimed pass first (start-up, first decoding and
tf.data's autotuning), then dropped: only one pipeline is alive at a time,
so no other contender's background threads run on its clock, and no
pipeline starts its pass from buffers it filled while idle (here a pipeline
left alone for two seconds held up to ~40 finished batches). A batch-size
sweep (criteo set; 512 to 16384 rows, --quick: 1024 and 4096) times the
three tf.data contenders again at each size, eager. Contenders alternate
in rotating order; medians, min-max and ratios are reported, and the peak
RSS of the process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time
import tracemalloc

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks._timing import Timing, markdown_table
from sparse_io import shard_name, write_arrow_shard, write_parquet_shard, write_tfrecord_shard
from sparse_io.manifest import commit_directory
from sparse_io.schema import FeatureSpec, Schema, weights_column

BATCH = 4096
SHARDS = 4
SWEEP_BATCHES = (512, 1024, 4096, 16384)
QUICK_SWEEP_BATCHES = (1024, 4096)


def _lists(lengths: np.ndarray, values: np.ndarray) -> pa.ListArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def criteo_like(rows: int, seed: int = 0) -> tuple[Schema, pa.Table, int]:
    """label, I1..I13, C1..C26 (one id or none): the table and its id count."""
    rng = np.random.default_rng(seed)
    specs = [FeatureSpec("label", "label", "int64")]
    cols = {"label": pa.array(rng.integers(0, 2, rows))}
    for i in range(1, 14):
        specs.append(FeatureSpec(f"I{i}", "dense", "float32"))
        values = rng.random(rows, dtype=np.float32) * 100
        cols[f"I{i}"] = pa.array(values, mask=rng.random(rows) < 0.2)
    ids = 0
    for i in range(1, 27):
        specs.append(FeatureSpec(f"C{i}", "sparse", "int64"))
        lengths = (rng.random(rows) > 0.1).astype(np.int32)
        n = int(lengths.sum())
        cols[f"C{i}"] = _lists(lengths, rng.zipf(1.2, n).astype(np.int64) % (1 << 22))
        ids += n
    return Schema(specs), pa.table(cols), ids


def multi_valued(rows: int, seed: int = 1) -> tuple[Schema, pa.Table, int]:
    """label and M0..M7: weighted id lists of ~10 ids a row."""
    rng = np.random.default_rng(seed)
    specs = [FeatureSpec("label", "label", "int64")]
    cols = {"label": pa.array(rng.integers(0, 2, rows))}
    ids = 0
    for k in range(8):
        name = f"M{k}"
        specs.append(FeatureSpec(name, "sparse", "int64", weighted=True))
        lengths = rng.poisson(10, rows).astype(np.int32)
        n = int(lengths.sum())
        cols[name] = _lists(lengths, rng.zipf(1.2, n).astype(np.int64) % (1 << 22))
        cols[weights_column(name)] = _lists(lengths, rng.integers(1, 6, n).astype(np.float32))
        ids += n
    return Schema(specs), pa.table(cols), ids


def write_shards(directory: str, schema: Schema, table: pa.Table) -> tuple[str, str, str]:
    """The table as Parquet, TFRecord and Arrow shard directories (`SHARDS` each), committed."""
    parquet, tfrecord, arrow = (os.path.join(directory, f) for f in ("parquet", "tfrecord", "arrow"))
    per = -(-table.num_rows // SHARDS)
    for path in (parquet, tfrecord, arrow):
        os.makedirs(path)
        schema.save(path)
    for k in range(SHARDS):
        part = table.slice(k * per, per)
        write_parquet_shard(os.path.join(parquet, shard_name(k, SHARDS, ".parquet")), [part], schema)
        write_tfrecord_shard(os.path.join(tfrecord, shard_name(k, SHARDS, ".tfrecord")), [part], schema)
        write_arrow_shard(os.path.join(arrow, shard_name(k, SHARDS, ".arrow")), [part], schema)
    for path in (parquet, tfrecord, arrow):
        commit_directory(path)  # readers take a directory only with its manifest
    return parquet, tfrecord, arrow


def standard_dataset(tfrecord_dir: str, schema: Schema, batch_size: int = BATCH):
    """What users write today: parse Examples into SparseTensors, then the inputs of a weighted combine."""
    import tensorflow as tf

    files = sorted(tf.io.gfile.glob(os.path.join(tfrecord_dir, "*.tfrecord")))
    spec = {}
    for f in schema:
        if f.kind == "label":
            spec[f.name] = tf.io.FixedLenFeature([], tf.int64)
        elif f.kind == "dense":
            spec[f.name] = tf.io.VarLenFeature(tf.float32)
        else:
            spec[f.name] = tf.io.VarLenFeature(tf.int64)
            if f.weighted:
                spec[weights_column(f.name)] = tf.io.VarLenFeature(tf.float32)

    def combine_inputs(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        out = {}
        for f in schema.sparse:
            ids = parsed[f.name]
            weights = parsed[weights_column(f.name)].values if f.weighted else tf.ones_like(ids.values, tf.float32)
            out[f.name] = (tf.cast(ids.indices[:, 0], tf.int32), ids.values, weights)
        for f in schema.dense:
            out[f.name] = tf.sparse.to_dense(parsed[f.name], default_value=float("nan"))[:, 0]
        return out, parsed["label"]

    ds = tf.data.TFRecordDataset(files).batch(batch_size).map(combine_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.repeat().prefetch(tf.data.AUTOTUNE)


def _alternate(contenders: dict, *, reps: int, batches: int) -> dict:
    """Round-robin timing in rotating order; returns a `Timing` per contender.

    A contender is `("pipeline", make, consumer)`, timed over `batches` batches of a dataset
    that `make()` builds afresh each round and runs for one untimed pass first (see the module
    docstring), or `("call", fn)`, a plain call.
    """
    names = list(contenders)
    seconds = {name: [] for name in names}
    for round_index in range(reps):
        start = round_index % len(names)
        for name in names[start:] + names[:start]:
            kind, *spec = contenders[name]
            if kind == "call":
                (fn,) = spec
                began = time.perf_counter()
                fn()
                seconds[name].append(time.perf_counter() - began)
                continue
            make, consumer = spec
            iterator = iter(make())
            consumer(iterator, batches)
            began = time.perf_counter()
            consumer(iterator, batches)
            seconds[name].append(time.perf_counter() - began)
            del iterator
            gc.collect()
    return {name: Timing(float(np.median(v)), min(v), max(v), len(v)) for name, v in seconds.items()}


def _eager(iterator, batches: int) -> None:
    for _ in range(batches):
        next(iterator)


def _graph_consumer():
    """`next()` in a `tf.function` loop: the elements never become Python objects."""
    import tensorflow as tf

    @tf.function
    def take(iterator, batches):
        for _ in tf.range(batches):
            next(iterator)  # IteratorGetNext is stateful: it runs though its outputs go unused

    return lambda iterator, batches: take(iterator, tf.constant(batches))


def _allocation_per_batch(parquet_dir: str, schema: Schema) -> dict:
    """Python-side bytes allocated to read one COO batch, against the bytes it hands to TensorFlow.

    The arrays are then aliased by DLPack (no tensor copy), so allocated / handed-over near 1.0
    means the ids were copied once, from the Arrow buffer into the batch's arena.
    """
    from transforms.tfdata.columnar.reader import ColumnarSource
    from transforms.tfdata.core.columns import select_columns

    files = sorted(os.path.join(parquet_dir, f) for f in os.listdir(parquet_dir) if f.endswith(".parquet"))
    columns, label = select_columns(schema, None, None)
    coo = {c.name: "sum" for c in columns if c.is_sparse}
    source = ColumnarSource(
        files, columns, label, BATCH, shuffle=False, seed=0, num_shards=1, index=0, drop_remainder=False, coo=coo
    )
    source.read(0)
    source.read(1)
    time.sleep(0.2)  # let the read-ahead thread finish outside the measurement
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    flat = source.read(1)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    handed = sum(a.nbytes for a in flat)
    return {"allocated_bytes": peak, "handed_over_bytes": handed, "allocated_over_handed_over": peak / handed}


def bench_set(name: str, schema: Schema, table: pa.Table, ids: int, reps: int, tmp: str) -> tuple[list, dict]:
    from transforms import make_dataset

    directory = os.path.join(tmp, name)
    os.makedirs(directory)
    parquet, tfrecord, arrow = write_shards(directory, schema, table)
    rows = table.num_rows
    batches = -(-rows // BATCH)  # one pass: shard boundaries give no extra partial batch (rows divide evenly)
    parquet_files = sorted(os.path.join(parquet, f) for f in os.listdir(parquet) if f.endswith(".parquet"))
    pipelines = {
        "ours parquet": lambda: make_dataset(parquet, BATCH, shuffle=False, num_epochs=None, output="coo"),
        "ours arrow": lambda: make_dataset(arrow, BATCH, shuffle=False, num_epochs=None, output="coo"),
        "ours graph (tfrecord)": lambda: make_dataset(tfrecord, BATCH, shuffle=False, num_epochs=None, output="coo"),
        "standard (parse_example)": lambda: standard_dataset(tfrecord, schema),
    }
    consumers = {"eager": _eager, "graph": _graph_consumer()}
    contenders = {
        (contender, consumer): ("pipeline", make, consume)
        for contender, make in pipelines.items()
        for consumer, consume in consumers.items()
    }
    source = np.arange(ids, dtype=np.int64)
    target = np.empty_like(source)
    delivered = _delivered_bytes(make_dataset(arrow, BATCH, shuffle=False, num_epochs=1, output="coo"))
    bytes_source = np.ones(delivered, dtype=np.uint8)
    bytes_target = np.empty_like(bytes_source)
    contenders[("pyarrow.parquet read", "")] = ("call", lambda: pq.read_table(parquet_files))
    contenders[("memcpy ids", "")] = ("call", lambda: np.copyto(target, source))
    contenders[("memcpy batch bytes", "")] = ("call", lambda: np.copyto(bytes_target, bytes_source))
    timings = _alternate(contenders, reps=reps, batches=batches)
    results = []
    for (contender, consumer), t in timings.items():
        results.append(
            {
                "set": name,
                "contender": contender,
                "consumer": consumer,
                "median_s": t.median_s,
                "min_s": t.min_s,
                "max_s": t.max_s,
                "rows_per_s": rows / t.median_s,
                "ids_per_s": ids / t.median_s,
            }
        )
    by = {(r["contender"], r["consumer"]): r for r in results}
    ratios = {}
    for consumer in consumers:
        standard = by[("standard (parse_example)", consumer)]["rows_per_s"]
        ratios[consumer] = {
            "parquet_vs_standard": by[("ours parquet", consumer)]["rows_per_s"] / standard,
            "arrow_vs_standard": by[("ours arrow", consumer)]["rows_per_s"] / standard,
            "arrow_vs_parquet": by[("ours arrow", consumer)]["rows_per_s"]
            / by[("ours parquet", consumer)]["rows_per_s"],
            "arrow_vs_batch_bytes_copy": by[("ours arrow", consumer)]["rows_per_s"]
            / by[("memcpy batch bytes", "")]["rows_per_s"],
            "graph_vs_standard": by[("ours graph (tfrecord)", consumer)]["rows_per_s"] / standard,
            "parquet_vs_pyarrow_read": by[("ours parquet", consumer)]["rows_per_s"]
            / by[("pyarrow.parquet read", "")]["rows_per_s"],
            "parquet_vs_memcpy": by[("ours parquet", consumer)]["ids_per_s"] / by[("memcpy ids", "")]["ids_per_s"],
        }
    ratios["allocation"] = _allocation_per_batch(parquet, schema)
    ratios["delivered_mib"] = delivered / 2**20
    ratios["disk_mib"] = {
        fmt: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("part-")) / 2**20
        for fmt, d in (("parquet", parquet), ("tfrecord", tfrecord), ("arrow", arrow))
    }
    return results, ratios


def _delivered_bytes(dataset) -> int:
    """The bytes of every tensor of every element of one pass (what a reader must at least move)."""
    import tensorflow as tf

    return sum(int(t.numpy().nbytes) for element in dataset for t in tf.nest.flatten(element))


def batch_sweep(directory: str, schema: Schema, rows: int, batch_sizes, reps: int) -> list[dict]:
    """Rows per second of the four tf.data contenders at each batch size, over the shards in `directory`."""
    from transforms import make_dataset

    parquet, tfrecord, arrow = (os.path.join(directory, f) for f in ("parquet", "tfrecord", "arrow"))
    out = []
    for batch_size in batch_sizes:
        contenders = {
            "ours parquet": (
                "pipeline",
                lambda b=batch_size: make_dataset(parquet, b, shuffle=False, num_epochs=None, output="coo"),
                _eager,
            ),
            "ours arrow": (
                "pipeline",
                lambda b=batch_size: make_dataset(arrow, b, shuffle=False, num_epochs=None, output="coo"),
                _eager,
            ),
            "ours graph (tfrecord)": (
                "pipeline",
                lambda b=batch_size: make_dataset(tfrecord, b, shuffle=False, num_epochs=None, output="coo"),
                _eager,
            ),
            "standard (parse_example)": (
                "pipeline",
                lambda b=batch_size: standard_dataset(tfrecord, schema, b),
                _eager,
            ),
        }
        batches = -(-rows // batch_size)
        timings = _alternate(contenders, reps=reps, batches=batches)
        for contender, t in timings.items():
            out.append(
                {
                    "batch_size": batch_size,
                    "contender": contender,
                    "rows": batches * batch_size,
                    "median_s": t.median_s,
                    "min_s": t.min_s,
                    "max_s": t.max_s,
                    "rows_per_s": batches * batch_size / t.median_s,
                    "rows_per_s_min": batches * batch_size / t.max_s,
                    "rows_per_s_max": batches * batch_size / t.min_s,
                }
            )
    return out


def run(quick: bool) -> dict:
    """Both data sets; returns a JSON-able dict and prints a markdown table."""
    rows = {"criteo": 8_192 if quick else 409_600, "multi": 4_096 if quick else 204_800}
    reps = 1 if quick else 4
    all_results, ratios = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("criteo", criteo_like), ("multi", multi_valued)):
            schema, table, ids = make(rows[name])
            results, set_ratios = bench_set(name, schema, table, ids, reps, tmp)
            all_results += results
            ratios[name] = set_ratios
            if name == "criteo":
                sweep = batch_sweep(
                    os.path.join(tmp, name),
                    schema,
                    rows[name],
                    QUICK_SWEEP_BATCHES if quick else SWEEP_BATCHES,
                    reps=1 if quick else 3,
                )
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    columns = ["set", "contender", "consumer", "median_s", "min_s", "max_s", "rows_per_s", "ids_per_s"]
    print(markdown_table(all_results, columns))
    print()
    for name, r in ratios.items():
        for consumer in ("eager", "graph"):
            c = r[consumer]
            print(
                f"{name}, {consumer}: ours arrow {c['arrow_vs_standard']:.2f}x standard "
                f"({c['arrow_vs_parquet']:.2f}x ours parquet, {c['arrow_vs_batch_bytes_copy']:.3f}x a copy of the "
                f"batch bytes), ours parquet {c['parquet_vs_standard']:.2f}x standard, "
                f"ours graph {c['graph_vs_standard']:.2f}x standard, "
                f"ours parquet {c['parquet_vs_pyarrow_read']:.2f}x pyarrow.parquet read, "
                f"{c['parquet_vs_memcpy']:.3f}x memcpy"
            )
        disk = ", ".join(f"{fmt} {mib:.1f} MiB" for fmt, mib in r["disk_mib"].items())
        print(f"{name}: shards on disk: {disk}; one pass delivers {r['delivered_mib']:.1f} MiB")
        print(
            f"{name}: Python-side allocation per batch {r['allocation']['allocated_bytes'] / 2**20:.1f} MiB "
            f"= {r['allocation']['allocated_over_handed_over']:.2f}x what it hands to TensorFlow"
        )
    print(f"peak RSS {peak_rss_mib:.0f} MiB")
    print("\nInput throughput against batch size (criteo set):\n")
    print(markdown_table(sweep, ["batch_size", "contender", "rows_per_s", "rows_per_s_min", "rows_per_s_max"]))
    return {
        "benchmark": "tfdata_input",
        "quick": quick,
        "batch_size": BATCH,
        "rows": rows,
        "results": all_results,
        "ratios": ratios,
        "batch_sweep": sweep,
        "peak_rss_mib": peak_rss_mib,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, well under a minute")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = run(args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
