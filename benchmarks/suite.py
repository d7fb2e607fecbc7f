"""Runs the benchmarks and brings their results to one shape: rows of ours against a peer.

Each benchmark module returns a dict of its own shape from `run(quick)`;
a normaliser per benchmark turns it into comparison rows:

    {"benchmark", "what", "peer_name", "unit", "higher_is_better",
     "ours", "ours_min", "ours_max", "peer", "peer_min", "peer_max",
     "ratio", "limit", "noisy"}

`ours` and `peer` are medians in `unit`, with their min-max over the
repetitions. `ratio` is how many times better ours is (ours / peer for a
throughput, peer / ours for a time or a memory size), so above 1 always
means ours wins. `noisy` is set when either min-max spread is wider than the
gap between the medians: the ratio is then not settled. Where a benchmark
reports no spread for a figure, its min and max are None and its own noisy
verdict is kept.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from collections.abc import Callable

__all__ = ["BENCHMARKS", "comparison_row", "normalise", "run_benchmark", "data_sizes"]

# Run order: TensorFlow device set-up happens in the first one, before any module hides GPUs.
BENCHMARKS = (
    "convert_to_coo", "embedding_bag_and_block_sparse", "embedding_bag_targets", "demo_training_throughput",
    "beam_ingest", "io_formats", "tfdata_input", "arrow_op_input", "reader_memory",
    "ingest_memory", "vocabulary", "reliability", "validation_cost", "feature_transforms", "ingest_scaling",
)


def run_benchmark(name: str, quick: bool, log: Callable[[str], None] = print) -> dict:
    """Imports `benchmarks.<name>` and runs it.

    Returns {"name", "seconds", "result"}, or {"name", "seconds", "error"} (a traceback) when it raised.
    """
    log(f"[benchmarks] {name}: started ({'quick' if quick else 'full'})")
    began = time.perf_counter()
    try:
        module = importlib.import_module(f"benchmarks.{name}")
        if "tensorflow" in sys.modules:
            # Benchmarks build fresh tf.functions per contender on purpose; the retracing warning is noise.
            sys.modules["tensorflow"].get_logger().setLevel("ERROR")
        result = module.run(quick)
    except Exception as error:  # one failing benchmark must not hide the others' results
        seconds = time.perf_counter() - began
        log(f"[benchmarks] {name}: FAILED after {seconds:.1f} s: {type(error).__name__}: {error}")
        return {"name": name, "seconds": seconds, "error": traceback.format_exc(limit=8)}
    seconds = time.perf_counter() - began
    log(f"[benchmarks] {name}: done in {seconds:.1f} s")
    return {"name": name, "seconds": seconds, "result": result}


def comparison_row(
    benchmark: str,
    what: str,
    peer_name: str,
    unit: str,
    higher_is_better: bool,
    ours: tuple[float, float | None, float | None],
    peer: tuple[float, float | None, float | None],
    limit: str = "",
    noisy: bool | None = None,
) -> dict:
    """One normalised row; `ours`/`peer` are (median, min, max) in `unit`."""
    ratio = ours[0] / peer[0] if higher_is_better else peer[0] / ours[0]
    if None not in ours and None not in peer:
        noisy = max(ours[2] - ours[1], peer[2] - peer[1]) > abs(ours[0] - peer[0])
    return {
        "benchmark": benchmark,
        "what": what,
        "peer_name": peer_name,
        "unit": unit,
        "higher_is_better": higher_is_better,
        "ours": ours[0],
        "ours_min": ours[1],
        "ours_max": ours[2],
        "peer": peer[0],
        "peer_min": peer[1],
        "peer_max": peer[2],
        "ratio": ratio,
        "limit": limit,
        "noisy": bool(noisy),
    }


def _rate(amount: float, median_s: float, min_s: float, max_s: float, scale: float = 1.0) -> tuple:
    """Times in seconds to (median, min, max) of amount/second; the slowest time gives the lowest rate."""
    return (amount / median_s / scale, amount / max_s / scale, amount / min_s / scale)


# Normalisers, one per benchmark -----------------------------------------------------------------


def _convert_to_coo(r: dict) -> list[dict]:
    rows = []
    for variant, v in r["variants"].items():
        for row in v["rows"]:
            ours, peer = row["ours"]["cpu"], row["peer"]["cpu"]
            rows.append(
                comparison_row(
                    "convert_to_coo",
                    f"convert_to_coo {variant}: {row['path']}",
                    "stock TF ops composition",
                    "M ids/CPU-s",
                    True,
                    _rate(v["ids"], ours["median_ms"] / 1e3, ours["min_ms"] / 1e3, ours["max_ms"] / 1e3, 1e6),
                    _rate(v["ids"], peer["median_ms"] / 1e3, peer["min_ms"] / 1e3, peer["max_ms"] / 1e3, 1e6),
                    f"allocates {row['ours B/id']:.0f} B/id (peer {row['peer B/id']:.0f})",
                )
            )
    return rows


def _embedding_bag_and_block_sparse(r: dict) -> list[dict]:
    rows = []
    for row in r["embedding_bag"]["rows"]:
        ids = row["ids_per_call"]
        weights = "weighted" if row["weights"] else "unweighted"
        copy_rate = ids / (row["copy_limit_ms"] / 1e3) / 1e6
        rows.append(
            comparison_row(
                "embedding_bag_and_block_sparse",
                f"embedding_bag {row['ids']} ids, {weights}, {row['pass']}",
                "tf.nn.embedding_lookup_sparse",
                "M ids/s",
                True,
                _rate(ids, row["ours_ms"] / 1e3, *(t / 1e3 for t in row["ours_spread_ms"]), 1e6),
                _rate(ids, row["peer_ms"] / 1e3, *(t / 1e3 for t in row["peer_spread_ms"]), 1e6),
                f"bandwidth limit {copy_rate:.0f} M ids/s (numpy copy of {row['mbytes']:.1f} MB)",
            )
        )
        if "native_ms" in row:
            rows.append(
                comparison_row(
                    "embedding_bag_and_block_sparse",
                    f"embedding_bag native {row['ids']} ids, {weights}, {row['pass']}",
                    "tf.nn.embedding_lookup_sparse",
                    "M ids/s",
                    True,
                    _rate(ids, row["native_ms"] / 1e3, *(t / 1e3 for t in row["native_spread_ms"]), 1e6),
                    _rate(ids, row["peer_ms"] / 1e3, *(t / 1e3 for t in row["peer_spread_ms"]), 1e6),
                    f"{row['native_over_copy']:.1f}x the bandwidth limit ({copy_rate:.0f} M ids/s); "
                    f"{1 / row['native_vs_ours']:.2f}x the composition",
                )
            )
    for row in r["block_sparse"]["rows"]:
        what = f"block-sparse matmul {row['pass']}, density {row['density']:.2f}"
        ours = (row["ours_ms"], *row["ours_spread_ms"])
        limit = f"bandwidth limit {row['copy_limit_ms']:.2f} ms; {row['gflops']:.2f} GFLOP"
        if "gemm_floor_ms" in row:
            limit += f"; its batched GEMMs alone {row['gemm_floor_ms']:.1f} ms"
        dense = (row["dense_ms"], *row["dense_spread_ms"])
        rows.append(
            comparison_row(
                "embedding_bag_and_block_sparse", what, "dense tf.linalg.matmul", "ms", False, ours, dense, limit
            )
        )
        if "native_ms" in row:
            native_what = f"block-sparse matmul native {row['pass']}, density {row['density']:.2f}"
            native = (row["native_ms"], *row["native_spread_ms"])
            native_limit = (
                f"{row['native_gflops_per_s']:.0f} GFLOP/s; "
                f"{row['native_ms'] / row['ours_ms']:.2f}x the composition's time"
            )
            rows.append(
                comparison_row(
                    "embedding_bag_and_block_sparse", native_what, "dense tf.linalg.matmul", "ms", False, native, dense,
                    native_limit,
                )
            )
        if "scipy_bsr_ms" in row:
            scipy = (row["scipy_bsr_ms"], *row["scipy_bsr_spread_ms"])
            rows.append(
                comparison_row(
                    "embedding_bag_and_block_sparse", what, "scipy.sparse.bsr_matrix", "ms", False, ours, scipy, limit
                )
            )
    floor = r.get("torch", {}).get("unique_gather")
    for row in r.get("torch", {}).get("rows", []):
        ours = (row["ours_ms"], *row.get("ours_spread_ms", (None, None)))
        torch = (row["torch_ms"], *row.get("torch_spread_ms", (None, None)))
        limit = ""
        if floor and row["pass"] == "fwd":
            limit = (
                f"tf.unique + tf.gather of the distinct rows alone {floor['unique_gather_ms']:.2f} ms "
                f"({floor['unique_gather_over_torch_fwd']:.2f}x torch)"
            )
        rows.append(
            comparison_row(
                "embedding_bag_and_block_sparse",
                f"embedding_bag uniform ids, weighted, {row['pass']}",
                "torch embedding_bag",
                "ms",
                False,
                ours,
                torch,
                limit,
                noisy=row.get("noisy"),
            )
        )
        if "native_ms" in row:
            rows.append(
                comparison_row(
                    "embedding_bag_and_block_sparse",
                    f"embedding_bag native uniform ids, weighted, {row['pass']}",
                    "torch embedding_bag",
                    "ms",
                    False,
                    (row["native_ms"], *row["native_spread_ms"]),
                    torch,
                    f"{row['native_ms'] / row['ours_ms']:.2f}x the composition's time",
                    noisy=row.get("native_noisy"),
                )
            )
    return rows


def _start_up_taken_out(r: dict) -> str:
    m = r.get("marginal")
    if not m:
        return ""
    return f"; start-up taken out {m['wall_ours_over_per_row']:.1f}x (CPU {m['cpu_ours_over_per_row']:.1f}x)"


def _beam_ingest(r: dict) -> list[dict]:
    def triple(name: str) -> tuple:
        return (r[name]["rows_per_s"], r[name]["rows_per_s_min"], r[name]["rows_per_s_max"])

    cpu = r["cpu_ratios"]
    return [
        comparison_row(
            "beam_ingest",
            "Beam ingest TSV -> hashed Parquet shards",
            "per-row Beam pipeline",
            "rows/s",
            True,
            triple("ours"),
            triple("per_row"),
            f"target >= {r['targets']['ours_over_per_row']:.0f}x; CPU-time ratio {cpu['ours_over_per_row']:.1f}x"
            + _start_up_taken_out(r),
        ),
        comparison_row(
            "beam_ingest",
            "Beam ingest TSV -> hashed Parquet shards",
            "pyarrow.csv.read_csv (parse limit)",
            "rows/s",
            True,
            triple("ours"),
            triple("parse"),
            f"target >= {r['targets']['ours_over_parse']:.2f}x; CPU-time ratio {cpu['ours_over_parse']:.2f}x",
        ),
    ]


def _io_formats(r: dict) -> list[dict]:
    rows = []
    for task in r["results"]:
        seconds = task["seconds"]

        def rate(name, task=task, seconds=seconds):
            s = seconds[name]
            return _rate(task["rows"], s["median"], s["min"], s["max"])

        peers = [name for name in seconds if name != "ours"]
        ceiling = next((n for n in peers if n.startswith("bare")), None)
        for peer in peers:
            limit = ""
            if peer == ceiling:
                limit = "parse ceiling (no validation)"
            elif ceiling:
                limit = f"ceiling {seconds[ceiling]['rows_per_s']:,.0f} rows/s ({ceiling})"
            row = comparison_row("io_formats", task["task"], peer, "rows/s", True, rate("ours"), rate(peer), limit)
            rows.append(row)
    return rows


def _tfdata_input(r: dict) -> list[dict]:
    rows = []
    for data_set, set_rows in r["rows"].items():
        by = {(x["contender"], x.get("consumer", "")): x for x in r["results"] if x["set"] == data_set}

        def rate(name, consumer, by=by, set_rows=set_rows):
            x = by[(name, consumer)]
            return _rate(set_rows, x["median_s"], x["min_s"], x["max_s"])

        limit = (
            f"pyarrow.parquet read {by[('pyarrow.parquet read', '')]['rows_per_s']:,.0f} rows/s; "
            f"memcpy of the ids {by[('memcpy ids', '')]['rows_per_s']:,.0f} rows/s"
        )
        if ("memcpy batch bytes", "") in by:
            limit += f"; memcpy of the batch bytes {by[('memcpy batch bytes', '')]['rows_per_s']:,.0f} rows/s"
        disk = r.get("ratios", {}).get(data_set, {}).get("disk_mib")
        if disk:
            limit += "; on disk " + ", ".join(f"{fmt} {mib:.0f} MiB" for fmt, mib in disk.items())
        contenders = [c for c in ("ours parquet", "ours arrow", "ours graph (tfrecord)") if (c, "eager") in by]
        for consumer in ("eager", "graph"):
            for ours in contenders:
                rows.append(
                    comparison_row(
                        "tfdata_input",
                        f"{data_set} shards -> COO batches of {r['batch_size']}, {ours}, taken {consumer}",
                        "TFRecord + tf.io.parse_example",
                        "rows/s",
                        True,
                        rate(ours, consumer),
                        rate("standard (parse_example)", consumer),
                        limit,
                    )
                )
    return rows


def _arrow_op_input(r: dict) -> list[dict]:
    rows = []
    for data_set, set_rows in r["rows"].items():
        by = {(x["measure"], x["contender"]): x for x in r["results"] if x["set"] == data_set}

        def timing(measure, contender, by=by):
            x = by[(measure, contender)]
            return x["median_s"], x["min_s"], x["max_s"]

        steady = "steady pass"
        limit = "; ".join(
            f"{label} {set_rows / by[(steady, name)]['median_s']:,.0f} rows/s"
            for label, name in (("the op's own dataset", "arrow op raw"), ("memcpy of the batch bytes",
                                                                            "memcpy batch bytes"))
        )
        what = f"{data_set} Arrow shards -> COO batches of {r['batch_size']}, taken graph"
        for peer, label in (("parse_example", "TFRecord + tf.io.parse_example"),
                            ("arrow python", "the Python reader (py_function)")):
            rows.append(comparison_row("arrow_op_input", f"{what}, native op, steady pass", label, "rows/s", True,
                                       _rate(set_rows, *timing(steady, "arrow op")),
                                       _rate(set_rows, *timing(steady, peer)), limit))
        epochs = next(m for m, _ in by if m.endswith("epochs, one iterator"))
        amount = set_rows * int(epochs.split()[0])
        python = amount / by[(epochs, "arrow python")]["median_s"]
        rows.append(comparison_row("arrow_op_input", f"{what}, native op, {epochs} (start-up included)",
                                   "TFRecord + tf.io.parse_example", "rows/s", True,
                                   _rate(amount, *timing(epochs, "arrow op")),
                                   _rate(amount, *timing(epochs, "parse_example")),
                                   f"the Python reader {python:,.0f} rows/s"))
        startup = "start-up (first batch)"
        rows.append(comparison_row("arrow_op_input", f"{what}, native op, make_dataset to first batch",
                                   "TFRecord + tf.io.parse_example", "s", False, timing(startup, "arrow op"),
                                   timing(startup, "parse_example"),
                                   f"the Python reader {by[(startup, 'arrow python')]['median_s']:.3f} s"))
        fresh = "new iterator (first batch)"
        if (fresh, "arrow op") in by:
            rows.append(comparison_row("arrow_op_input", f"{what}, native op, a new iterator's first batch (dataset "
                                       "made and read before)", "TFRecord + tf.io.parse_example", "s", False,
                                       timing(fresh, "arrow op"), timing(fresh, "parse_example"),
                                       f"the Python reader {by[(fresh, 'arrow python')]['median_s']:.4f} s"))
    return rows


def _memory_rows(name: str, r: dict, ours: str, peer: str, what: str, peer_label: str) -> list[dict]:
    """One row per log size: peak RSS of contender `ours` against `peer` (lower is better)."""
    rows = []
    for size in (str(s) for s in r["sizes"]):
        a, b = r["runs"][ours][size], r["runs"][peer][size]
        growth = ""
        if size == str(r["sizes"][-1]):
            grew = {c: f"{r[f'{c}_growth_mib']:+.0f} MiB" for c in (ours, peer)}
            growth = f"; 10x rows grew {ours} {grew[ours]}, {peer} {grew[peer]}"
        rows.append(
            comparison_row(
                name,
                what.format(rows=int(size)),
                peer_label,
                "MiB",
                False,
                (a["peak_mib"]["median"], a["peak_mib"]["min"], a["peak_mib"]["max"]),
                (b["peak_mib"]["median"], b["peak_mib"]["min"], b["peak_mib"]["max"]),
                f"log file {a['file_mib']:.0f} MiB{_shards_note(a)}{growth}",
            )
        )
    return rows


def _shards_note(run: dict) -> str:
    if "shards" not in run:
        return ""
    return f", {run['shards']} shard{'s' if run['shards'] != 1 else ''} ({run['shards_at_once']} encoded at once)"


def _reader_memory(r: dict) -> list[dict]:
    return _memory_rows("reader_memory", r, "ours", "peer", "peak RSS reading {rows:,} Criteo rows",
                        "pyarrow.csv.read_csv (whole table)")


def _ingest_memory(r: dict) -> list[dict]:
    rows = _memory_rows("ingest_memory", r, "ingest", "reader",
                        "peak RSS of the whole ingest (local runner), {rows:,} Criteo rows",
                        "sparse_io.read_logs alone (the reading part)")
    if "dataset" in r["runs"]:
        rows += _memory_rows("ingest_memory", r, "dataset", "parquet_table",
                             "peak RSS of make_dataset over the shards of {rows:,} Criteo rows",
                             "pyarrow.parquet.read_table (whole data set)")
    if "dataset_arrow" in r["runs"]:
        rows += _anonymous_rows(r)
    return rows


def _anonymous_rows(r: dict) -> list[dict]:
    """Peak anonymous memory of one shuffled epoch over Arrow shards against the same over Parquet shards."""
    rows = []
    for size in (str(s) for s in r["sizes"]):
        a, b = r["runs"]["dataset_arrow"][size], r["runs"]["dataset"][size]
        note = f"file-backed peak: arrow {a['peak_file_mib']['median']:.0f} MiB, parquet " \
               f"{b['peak_file_mib']['median']:.0f} MiB"
        if size == str(r["sizes"][-1]):
            note += (f"; 10x rows grew anonymous: arrow {r['dataset_arrow_anon_growth_mib']:+.0f} MiB, parquet "
                     f"{r['dataset_anon_growth_mib']:+.0f} MiB (target within +64 MiB)")
        rows.append(comparison_row(
            "ingest_memory", f"peak anonymous RSS, one shuffled epoch over Arrow shards, {int(size):,} Criteo rows",
            "make_dataset over the Parquet shards (anonymous)", "MiB", False,
            tuple(a["peak_anon_mib"][k] for k in ("median", "min", "max")),
            tuple(b["peak_anon_mib"][k] for k in ("median", "min", "max")), note,
        ))
    return rows


def _vocabulary(r: dict) -> list[dict]:
    def triple(figure: dict, invert: float | None = None) -> tuple:
        if invert is None:
            return (figure["median"], figure["min"], figure["max"])
        return (invert / figure["median"], invert / figure["max"], invert / figure["min"])

    rows = []
    for size, by in r["by_size"].items():
        if "tft" not in by:
            continue
        ours, peer = by["ours"], by["tft"]
        vocab = by["vocabularies"]
        equal = " and ".join(
            f"{c} {26 - len(v['features_differing'])}/26 ties {v['tie_order']}" for c, v in vocab.items()
        )
        peer_name = f"tf.Transform {r.get('tft_version', '')} AnalyzeAndTransformDataset".replace("  ", " ")
        target = 30 if int(size) >= 2_000_000 else 15
        cpu = peer["cpu_s"]["median"] / ours["cpu_s"]["median"]
        rows.append(comparison_row(
            "vocabulary", f"26 vocabularies, {int(size):,} Criteo rows -> TFRecord shards", peer_name, "rows/s", True,
            triple(ours["rows_per_s"]), triple(peer["rows_per_s"]),
            f"target >= {target}x; CPU-time ratio {cpu:.1f}x; vocabularies equal to the log's counts: {equal}",
        ))
        rows.append(comparison_row(
            "vocabulary", f"peak RSS, 26 vocabularies over {int(size):,} Criteo rows", peer_name, "MiB", False,
            triple(ours["peak_mib"]), triple(peer["peak_mib"]), "target <= 0.5x the peer's peak (ratio >= 2x)",
        ))
    s = r["start_up"]
    phases = s["phases_s"]
    rows.append(comparison_row(
        "vocabulary", f"{s['rows']:,}-row local ingest (hashing, Parquet), whole process",
        "python -c 'import apache_beam, pyarrow' (whole process)", "s", False,
        triple(s["ingest_process_s"]), triple(s["imports_process_s"]),
        f"target >= 0.5x (ingest within 2x the imports); phases, s from process start: imports "
        f"{phases['imports_done']:.2f}, graph built {phases['graph_built']:.2f}, first batch read "
        f"{phases['first_batch_read']:.2f}, run done {phases['run_done']:.2f}",
    ))
    return rows


def _reliability(r: dict) -> list[dict]:
    rows = []
    peers = {
        "parquet": "pyarrow.parquet.read_table", "arrow": "pyarrow.ipc read_all", "tfrecord": "tf.data.TFRecordDataset",
    }
    for fmt, result in r["formats"].items():
        flips = sum(result["counts"].values())
        ours = result["counts"]["same"] + result["counts"]["refused"]
        peer = result["peer"]["same"] + result["peer"]["refused"]
        counts = ", ".join(f"{k} {v}" for k, v in result["counts"].items())
        by_reader = "; ".join(f"{name}: {sum(c.values())}" for name, c in result["by_reader"].items())
        rows.append(comparison_row(
            "reliability", f"{fmt} shards: single-bit flips refused or read unchanged, verify='sizes' (%)",
            f"{peers[fmt]} alone", "%", True, (100 * ours / flips, None, None),
            (max(100 * peer / flips, 0.1), None, None),
            f"target 100% (0 silent); ours: {counts}; flips per reader: {by_reader}; "
            f"peer: {result['peer']['silent']} silent, {result['peer']['crashed']} crashed its process",
            noisy=False,
        ))
    return rows


def _validation_cost(r: dict) -> list[dict]:
    def rate(name: str) -> tuple:
        s = r[name]["seconds"]
        return _rate(r["config"]["rows"], s["median"], s["min"], s["max"])

    rows = []
    for name, what in (("validated", "raw-value counts and anomalies"),
                       ("compared", "the same and the drift comparison with a --vocab_from baseline")):
        wall, cpu = r["overhead"][f"{name}_wall"], r["overhead"][f"{name}_cpu"]
        paired_wall, paired_cpu = (r["paired_overhead"][f"{name}_{clock}"] for clock in ("wall", "cpu"))
        rows.append(comparison_row(
            "validation_cost", f"{r['config']['rows']:,}-row Criteo-like ingest with validation: {what}",
            "the same ingest without validation", "rows/s", True, rate(name), rate("plain"),
            f"target: validation <= {r['target']:.0%} of the ingest's time; measured, paired by rep, "
            f"{paired_wall['median']:+.1%} wall ({paired_wall['min']:+.1%} to {paired_wall['max']:+.1%}), "
            f"{paired_cpu['median']:+.1%} CPU; as a ratio of medians {wall:+.1%} wall, "
            f"{cpu:+.1%} CPU; the counts' own CPU inside the ingest "
            f"{r['counting_in_ingest']['share_of_plain_cpu']:.1%} of the plain ingest's; "
            f"record_validation alone {r['record_validation_ms']['alone']:.0f} ms; raw-value counts "
            f"{r['counting_alone']['raw_values_cpu_s'] / r['counting_alone']['read_cpu_s']:.0%} of reading's CPU",
        ))
    return rows


def _feature_transforms(r: dict) -> list[dict]:
    def triple(figure: dict) -> tuple:
        return (figure["median"], figure["min"], figure["max"])

    rows = []
    for size, by in r["by_size"].items():
        ours, base = by["ours"], by["base"]
        what = f"{int(size):,} Criteo-like rows: 13 quantile-bucketized + 13 z-scored columns, 3 hashed crosses"
        cost = ours["seconds"]["median"] / base["seconds"]["median"]
        check = by["ours_check"]
        rows.append(comparison_row(
            "feature_transforms", f"{what}, against the same ingest without them", "the ingest without transforms",
            "rows/s", True, triple(ours["rows_per_s"]), triple(base["rows_per_s"]),
            f"target: the transforms add <= 20% ({cost:.2f}x the time); boundaries' worst rank error "
            f"{check['max_boundary_rank_error']:.4f}, moments' {check['max_moment_relative_error']:.1e}",
        ))
        if "tft" in by:
            peer = by["tft"]
            rows.append(comparison_row(
                "feature_transforms", what, "tf.Transform AnalyzeAndTransformDataset (bucketize, scale_to_z_score, "
                "cross_hashed)", "rows/s", True, triple(ours["rows_per_s"]), triple(peer["rows_per_s"]),
                f"target >= 20x; tf.Transform's z moments within {by['tft_check']['max_z_moment_error']:.1e}, "
                f"bucket shares within {by['tft_check']['max_bucket_share_gap']:.3f} of 1/10",
            ))
            rows.append(comparison_row(
                "feature_transforms", f"peak RSS, {what}", "tf.Transform AnalyzeAndTransformDataset", "MiB", False,
                triple(ours["peak_mib"]), triple(peer["peak_mib"]), "target <= 0.5x the peer's peak (ratio >= 2x)",
            ))
    return rows


def _ingest_scaling(r: dict) -> list[dict]:
    """At the largest size: the history ingest against the plain ingest of the same events, the vocabulary
    ingest against the hashing one (time and peak RSS), with how each one's time per row and peak moved."""
    largest, smallest = str(r["sizes"][-1]), str(r["sizes"][0])
    rows = []
    for ours, peer, peer_label, log in (("histories", "events", "the same events ingested flat (hashed)",
                                         "events, one user holding 30%"),
                                        ("vocabulary", "hashing", "the same log hashed", "Criteo TSV rows")):
        a, b = r["runs"][ours][largest], r["runs"][peer][largest]
        a0 = r["runs"][ours][smallest]
        note = (f"{ours}: {a0['s_per_million']:.1f} s per 1M rows at {int(smallest):,}, {a['s_per_million']:.1f} at "
                f"{int(largest):,}; peak {a0['peak_mib']:.0f} -> {a['peak_mib']:.0f} MiB")
        target = r.get("history_target")
        if ours == "histories" and target:
            low, high = target["sizes"]
            note += (f"; {low:,} -> {high:,} events the peak grew {target['excess_mib']:+.0f} MiB more than the flat "
                     f"ingest's (target <= {target['target_mib']:.0f})")
        n = int(largest)
        rows.append(comparison_row("ingest_scaling", f"{ours} ingest, {n:,} {log}", peer_label, "rows/s", True,
                                   (n / a["seconds"], None, None), (n / b["seconds"], None, None), note))
        rows.append(comparison_row("ingest_scaling", f"peak RSS, {ours} ingest, {n:,} {log}", peer_label, "MiB",
                                   False, (a["peak_mib"], None, None), (b["peak_mib"], None, None)))
    return rows


