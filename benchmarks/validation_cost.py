"""What the data validation costs an ingest: the same ingest with and without it, and with a baseline comparison.

    python -m benchmarks.validation_cost [--quick] [--rows N] [--reps N] [--json FILE]
    python -m benchmarks --only validation_cost [--quick]        (the suite's row)

The validation adds to an ingest (issue: "validation in the same Beam pass as
the statistics; target <= 10% of the ingest's time"):

  * in the Beam pass, the top-k count of every sparse feature's raw values
    (stats.json `raw_values`): for the hashed columns from the Fingerprint64s
    the hashing computes anyway (`transforms.beam.raw_values.HashIdsCountingRawValues`),
    for others from their values (`CountRawValues`);
  * after it, `pipelines.validate.record_validation`: the dead letters
    counted by reason and the anomalies found from stats.json, alone or
    against a baseline's (`--vocab_from`), written back into stats.json.

Three contenders ingest the same synthetic Criteo-like TSV log (the
beam_ingest generator: 13 integer and 26 hex categorical columns,
Criteo-like cardinalities, ~15% missing) with `pipelines.ingest.run_ingest`
(hashing, Parquet, 4 shards, no shuffle, no report), in this process,
alternating, `reps` times each after a warm-up:

  plain      raw values not counted (CountRawValues replaced by a transform that
             emits nothing, HashIdsCountingRawValues by HashIds alone) and
             record_validation skipped: the ingest without validation;
  validated  the ingest as shipped, without a baseline;
  compared   the ingest as shipped with `--vocab_from` an ingest of another log of
             the same size (whose hash settings it reuses), so the drift comparison runs.

In the validated ingest, the CPU time of the threads counting raw values is
measured too (the summaries' methods timed with the calling thread's clock):
the validation's own work, apart from the rest of the pass that runs beside
it; with record_validation's milliseconds, it is the cost the end-to-end
ratios below measure with the noise of two ingests.

Reported: rows/s (wall and CPU of the process, medians with min-max), the
validation's share of the plain ingest's time, `(validated - plain) / plain`,
and the comparison's, `(compared - plain) / plain`, against the 10% target:
as the ratio of the medians, and paired, the median over reps of each rep's
ratio (a rep runs the three one after another, so a change in the machine's
load from one rep to the next cancels out of its ratio; the noise of each
ingest, ~4% here, does not); the target is read on the paired figure;
record_validation alone (ms, with and without the baseline), which is the
part that does not grow with the rows; and, outside Beam, the CPU seconds of
the raw-value counts of all 26 columns (`RawValueCounts.add_hashed` per batch
with the fingerprints hashing gave, as the ingest counts them) beside those of
reading the same rows (`sparse_io.read_file`), on the log's first 200,000
rows: the part that does.

The full size is 2,000,000 rows with 5 reps (about 4 minutes on 2 cores); `--quick` uses 20,000 and 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time

TARGET = 0.10
_CONFIG = """\
input: {format: criteo, schema: criteo}
features:
  "C*": {hash_buckets: 1000000}
