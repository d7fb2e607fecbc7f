"""What huge pages do for the native embedding bag: the same bags with the table on 4 KiB and on 2 MiB pages.

    python -m benchmarks.embedding_huge_pages [--quick] [--rounds N] [--json FILE]

The regime of the CPU embedding bag's targets: a weighted forward of 4096
bags of 1-19 uniform ids (about 10) over a 1M x 64 float32 table (256 MiB),
one random 256-byte row per id, bound by memory latency and TLB misses.
The native kernel advises a table of at least 32 MiB onto transparent huge
pages on first sight (`ops/native/huge_pages.h`); SPARSEFLOW_HUGE_PAGES=0
turns that off. Each contender is a fresh child process (the advice is per
process and per buffer), "huge" and "small" alternating for `rounds` rounds;
each child times its first call (which includes the one-time collapse of
the table onto huge pages) and then the median of 50 calls after 5 more.
Reported: medians over the rounds of both, their min-max, the ratio, and the
table's AnonHugePages after the calls (/proc/self/smaps), which says whether
the kernel gave huge pages at all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VOCAB, DIM, BAGS = 1_000_000, 64, 4096


def _child(quick: bool) -> dict:
    import numpy as np
    import tensorflow as tf

    import ops

    vocab = VOCAB // 4 if quick else VOCAB
    rng = np.random.default_rng(0)
    table = tf.constant(rng.standard_normal((vocab, DIM), dtype=np.float32))
    lengths = rng.integers(1, 20, BAGS)
    rows = tf.constant(np.repeat(np.arange(BAGS), lengths).astype(np.int32))
    cols = tf.constant(rng.integers(0, vocab, int(lengths.sum())).astype(np.int64))
    gains = tf.constant(rng.uniform(0.5, 1.5, int(lengths.sum())).astype(np.float32))

    def bag():
        return ops.embedding_bag(table, rows, cols, gains, sample_count=BAGS, implementation="native").numpy()

    start = time.perf_counter()
    bag()
    first = time.perf_counter() - start
    for _ in range(5):
        bag()
    times = []
    for _ in range(10 if quick else 50):
        start = time.perf_counter()
        bag()
        times.append(time.perf_counter() - start)
    # The advice splits the table's mapping at 2 MiB boundaries: the middle lies in the advised part.
    address = np.from_dlpack(table).ctypes.data + vocab * DIM * 4 // 2
    return {"first_ms": first * 1e3, "median_ms": statistics.median(times) * 1e3,
            "anon_huge_kib": _anon_huge_kib(address)}


def mapping_field(address: int, field: str) -> str | None:
    """The value of `field` ("AnonHugePages", "VmFlags", ...) in /proc/self/smaps for the mapping holding `address`.

    None where there is no such mapping, field or /proc.
    """
    try:
        with open("/proc/self/smaps") as f:
            inside = False
            for line in f:
                head, _, rest = line.partition(" ")
                if "-" in head and not head.endswith(":"):
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    inside = lo <= address < hi
                elif inside and head == field + ":":
                    return rest.strip()
    except OSError:
        pass
    return None


def _anon_huge_kib(address: int) -> int:
    """AnonHugePages of the mapping holding `address`, KiB (0 where unknown)."""
    value = mapping_field(address, "AnonHugePages")
    return int(value.split()[0]) if value else 0


def _measure(huge: bool, quick: bool) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "TF_CPP_MIN_LOG_LEVEL": "3", "SPARSEFLOW_HUGE_PAGES": "1" if huge else "0"}
    args = [sys.executable, "-m", "benchmarks.embedding_huge_pages", "--child"] + (["--quick"] if quick else [])
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=root, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"embedding_huge_pages child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(quick: bool, rounds: int | None = None) -> dict:
    """Alternates the two contenders; returns a JSON-able dict (also printed as a table)."""
    rounds = rounds or (2 if quick else 5)
    measured: dict[str, list[dict]] = {"huge": [], "small": []}
    for i in range(rounds):
        for name in (("huge", "small") if i % 2 == 0 else ("small", "huge")):
            measured[name].append(_measure(name == "huge", quick))
    results = {"benchmark": "embedding_huge_pages", "quick": quick, "rounds": rounds,
               "vocab": VOCAB // 4 if quick else VOCAB, "dim": DIM, "bags": BAGS, "by_pages": {}}
    for name, runs in measured.items():
        results["by_pages"][name] = {"median_ms": _spread([r["median_ms"] for r in runs]),
                                     "first_ms": _spread([r["first_ms"] for r in runs]),
                                     "anon_huge_kib": _spread([float(r["anon_huge_kib"]) for r in runs])}
    huge, small = (results["by_pages"][n]["median_ms"]["median"] for n in ("huge", "small"))
    results["speedup"] = small / huge
    print("| table pages | forward ms (median of rounds) | min-max | first call ms | AnonHugePages of the table |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results["by_pages"].items():
        m = r["median_ms"]
        print(f"| {name} | {m['median']:.3f} | {m['min']:.3f}-{m['max']:.3f} | {r['first_ms']['median']:.1f} | "
              f"{r['anon_huge_kib']['median'] / 1024:.0f} MiB |")
    print(f"\nsmall-page time / huge-page time: {results['speedup']:.2f}x")
    return results


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        print(json.dumps(_child("--quick" in argv)))
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embedding_huge_pages",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 250,000-row table (64 MiB), 2 rounds")
    parser.add_argument("--rounds", type=int, help="rounds of the two contenders (default 5)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    results = run(args.quick, args.rounds)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