def _bag_regime(r: dict, what: str) -> str:
    """Where a target is missed: the batch's shape of work and the machine's state."""
    ids = next((name for name in r.get("distinct_ids", {}) if f"{name} ids" in what), None)
    if ids is None:
        return ""
    distinct = r["distinct_ids"][ids]
    gradient_mb = distinct * r["dim"] * 4 / 1e6
    load = r.get("load_average", [float("nan")])[0]
    return (f"; regime: {distinct:,} distinct of {r['ids_per_call'][ids]:,} ids, a {gradient_mb:.1f} MB gradient "
            f"written per call, {r.get('cpus', '?')} cores at load average {load:.1f}")


def _embedding_bag_targets(r: dict) -> list[dict]:
    rows = []
    for t in r["targets"]:
        ours, peer = t["ours_ms"], t["peer_ms"]
        if "time_ratio_at_most" in t:
            goal = f"target: ours <= {t['time_ratio_at_most']}x torch's time"
        else:
            goal = f"target: >= {t['speedup_at_least']}x"
        status = "met" if t["met"] else "NOT met"
        what = f"embedding_bag native weighted {t['what']}"
        note = f"{goal}: {status} (median of the per-round ratios {t['paired_value']:.2f})"
        if "in_tf_function" in t:
            f = t["in_tf_function"]
            note += (f"; inside a tf.function {f['ms']['median']:.2f} ms ({f['time_vs_torch']:.2f}x torch's time), "
                     f"where a tf.function of one tf.identity alone takes {f['identity_function_ms']['median']:.2f} ms "
                     "after the same cache flush")
        if not t["met"]:
            note += _bag_regime(r, t["what"])
        rows.append(comparison_row("embedding_bag_targets", what, t["peer_name"], "ms", False,
                                   (ours["median"], ours["min"], ours["max"]),
                                   (peer["median"], peer["min"], peer["max"]), note, t["noisy"]))
    for d in r["dtypes"]:
        ms, base = d["ms"], d["float32_ms"]
        rows.append(comparison_row("embedding_bag_targets", f"embedding_bag native {d['dtype']} table, uniform ids, "
                                   f"{d['pass']}", "the same on float32", "ms", False,
                                   (ms["median"], ms["min"], ms["max"]), (base["median"], base["min"], base["max"]),
                                   "summed in float32", d["noisy"]))
    if "torch_skipped" in r and rows:
        rows[0]["limit"] += f"; {r['torch_skipped']}"
    return rows


