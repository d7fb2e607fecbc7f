"""convert_to_coo: our paths against a plain composition of stock TF ops, on a Criteo-like batch.

    python -m benchmarks.convert_to_coo [--quick] [--json PATH]

A batch of 4096 rows and 26 categorical features, converted feature by
feature inside one tf.function, in two variants: single-id (Criteo: one id
per row, about 4% of rows missing) and multi-valued (Poisson(10) ids per
row, 10% of ids repeating the previous one, so runs merge). Four of our
paths (general = per-id weights with "mean"; single weight with "mean";
"sum" with per-id weights; "sum" with a single weight) and the same four
through the peer run round-robin in one process.

The peer is what one writes with stock ops: RaggedTensor.value_rowids, the
weights broadcast to one per id, a boolean mask of run starts, segment_sum
for merged gains, and for mean/sqrtn an unsorted_segment_sum of the weights
per row, gathered back. It validates nothing; ours runs with its default
validation on. Both produce the same output (checked before timing).

Bytes per id are measured, not estimated: the graph is run once in a
TF1-style session with FULL_TRACE, and the allocator bytes each op reports
(RunMetadata step stats) are summed; inputs fed to the graph are not
counted. "+weights" adds the 4 bytes per id of the per-id weight array that
the per-id paths need as input and the single-weight paths never create.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the multi-valued variant only, 1 feature and 3 repetitions (a smoke run) instead of 26 and 21",
    )
    parser.add_argument("--json", help="also write the result dict to this file")
    return parser


if __name__ == "__main__":
    _parser().parse_args()  # --help and a bad flag answer here, before TensorFlow is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import ops
from benchmarks._timing import Timing, alternate, markdown_table, noisy, paired, ratio

BATCH = 4096
FEATURES = 26
VOCAB = 1_000_000
# name: (per-id weights?, combiner)
PATHS = {
    "general: per-id w, mean": (True, "mean"),
    "single w, mean": (False, "mean"),
    "sum, per-id w": (True, "sum"),
    "sum, single w": (False, "sum"),
}
GENERAL = "general: per-id w, mean"


def criteo_like(
    rng: np.random.Generator, *, multi_valued: bool, features: int = FEATURES
) -> list[tuple[np.ndarray, ...]]:
    """`features` features of (row_splits int64, ids int64, weights float32) for a batch of 4096 rows."""
    out = []
    for _ in range(features):
        if multi_valued:
            lengths = rng.poisson(10, BATCH)
        else:
            lengths = (rng.random(BATCH) > 0.04).astype(np.int64)
        n = int(lengths.sum())
        ids = (rng.zipf(1.3, n) - 1) % VOCAB  # a few very frequent ids, a long tail
        if multi_valued:
            repeat = rng.random(n) < 0.1
            repeat[0] = False
            ids = ids[np.maximum.accumulate(np.where(repeat, 0, np.arange(n)))]
        splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        weights = rng.uniform(0.5, 2.0, n).astype(np.float32)
        out.append((splits, ids.astype(np.int64), weights))
    return out


def peer_convert(splits, values, weights, *, sample_count, combiner):
    """The same contract from stock ops, written the plain way."""
    rows = tf.cast(tf.RaggedTensor.from_row_splits(values, splits, validate=False).value_rowids(), tf.int32)
    weights = tf.broadcast_to(weights, tf.shape(values))
    is_start = tf.concat(
        [[True], tf.logical_or(tf.not_equal(rows[1:], rows[:-1]), tf.not_equal(values[1:], values[:-1]))],
        axis=0,
    )
    run_of = tf.cumsum(tf.cast(is_start, tf.int32)) - 1
    out_rows = tf.boolean_mask(rows, is_start)
    out_values = tf.boolean_mask(values, is_start)
    gains = tf.math.segment_sum(weights, run_of)
    if combiner != "sum":
        per_id = weights if combiner == "mean" else weights * weights
        total = tf.math.unsorted_segment_sum(per_id, rows, sample_count)
        scale = tf.math.divide_no_nan(1.0, total if combiner == "mean" else tf.sqrt(total))
        gains = gains * tf.gather(scale, out_rows)
    return out_rows, out_values, gains


CONVERTERS = {"ours": ops.convert_to_coo, "peer": peer_convert}


def _convert_all(convert, features, per_id: bool, combiner: str):
    return [
        convert(
            splits, values, weights if per_id else tf.constant(1.0), sample_count=BATCH, combiner=combiner
        )[:3]  # ours is an ops.Coo that also carries the (static) sample count
        for splits, values, weights in features
    ]


def _timed_function(convert, per_id: bool, combiner: str):
    fn = tf.function(lambda features: _convert_all(convert, features, per_id, combiner), autograph=False)

    def call(features):
        out = fn(features)
        if hasattr(tf.test.experimental, "sync_devices") and tf.config.list_logical_devices("GPU"):
            tf.test.experimental.sync_devices()
        return out

    return call


def allocated_bytes(convert, features, per_id: bool, combiner: str) -> int:
    """Allocator bytes of one run of the whole batch conversion (inputs excluded)."""
    graph = tf.Graph()
    feeds, placeholders = {}, []
    with graph.as_default():
        for splits, values, weights in features:
            holders = (
                tf.compat.v1.placeholder(tf.int64, [None]),
                tf.compat.v1.placeholder(tf.int64, [None]),
                tf.compat.v1.placeholder(tf.float32, [None]),
            )
            feeds.update(zip(holders, (splits, values, weights)))
            placeholders.append(holders)
        outputs = _convert_all(convert, placeholders, per_id, combiner)
    with tf.compat.v1.Session(graph=graph) as session:
        metadata = tf.compat.v1.RunMetadata()
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        session.run(outputs, feeds, options=options, run_metadata=metadata)
    return sum(
        memory.total_bytes
        for device in metadata.step_stats.dev_stats
        for node in device.node_stats
        for memory in node.memory
    )


def _check_same(ours, peer) -> None:
    for (r1, c1, g1), (r2, c2, g2) in zip(ours, peer):
        np.testing.assert_array_equal(r1.numpy(), r2.numpy())
        np.testing.assert_array_equal(c1.numpy(), c2.numpy())
        np.testing.assert_allclose(g1.numpy(), g2.numpy(), rtol=1e-5, atol=1e-6)


def _summary(values: list[float]) -> Timing:
    return Timing(statistics.median(values), min(values), max(values), len(values))


def run_variant(features, *, reps: int, warmup: int, alloc_features: int) -> dict:
    inputs = [tuple(tf.constant(a) for a in feature) for feature in features]
    ids = sum(int(f[1].size) for f in features)
    # Bytes per id do not depend on how many features share the graph; a few suffice.
    sample = features[:alloc_features]
    sample_ids = sum(int(f[1].size) for f in sample)
    contenders, calls, wall = {}, {}, {}
    for path, (per_id, combiner) in PATHS.items():
        for impl, convert in CONVERTERS.items():
            name = f"{impl} | {path}"
            call = _timed_function(convert, per_id, combiner)
            calls[(path, impl)] = call
            wall[name] = []

            def timed(call=call, samples=wall[name]):
                began = time.perf_counter()
                call(inputs)
                samples.append(time.perf_counter() - began)

            contenders[name] = timed
        _check_same(calls[(path, "ours")](inputs), calls[(path, "peer")](inputs))
    # CPU seconds of the whole process (all TF threads) measure the work done; the wall clock
    # of the same calls is kept too, but on a shared machine it mostly measures other load.
    cpu = alternate(contenders, reps=reps, warmup=warmup, clock=time.process_time)
    wall = {name: _summary(samples[warmup:]) for name, samples in wall.items()}

    rows = []
    for path, (per_id, combiner) in PATHS.items():
        row = {"path": path}
        for impl, convert in CONVERTERS.items():
            name = f"{impl} | {path}"
            in_op = allocated_bytes(convert, sample, per_id, combiner) / sample_ids
            row[impl] = {"cpu": cpu[name].as_dict(), "wall": wall[name].as_dict()}
            row[f"{impl} Mids/cpu-s"] = ids / cpu[name].median_s / 1e6
            row[f"{impl} Mids/s wall"] = ids / wall[name].median_s / 1e6
            spread = f"{cpu[name].min_s * 1e3:.1f}-{cpu[name].max_s * 1e3:.1f}"
            row[f"{impl} cpu ms"] = f"{cpu[name].median_s * 1e3:.1f} ({spread})"
            row[f"{impl} B/id"] = in_op
            row[f"{impl} B/id +weights"] = in_op + (4.0 if per_id else 0.0)
        ours, peer = f"ours | {path}", f"peer | {path}"
        row["cpu ours/peer"] = ratio(cpu[ours], cpu[peer])
        row["noisy"] = noisy(cpu[ours], cpu[peer])
        row["wall ours/peer"] = ratio(wall[ours], wall[peer])
        rows.append(row)

    general = next(r for r in rows if r["path"] == GENERAL)
    fast_paths = {}
    for row in rows:
        if row["path"] == GENERAL:
            continue
        ours, base = f"ours | {row['path']}", f"ours | {GENERAL}"
        rounds = paired(cpu[ours], cpu[base])
        fast_paths[row["path"]] = {
            "cpu vs general": ratio(cpu[ours], cpu[base]),
            "noisy": noisy(cpu[ours], cpu[base]),
            "paired cpu vs general": rounds.median_ratio,
            "cheaper in rounds": f"{rounds.wins}/{rounds.rounds}",
            "sign test p": rounds.p_value,
            "wall vs general": ratio(wall[ours], wall[base]),
            "bytes vs general": row["ours B/id"] / general["ours B/id"],
            "bytes+weights vs general": row["ours B/id +weights"] / general["ours B/id +weights"],
        }
    return {"ids": ids, "rows": rows, "fast_paths_vs_general": fast_paths}


def run(quick: bool = False) -> dict:
    """Both variants; returns a JSON-able dict (timings in ms, rates in millions of ids per second)."""
    rng = np.random.default_rng(2026)
    reps, warmup, features, alloc_features = (3, 1, 1, 1) if quick else (41, 2, FEATURES, 3)
    result = {
        "benchmark": "convert_to_coo",
        "batch": BATCH,
        "features": features,
        "bytes_measured_on_features": alloc_features,
        "quick": quick,
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "variants": {},
    }
    variants = (("single-id", False), ("multi-valued ~10", True))
    for name, multi in variants[1:] if quick else variants:
        batch = criteo_like(rng, multi_valued=multi, features=features)
        result["variants"][name] = run_variant(batch, reps=reps, warmup=warmup, alloc_features=alloc_features)
    return result


def _print(result: dict) -> None:
    columns = [
        "path",
        "ours Mids/cpu-s",
        "peer Mids/cpu-s",
        "cpu ours/peer",
        "noisy",
        "ours cpu ms",
        "peer cpu ms",
        "wall ours/peer",
        "ours B/id",
        "peer B/id",
        "ours B/id +weights",
    ]
    fast_columns = ["path", "cpu vs general", "noisy", "paired cpu vs general", "cheaper in rounds", "sign test p"]
    fast_columns += ["wall vs general", "bytes vs general"]
    fast_columns.append("bytes+weights vs general")
    for name, variant in result["variants"].items():
        print(
            f"\n### {name}: batch {result['batch']} x {result['features']} features, {variant['ids']} ids "
            f"(bytes measured on {result['bytes_measured_on_features']} of them)\n"
        )
        print(markdown_table(variant["rows"], columns))
        print(
            "\nOur fast paths against our general path (ratios of medians, and the median of per-round ratios "
            "with a sign test; below 1 is cheaper):\n"
        )
        fast = [{"path": path, **figures} for path, figures in variant["fast_paths_vs_general"].items()]
        print(markdown_table(fast, fast_columns))


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    # Every contender is a fresh tf.function by design; TensorFlow's retracing warning is noise here.
    tf.get_logger().setLevel("ERROR")
    result = run(quick=args.quick)
    _print(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
