"""Peak-RSS measurements shared by the memory benchmarks: one fresh process per measurement.

A benchmark module runs itself as `python -m benchmarks.<name> --child ...`; the
child prints one JSON line with `rows`, `seconds`, `baseline_mib` (after its
imports) and `peak_mib` (`peak_mib()` at the end). `summarise` and
`print_table` turn several such lines per (contender, size) into the
medians, spreads and growth figures the benchmarks report.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys

__all__ = ["peak_mib", "measure_in_child", "measure_alternately", "summarise", "add_growth", "print_table"]


def peak_mib() -> float:
    """Peak resident set of this process so far, MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure_in_child(module: str, *args: str) -> dict:
    """Runs `python -m <module> --child <args>` from the repository root; returns its JSON line.

    Raises:
      RuntimeError: the child failed (with the end of its stderr).
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = [sys.executable, "-m", module, "--child", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root, check=False)
    if result.returncode < 0 or result.returncode == 134:
        # Killed by a signal or aborted (seen once, under load, as "terminate called without an active
        # exception" from a reading child): said on stderr, measured again once, and a second failure raises.
        print(f"[benchmarks] {module} {' '.join(args)} died (exit {result.returncode}: "
              f"{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'no message'}); measuring "
              "it again", file=sys.stderr, flush=True)
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure_alternately(measure, contenders, rows: int, repeats: int, *, warm_up: bool) -> dict[str, list[dict]]:
    """`measure(contender)` for each contender in turn, `repeats` times (after one untimed run when `warm_up`).

    Alternating lets load changes on a shared machine hit every contender alike;
    the warm-up puts the log in the page cache for all runs. Every run must
    report `rows` rows.
    """
    if warm_up:
        measure(contenders[0])
    runs: dict[str, list[dict]] = {c: [] for c in contenders}
    for _ in range(repeats):
        for contender in contenders:
            runs[contender].append(measure(contender))
    for contender, measured in runs.items():
        assert all(m["rows"] == rows for m in measured), (contender, measured)
    return runs


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(measured: list[dict], file_bytes: int, added_key: str) -> dict:
    """Medians and min-max of several child measurements of one contender at one size."""
    return {
        "file_mib": file_bytes / 2**20,
        "peak_mib": _stats([m["peak_mib"] for m in measured]),
        added_key: _stats([m["peak_mib"] - m["baseline_mib"] for m in measured]),
        "seconds": _stats([m["seconds"] for m in measured]),
    }


def add_growth(results: dict) -> None:
    """Adds `<contender>_growth_mib`, `_growth_ratio` and `_growth_mib_per_100k_rows` (small -> large size)."""
    small, large = (str(s) for s in results["sizes"])
    for contender, by_size in results["runs"].items():
        low, high = by_size[small]["peak_mib"]["median"], by_size[large]["peak_mib"]["median"]
        results[f"{contender}_growth_mib"] = high - low
        results[f"{contender}_growth_ratio"] = high / low
        results[f"{contender}_growth_mib_per_100k_rows"] = (high - low) / ((int(large) - int(small)) / 100_000)


def print_table(results: dict, first_column: str, added_key: str, added_label: str) -> None:
    """Prints the measurements as a markdown table, then one growth line per contender."""
    print(f"| {first_column} | rows | log MiB | peak RSS MiB (median) | min-max | {added_label} MiB | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for contender, by_size in results["runs"].items():
        for rows, r in by_size.items():
            p = r["peak_mib"]
            print(
                f"| {contender} | {int(rows):,} | {r['file_mib']:.0f} | {p['median']:.0f} "
                f"| {p['min']:.0f}-{p['max']:.0f} | {r[added_key]['median']:.0f} | {r['seconds']['median']:.1f} |"
            )
    small, large = results["sizes"]
    print()
    for contender in results["runs"]:
        print(
            f"{contender}: peak RSS grew {results[f'{contender}_growth_mib']:+.0f} MiB "
            f"({results[f'{contender}_growth_ratio']:.2f}x; "
            f"{results[f'{contender}_growth_mib_per_100k_rows']:.0f} MiB per 100k rows) "
            f"from {small:,} to {large:,} rows (10x the log)"
        )