def _demo_training_throughput(r: dict) -> list[dict]:
    native = next(row for row in r["rows"] if row["step"] == "native")
    rows = []
    for row in r["rows"]:
        if row["step"] == "native":
            continue
        rows.append(comparison_row("demo_training_throughput", "demo model training step, native kernels",
                                   f"the same step on the {row['step']}", "examples/s", True,
                                   (native["examples_per_s"], *native["examples_per_s_range"]),
                                   (row["examples_per_s"], *row["examples_per_s_range"]),
                                   f"{native['ms_per_step']:.1f} against {row['ms_per_step']:.1f} ms a step"))
    return rows


_NORMALISERS = {
    "convert_to_coo": _convert_to_coo,
    "embedding_bag_and_block_sparse": _embedding_bag_and_block_sparse,
    "embedding_bag_targets": _embedding_bag_targets,
    "demo_training_throughput": _demo_training_throughput,
    "beam_ingest": _beam_ingest,
    "io_formats": _io_formats,
    "tfdata_input": _tfdata_input,
    "arrow_op_input": _arrow_op_input,
    "reader_memory": _reader_memory,
    "ingest_memory": _ingest_memory,
    "vocabulary": _vocabulary,
    "reliability": _reliability,
    "validation_cost": _validation_cost,
    "feature_transforms": _feature_transforms,
    "ingest_scaling": _ingest_scaling,
}


