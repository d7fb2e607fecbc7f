"""Vocabularies on Beam: our ingest against tf.Transform on the same rows, and a small ingest's start-up.

    python -m benchmarks.vocabulary [--quick] [--sizes 200000,2000000] [--reps N]

Part 1, vocabularies. A synthetic Criteo-like TSV log (the beam_ingest
generator: 13 integer and 26 hex categorical columns, Criteo-like
cardinalities, ~15% missing) is turned into TFRecord shards with one
vocabulary per categorical column and one OOV bucket, by

  ours   `python -m pipelines.ingest` with a config giving every C column
         `vocabulary: {min_frequency: 1, num_oov_buckets: 1}`, TFRecord output,
         no shuffle;
  tft    tf.Transform's census-example layout: `CsvTFXIO` reads the log,
         `AnalyzeAndTransformDataset` runs a preprocessing_fn with
         `tft.compute_and_apply_vocabulary(C, num_oov_buckets=1)` per column
         (the integer columns and the label pass through), `ExampleProtoCoder`
         and `WriteToTFRecord` write the rows, `WriteTransformFn` the graph.

Both run on the same in-process Beam runner, each in a fresh child process
(so its peak RSS is its own), alternately, `reps` times per size. Reported per
contender: rows/s over the pipeline's own wall time (imports excluded), the
CPU seconds of the pipeline (all threads of the child), the child's peak RSS
and its whole wall time. After the runs both outputs' vocabulary files are
compared token by token with counts made independently from the log by
`pyarrow.csv`: the same tokens, each file ordered by descending count. The
ordering rules differ only among equal counts: ours breaks ties by ascending
token, tf.Transform by descending token (checked, and stated in the result).
Where tensorflow_transform is not importable (it comes with the `bench`
extra) the tft side is skipped, saying so, and ours still runs.

Part 2, a small ingest's start-up. The fixed cost of a local ingest is what a
10,000-row run mostly pays. A child runs `python -m pipelines.ingest` (hashing,
Parquet, the demo config) on 10,000 rows with timestamps at each phase: the
imports, the config and the checks, building the graph, the first batch read
by ReadLogs, the end of the run. It alternates with a child that only imports
apache_beam and pyarrow. Target: the whole 10,000-row ingest process within
2x of that import-only process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks._rss import peak_mib
from benchmarks._tft import INTS, run_tft

NUM_CAT = 26
_CATS = [f"C{i}" for i in range(1, NUM_CAT + 1)]
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_OURS_CONFIG = """\
input: {format: criteo, schema: criteo}
features:
  "C*":
    vocabulary: {min_frequency: 1, num_oov_buckets: 1}
output: {format: tfrecord, num_shards: 4, shuffle: false}
stats: {batch_sizes: [4096]}
error_budget: 0.0
"""


def tft_available() -> bool:
    """True where tensorflow_transform can be imported (the `bench` extra)."""
    import importlib.util

    return importlib.util.find_spec("tensorflow_transform") is not None


# Children -------------------------------------------------------------------------------------------------


def _process_age_s() -> float:
    """Seconds since this process was started by the kernel (before the interpreter began)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def _child_ours(log: str, out: str) -> dict:
    config = os.path.join(os.path.dirname(out), "ours_vocabulary.yaml")
    with open(config, "w") as f:
        f.write(_OURS_CONFIG)
    from pipelines.ingest import run_ingest

    shutil.rmtree(out, ignore_errors=True)
    start, start_cpu = time.perf_counter(), time.process_time()
    summary = run_ingest(["--input", log, "--format", "criteo", "--config", config, "--output", out, "--no_report"])
    return {
        "rows": summary["rows_out"],
        "seconds": time.perf_counter() - start,
        "cpu_s": time.process_time() - start_cpu,
        "vocab_dir": os.path.join(out, "vocab"),
    }


def _child_tft(log: str, out: str) -> dict:
    import tensorflow_transform as tft

    def preprocessing_fn(inputs):
        outputs = {name: inputs[name] for name in ["label", *INTS]}
        for name in _CATS:
            outputs[name] = tft.compute_and_apply_vocabulary(inputs[name], num_oov_buckets=1, vocab_filename=name)
        return outputs

    return {**run_tft(log, out, _CATS, preprocessing_fn), "vocab_dir": os.path.join(out, "transform_fn", "assets")}