output: {format: parquet, num_shards: 4, shuffle: false}
stats: {batch_sizes: [4096]}
error_budget: 0.0
"""


@contextlib.contextmanager
def _without_validation():
    """The ingest with no raw-value counting in its Beam pass and no record_validation after it.

    Hashing then runs as HashIds alone (it keeps no fingerprints for the count).
    """
    import apache_beam as beam

    import pipelines.validate
    import transforms.beam.raw_values as raw_values

    class _NoRawValues(beam.PTransform):
        def __init__(self, features, *args, **kwargs):
            super().__init__()

        def expand(self, batches):
            return batches | "Nothing" >> beam.FlatMap(lambda batch: ())

    class _HashOnly(beam.PTransform):
        def __init__(self, hash_ids, *args, **kwargs):
            super().__init__()
            self._hash_ids = hash_ids

        def expand(self, batches):
            return batches | self._hash_ids, batches.pipeline | "NoRawValues" >> beam.Create([])

    saved = raw_values.CountRawValues, raw_values.HashIdsCountingRawValues, pipelines.validate.record_validation
    raw_values.CountRawValues, raw_values.HashIdsCountingRawValues = _NoRawValues, _HashOnly
    pipelines.validate.record_validation = lambda *args, **kwargs: {"baseline": None, "anomalies": []}
    try:
        yield
    finally:
        raw_values.CountRawValues, raw_values.HashIdsCountingRawValues, pipelines.validate.record_validation = saved


@contextlib.contextmanager
def _counting_cpu(spent: list[float]):
    """Adds to `spent[0]` the CPU seconds of the threads that count raw values, while in the block.

    The raw-value summaries' own methods (and their pickling, which sums what is buffered) are timed with the
    calling thread's clock: the validation's own work inside the ingest, apart from the rest of the pass, which
    runs in other threads at the same time.
    """
    import threading

    from transforms.beam._fingerprint_counts import FingerprintCounts
    from transforms.beam.raw_values import RawValueCounts

    lock = threading.Lock()
    methods = [(RawValueCounts, name) for name in ("add", "add_hashed", "merge", "result")]
    methods.append((FingerprintCounts, "__getstate__"))
    saved = [(owner, name, getattr(owner, name)) for owner, name in methods]

    def timed(method):
        def call(*args, **kwargs):
            began = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                with lock:
                    spent[0] += time.thread_time() - began
        return call

    for owner, name, method in saved:
        setattr(owner, name, timed(method))
    try:
        yield
    finally:
        for owner, name, method in saved:
            setattr(owner, name, method)


def _ingest(log: str, config: str, out: str, *extra: str) -> None:
    from pipelines.ingest import run_ingest

    shutil.rmtree(out, ignore_errors=True)
    run_ingest(["--input", log, "--config", config, "--output", out, "--no_report", *extra])


def _stats(wall: list[float], cpu: list[float], rows: int) -> dict:
    return {
        "seconds": {"median": statistics.median(wall), "min": min(wall), "max": max(wall)},
        "cpu_seconds": {"median": statistics.median(cpu), "min": min(cpu), "max": max(cpu)},
        "rows_per_s": rows / statistics.median(wall),
        "cpu_rows_per_s": rows / statistics.median(cpu),
        "reps": len(wall),
    }


def _paired(times: list[float], plain: list[float]) -> dict:
    """The median and range over reps of `(time - plain) / plain`, each rep's time against its own plain one."""
    ratios = [(t - p) / p for t, p in zip(times, plain)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def _record_ms(out: str, baseline: str | None, reps: int = 5) -> float:
    """Median milliseconds of record_validation alone on an ingest output (it rewrites stats.json each time)."""
    from pipelines.validate import record_validation

    times = []
    for _ in range(reps):
        began = time.perf_counter()
        record_validation(out, baseline)
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def _counting_alone(log: str, rows: int) -> dict:
    """CPU seconds of reading `log`'s first `rows` rows into batches, and of counting their raw values."""
    from benchmarks.beam_ingest import _head
    from sparse_io import read_file
    from sparse_io.hashing import hash_columns
    from transforms.beam.raw_values import RawValueCounts

    head = _head(log, log + ".head", rows)
    began = time.process_time()
    batches = list(read_file(head, "criteo"))
    read_s = time.process_time() - began
    columns = [f"C{i}" for i in range(1, 27)]
    hashed = []  # what hashing hands the count: each column's ids and their fingerprints (not timed: the ingest
    for batch in batches:  # hashes them anyway)
        found: list = []
        hash_columns([batch.column(batch.schema.get_field_index(c)) for c in columns], [1 << 20] * len(columns),
                     hashes=found)
        hashed.append(found)
    began = time.process_time()
    counts = {c: RawValueCounts() for c in columns}
    for found in hashed:
        for c, (ids, fingerprints) in zip(columns, found):
            counts[c].add_hashed(ids, fingerprints)
    for c in columns:
        counts[c].result(top_k=50)
    count_s = time.process_time() - began
    os.remove(head)
    return {"rows": sum(b.num_rows for b in batches), "read_cpu_s": read_s, "raw_values_cpu_s": count_s}


def run(quick: bool = False, rows: int | None = None, reps: int | None = None) -> dict:
    """Runs the benchmark; returns a JSON-able dict (also printed)."""
    from benchmarks.beam_ingest import make_log

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    rows = rows or (20_000 if quick else 2_000_000)
    reps = reps or (2 if quick else 5)
    work = tempfile.mkdtemp(prefix="validation_cost_")
    try:
        config = os.path.join(work, "ingest.yaml")
        with open(config, "w") as f:
            f.write(_CONFIG)
        log = make_log(os.path.join(work, "day.tsv"), rows, seed=0)
        baseline = os.path.join(work, "baseline")
        _ingest(make_log(os.path.join(work, "baseline.tsv"), rows, seed=1), config, baseline)

        def plain():
            with _without_validation():
                _ingest(log, config, os.path.join(work, "plain"))

        counted: list[float] = []  # per validated rep: the CPU seconds its raw-value counts took

        def validated():
            spent = [0.0]
            with _counting_cpu(spent):
                _ingest(log, config, os.path.join(work, "validated"))
            counted.append(spent[0])

        contenders = {
            "plain": plain,
            "validated": validated,
            "compared": lambda: _ingest(log, config, os.path.join(work, "compared"), "--vocab_from", baseline),
        }
        names = list(contenders)
        for name in names:  # warm-up: imports, page cache
            contenders[name]()
        wall: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for rep in range(reps):
            for name in names[rep % len(names):] + names[: rep % len(names)]:
                start, start_cpu = time.perf_counter(), time.process_time()
                contenders[name]()
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
        with open(os.path.join(work, "compared", "stats.json")) as f:
            recorded = json.load(f)
        with open(os.path.join(work, "plain", "stats.json")) as f:
            unvalidated = json.load(f)
        result = {name: _stats(wall[name], cpu[name], rows) for name in names}
        plain_s = result["plain"]["seconds"]["median"]
        plain_cpu = result["plain"]["cpu_seconds"]["median"]
        result["overhead"] = {
            f"{name}_{clock}": (result[name][key]["median"] - base) / base
            for name in ("validated", "compared")
            for clock, key, base in (("wall", "seconds", plain_s), ("cpu", "cpu_seconds", plain_cpu))
        }
        result["paired_overhead"] = {
            f"{name}_{clock}": _paired(times[name], times["plain"])
            for name in ("validated", "compared")
            for clock, times in (("wall", wall), ("cpu", cpu))
        }
        counted = counted[1:]  # not the warm-up's
        result["counting_in_ingest"] = {
            "cpu_s": statistics.median(counted),
            "share_of_plain_cpu": statistics.median(counted) / plain_cpu,
            "min": min(counted) / plain_cpu, "max": max(counted) / plain_cpu,
        }
        result["record_validation_ms"] = {"alone": _record_ms(os.path.join(work, "validated"), None),
                                          "against_baseline": _record_ms(os.path.join(work, "compared"), baseline)}
        result["counting_alone"] = _counting_alone(log, min(rows, 200_000))
        result["checks"] = {
            "raw_values_counted": all("raw_values" in s for s in recorded["features"].values()),
            "plain_has_no_validation": not any("raw_values" in s for s in unvalidated["features"].values())
            and "validation" not in unvalidated,
            "compared_with": recorded["validation"]["baseline"] == baseline,
            "anomalies_found": len(recorded["validation"]["anomalies"]),
        }
        result["target"] = TARGET
        result["config"] = {"rows": rows, "reps": reps, "quick": quick}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _print(result)
    return result


def _print(result: dict) -> None:
    rows = result["config"]["rows"]
    print(f"validation cost on {rows:,} Criteo-like rows, {result['config']['reps']} reps (target <= {TARGET:.0%})")
    for name in ("plain", "validated", "compared"):
        r = result[name]
        print(f"  {name:<10} {r['seconds']['median']:8.2f} s  ({r['rows_per_s']:>10,.0f} rows/s, "
              f"CPU {r['cpu_seconds']['median']:.2f} s)")
    for key, value in result["overhead"].items():
        paired = result["paired_overhead"][key]
        print(f"  overhead {key:<16} {value:+.1%} (medians); paired {paired['median']:+.1%} "
              f"({paired['min']:+.1%} to {paired['max']:+.1%})")
    c = result["counting_in_ingest"]
    print(f"  inside the ingest, the raw-value counts' own CPU {c['cpu_s']:.2f} s: "
          f"{c['share_of_plain_cpu']:.1%} of the plain ingest's CPU ({c['min']:.1%} to {c['max']:.1%})")
    ms = result["record_validation_ms"]
    print(f"  record_validation alone {ms['alone']:.1f} ms, against a baseline {ms['against_baseline']:.1f} ms")
    c = result["counting_alone"]
    print(f"  outside Beam, {c['rows']:,} rows: reading {c['read_cpu_s']:.2f} s CPU, "
          f"raw-value counts {c['raw_values_cpu_s']:.2f} s CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 2 reps: a smoke run")
    parser.add_argument("--rows", type=int, default=None, help="rows of the log (default 2,000,000)")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--json", default=None, help="also write the result dict here")
    args = parser.parse_args()
    result = run(args.quick, args.rows, args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
