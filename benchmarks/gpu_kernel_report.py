"""GPU_RESULTS.md and its plot: the machine, every check and every timing row."""

from __future__ import annotations

import pathlib
import subprocess

from benchmarks import kernel_references as ref
from benchmarks.gpu_kernel_checks import Checks


def nvcc_version(nvcc: str) -> str:
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if "release" in line]
    return lines[0].strip() if lines else "unknown"


def write_report(path: pathlib.Path, machine: dict, checks: Checks, timings: list[dict], notes: list[str]) -> None:
    columns = ["what", "peer", "ours_ms", "ours_range", "peer_ms", "peer_range", "speedup", "bound", "target", "met"]
    lines = ["# CUDA kernels on a GPU (`python -m benchmarks.gpu_kernels`)", ""]
    lines += [f"- {key}: {value}" for key, value in machine.items()]
    lines += ["", "Speed-up is the peer's median time over ours: above 1 means ours is faster. Times are CUDA-event",
              "times of one call each (medians, min-max over the repetitions), the L2 cache flushed before each call.",
              ""]
    lines += ["## Correctness", "",
              f"{len(checks.rows) - checks.failed} of {len(checks.rows)} checks pass. Tolerances: "
              "`|ours - ref| <= rtol*|ref| + scale*bound` (bound: the same sum over absolute values), "
              + ", ".join(f"{k} rtol {r:g} scale {s:g}" for k, (r, s) in ref.TOLERANCES.items())
              + "; `worst` is the largest error over its allowance (<= 1 passes).", "",
              "| kernel | case | dtype | worst | result |", "| --- | --- | --- | ---: | --- |"]
    for row in checks.rows:
        lines.append(f"| {row['kernel']} | {row['case']} | {row['dtype']} | {row['worst']:.3g} | "
                     f"{'pass' if row['ok'] else 'FAIL: ' + row['error']} |")
    lines += ["", "## Timings", "", "| " + " | ".join(columns) + " | data |", "|" + " --- |" * (len(columns) + 1)]
    for row in timings:
        cells = []
        for column in columns + ["data"]:
            value = row.get(column, "")
            if isinstance(value, bool):
                value = "yes" if value else "no"
            cells.append(f"{value:.3g}" if isinstance(value, float) else str(value))
        lines.append("| " + " | ".join(cells) + " |")
        for key, value in row.items():
            if key.startswith("backward alone"):
                lines.append(f"| ↳ {key}: {value} |" + " |" * len(columns))
    if notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    path.write_text("\n".join(lines) + "\n")


def plot(path: pathlib.Path, timings: list[dict]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [row for row in timings if "speedup" in row]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.5))
    ax.barh([f"{r['what']} vs {r['peer'].split(' (')[0]}" for r in rows], [r["speedup"] for r in rows])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("speed-up over the peer (peer time / ours)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