def _child_small(log: str, out: str) -> dict:
    """The 10,000-row ingest, with a timestamp per phase (seconds since the process started)."""
    marks = {"interpreter_ready": _process_age_s()}
    import pipelines.ingest as ingest
    from transforms.beam import read_logs

    marks["imports_done"] = _process_age_s()
    first_batch: dict[str, float] = {}
    process = read_logs._ReadFileFn.process

    def timed_process(self, path):
        # Instrumentation only: note when the first batch leaves the reader.
        for element in process(self, path):
            first_batch.setdefault("t", _process_age_s())
            yield element

    read_logs._ReadFileFn.process = timed_process
    built = ingest.build_ingest

    def timed_build(*args, **kwargs):
        marks["checks_done"] = _process_age_s()
        result = built(*args, **kwargs)
        marks["graph_built"] = _process_age_s()
        return result

    ingest.build_ingest = timed_build
    # As `python -m pipelines.ingest ...` runs it: main() reading the command line (so it also ends the
    # way the program does), its summary on stdout before this child's one JSON line.
    sys.argv = ["pipelines.ingest", "--input", log, "--format", "criteo",
                "--config", os.path.join(_ROOT, "pipelines", "configs", "demo.yaml"),
                "--output", out, "--overwrite", "--no_report"]
    ingest.main()
    marks["first_batch_read"] = first_batch["t"]
    marks["run_done"] = _process_age_s()
    from sparse_io.manifest import read_manifest

    rows = read_manifest(out)["totals"]["rows_out"]
    return {"rows": rows, "marks": marks}


def _child_imports() -> dict:
    import apache_beam  # noqa: F401
    import pyarrow  # noqa: F401

    return {"rows": 0, "marks": {"imports_done": _process_age_s()}}


def _child(argv: list[str]) -> None:
    kind = argv[0]
    if kind == "imports":
        result = _child_imports()
    else:
        log, out = argv[1], argv[2]
        result = {"ours": _child_ours, "tft": _child_tft, "small": _child_small}[kind](log, out)
    result["peak_mib"] = peak_mib()
    print(json.dumps(result), flush=True)
    if kind == "tft":
        # TensorFlow and tfx-bsl's extension modules can crash while the interpreter tears them down,
        # after the work is done and reported; skip that teardown.
        os._exit(0)


# Parent ----------------------------------------------------------------------------------------------------