def normalise(name: str, result: dict) -> list[dict]:
    """The comparison rows of benchmark `name`'s result dict."""
    return _NORMALISERS[name](result)


def data_sizes(name: str, r: dict) -> str:
    """The generated data a benchmark ran on, in words."""
    if name == "convert_to_coo":
        return f"batch {r['batch']} x {r['features']} features; variants: {', '.join(r['variants'])}"
    if name == "embedding_bag_and_block_sparse":
        e, b = r["embedding_bag"], r["block_sparse"]
        return (
            f"embedding batch {e['batch']}, vocab {e['vocab']:,}, dim {e['dim']}; "
            f"matmul M={b['m']} K={b['k']} N={b['n']}, block {b['block_size']}"
        )
    if name == "embedding_bag_targets":
        ids = ", ".join(f"{k} {v:,} ids" for k, v in r["ids_per_call"].items())
        return f"batch {r['batch']}, vocab {r['vocab']:,}, dim {r['dim']}, {r['reps']} rounds; {ids} per call"
    if name == "demo_training_throughput":
        return (f"CtrModel of make demo: batch {r['batch']}, {r['sparse_features']} sparse features of "
                f"{r['buckets']:,} buckets, {r['dense_features']} dense; {r['reps']} rounds of {r['steps_per_call']} "
                "steps")
    if name == "beam_ingest":
        c = r["config"]
        return f"{c['rows']:,} TSV rows (per-row peer: {c['peer_rows']:,}), {c['reps']} reps"
    if name == "io_formats":
        return "; ".join(f"{t['task']}: {t['rows']:,} rows" for t in r["results"])
    if name == "tfdata_input":
        sets = ", ".join(f"{k} {v:,} rows" for k, v in r["rows"].items())
        sweep = sorted({x["batch_size"] for x in r.get("batch_sweep", [])})
        return f"{sets}; batch {r['batch_size']}; sweep over batch sizes {sweep}"
    if name == "arrow_op_input":
        sets = ", ".join(f"{k} {v:,} rows" for k, v in r["rows"].items())
        return f"{sets}; batch {r['batch_size']}; Arrow and TFRecord shards"
    if name == "vocabulary":
        sizes = " and ".join(f"{int(s):,}" for s in r["sizes"])
        peer = "with tf.Transform" if r["tft"] else "tf.Transform not installed: its side skipped"
        return f"{sizes} Criteo TSV rows, {r['reps']} reps ({peer}); a 10,000-row ingest for the start-up"
    if name == "reliability":
        return (f"{r['flips_per_format']} seeded single-bit flips per shard format in a {r['rows']}-row ingest "
                f"output (seed {r['seed']})")
    if name == "validation_cost":
        return f"{r['config']['rows']:,} Criteo TSV rows (and a baseline of as many), {r['config']['reps']} reps"
    if name == "feature_transforms":
        peer = f"tf.Transform in {r.get('peer_reps', r['reps'])} of them" if r["tft"] else \
            "tf.Transform not installed: its side skipped"
        return f"{' and '.join(f'{int(s):,}' for s in r['sizes'])} Criteo-like TSV rows, {r['reps']} reps ({peer})"
    if name == "ingest_scaling":
        sizes = ", ".join(f"{int(s):,}" for s in r["sizes"])
        return f"{sizes} rows each: Criteo TSV (hashing, vocabulary) and event TSV (flat, histories), one run each"
    if name in ("reader_memory", "ingest_memory"):
        return " and ".join(f"{s:,}" for s in r["sizes"]) + " Criteo TSV rows"
    return ""