def _run_child(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "benchmarks.vocabulary", "--child", *args], capture_output=True,
                          text=True, env=env, cwd=_ROOT, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    return result


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def reference_counts(log: str) -> dict[str, dict[str, int]]:
    """Token counts of each C column of the log, by pyarrow.csv (independent of both pipelines)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    names = ["label", *(f"I{i}" for i in range(1, 14)), *_CATS]
    table = pcsv.read_csv(
        log,
        read_options=pcsv.ReadOptions(column_names=names),
        parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False),
        convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(_CATS, pa.string()),
                                            strings_can_be_null=True, include_columns=_CATS),
    )
    counts = {}
    for name in _CATS:
        vc = pc.value_counts(table[name].drop_null()) if table.num_rows else None
        counts[name] = {} if vc is None else dict(zip(vc.field(0).to_pylist(), vc.field(1).to_pylist()))
    return counts


def _read_tokens(vocab_dir: str, name: str) -> list[str]:
    for candidate in (os.path.join(vocab_dir, f"{name}.txt"), os.path.join(vocab_dir, name)):
        if os.path.exists(candidate):
            with open(candidate, encoding="utf-8") as f:
                return f.read().splitlines()
    raise FileNotFoundError(f"no vocabulary file for {name} in {vocab_dir}")


def compare_vocabularies(counts: dict[str, dict[str, int]], vocab_dirs: dict[str, str]) -> dict:
    """Checks each contender's vocabulary files against the reference counts.

    For every feature: the same token set as the log, ordered by descending
    count; among equal counts, the tie order found ("ascending", "descending"
    or "other"). Returns per contender the features that differ and the tie
    orders seen, plus the vocabulary sizes.
    """
    report: dict = {}
    for contender, vocab_dir in vocab_dirs.items():
        mismatched, ties, sizes = [], set(), {}
        for name in _CATS:
            tokens = _read_tokens(vocab_dir, name)
            expected = counts[name]
            sizes[name] = len(tokens)
            ranks = [expected.get(t, -1) for t in tokens]
            if sorted(tokens) != sorted(expected) or any(a < b for a, b in zip(ranks, ranks[1:])):
                mismatched.append(name)
                continue
            for (a, ca), (b, cb) in zip(zip(tokens, ranks), zip(tokens[1:], ranks[1:])):
                if ca == cb:
                    ties.add("ascending" if a < b else "descending")
        report[contender] = {
            "features_differing": mismatched,
            "tie_order": sorted(ties)[0] if len(ties) == 1 else ("other" if ties else "no ties"),
            "sizes": sizes,
        }
    return report


def _run_size(log: str, rows: int, reps: int, work: str, contenders: list[str]) -> dict:
    runs: dict[str, list[dict]] = {c: [] for c in contenders}
    for rep in range(reps):
        for contender in contenders[rep % len(contenders):] + contenders[: rep % len(contenders)]:
            measured = _run_child(contender, log, os.path.join(work, contender))
            if measured["rows"] != rows:
                raise RuntimeError(f"{contender} wrote {measured['rows']} rows of {rows}")
            runs[contender].append(measured)
            print(f"[vocabulary] {rows:,} rows, {contender}: {measured['seconds']:.1f} s in the pipeline, "
                  f"{measured['peak_mib']:.0f} MiB peak", flush=True)
    out = {}
    for contender, measured in runs.items():
        out[contender] = {
            "rows_per_s": _summary([rows / m["seconds"] for m in measured]),
            "seconds": _summary([m["seconds"] for m in measured]),
            "cpu_s": _summary([m["cpu_s"] for m in measured]),
            "peak_mib": _summary([m["peak_mib"] for m in measured]),
            "process_s": _summary([m["process_s"] for m in measured]),
        }
    vocab_dirs = {c: runs[c][-1]["vocab_dir"] for c in contenders}
    out["vocabularies"] = compare_vocabularies(reference_counts(log), vocab_dirs)
    return out


def _run_start_up(work: str, reps: int) -> dict:
    from benchmarks.beam_ingest import make_log

    rows = 10_000
    log = make_log(os.path.join(work, "small.tsv"), rows, seed=2)
    out = os.path.join(work, "small_out")
    _run_child("small", log, out)  # warm-up: page cache, .pyc files
    runs: dict[str, list[dict]] = {"small": [], "imports": []}
    for rep in range(reps):
        for kind in (("small", "imports") if rep % 2 == 0 else ("imports", "small")):
            runs[kind].append(_run_child(kind, log, out) if kind == "small" else _run_child(kind))
    phases = ["interpreter_ready", "imports_done", "checks_done", "graph_built", "first_batch_read", "run_done"]
    marks = {p: statistics.median(m["marks"][p] for m in runs["small"]) for p in phases}
    return {
        "rows": rows,
        "ingest_process_s": _summary([m["process_s"] for m in runs["small"]]),
        "imports_process_s": _summary([m["process_s"] for m in runs["imports"]]),
        "ingest_peak_mib": _summary([m["peak_mib"] for m in runs["small"]]),
        "phases_s": marks,
        "target_ratio": 2.0,
    }


def run(quick: bool = False, sizes: list[int] | None = None, reps: int | None = None) -> dict:
    """Runs both parts; returns a JSON-able dict (also printed)."""
    from benchmarks.beam_ingest import make_log

    sizes = sizes or ([20_000] if quick else [200_000, 2_000_000])
    reps = reps or (1 if quick else 2)
    contenders = ["ours", "tft"] if tft_available() else ["ours"]
    result: dict = {"sizes": sizes, "reps": reps, "quick": quick, "tft": tft_available(), "by_size": {}}
    if not result["tft"]:
        print("[vocabulary] tensorflow_transform is not importable (pip install -e '.[bench]'): "
              "the tf.Transform side is skipped", flush=True)
    else:
        import tensorflow_transform

        result["tft_version"] = tensorflow_transform.__version__
    work = tempfile.mkdtemp(prefix="vocabulary_")
    try:
        for rows in sizes:
            log = make_log(os.path.join(work, f"log_{rows}.tsv"), rows, seed=1)
            result["by_size"][str(rows)] = _run_size(log, rows, reps, work, contenders)
            os.remove(log)
        result["start_up"] = _run_start_up(work, 3 if quick else 7)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _print(result)
    return result


def _print(result: dict) -> None:
    print("| rows | contender | rows/s (median) | min-max | CPU s | peak MiB | process s |")
    print("|---|---|---|---|---|---|---|")
    for size, by in result["by_size"].items():
        for contender in ("ours", "tft"):
            if contender not in by:
                continue
            r = by[contender]
            print(f"| {int(size):,} | {contender} | {r['rows_per_s']['median']:,.0f} | "
                  f"{r['rows_per_s']['min']:,.0f}-{r['rows_per_s']['max']:,.0f} | {r['cpu_s']['median']:.1f} | "
                  f"{r['peak_mib']['median']:.0f} | {r['process_s']['median']:.1f} |")
        if "tft" in by:
            speed = by["ours"]["rows_per_s"]["median"] / by["tft"]["rows_per_s"]["median"]
            memory = by["ours"]["peak_mib"]["median"] / by["tft"]["peak_mib"]["median"]
            print(f"{int(size):,} rows: ours {speed:.1f}x tf.Transform's rows/s; peak RSS {memory:.2f}x its peak")
        for contender, v in by["vocabularies"].items():
            print(f"  {contender} vocabularies: {NUM_CAT - len(v['features_differing'])}/{NUM_CAT} equal to the "
                  f"log's tokens in count order; ties ordered {v['tie_order']}")
    s = result["start_up"]
    ratio = s["ingest_process_s"]["median"] / s["imports_process_s"]["median"]
    phases = ", ".join(f"{k} {v:.2f}" for k, v in s["phases_s"].items())
    print(f"{s['rows']:,}-row ingest process {s['ingest_process_s']['median']:.2f} s, import of apache_beam + "
          f"pyarrow alone {s['imports_process_s']['median']:.2f} s: {ratio:.2f}x (target <= 2x)")
    print(f"  phases (s since process start, medians): {phases}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        _child(argv[1:])
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vocabulary", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, one repetition")
    parser.add_argument("--sizes", default=None, help="comma-separated row counts (default 200000,2000000)")
    parser.add_argument("--reps", type=int, default=None, help="runs of each contender per size (default 2)")
    parser.add_argument("--json", default=None, help="also write the result dict here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    result = run(args.quick, sizes, args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
