"""The machine a run happened on, and the RESULTS.md / results.json it leaves behind."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess

__all__ = ["environment", "results_markdown", "write_results"]

_PACKAGES = ("tensorflow", "apache-beam", "pyarrow", "numpy", "scipy", "matplotlib", "torch")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def environment() -> dict:
    """CPU model, cores, RAM, load, Python and package versions (absent packages left out), date, commit."""
    versions = {"python": platform.python_version()}
    for package in _PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_gib": _ram_gib(),
        "load_average_at_start": load,
        "os": platform.platform(),
        "versions": versions,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
    }


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _spread(low: float | None, high: float | None) -> str:
    return "-" if low is None else f"{_figure(low)}-{_figure(high)}"


def results_markdown(report: dict) -> str:
    """RESULTS.md: the machine, versions, date and data sizes, then one table row per comparison."""
    env = report["environment"]
    ram = f"{env['ram_gib']:.0f} GiB RAM" if env["ram_gib"] else "RAM unknown"
    load = env["load_average_at_start"]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    if "torch" not in env["versions"]:
        versions += " (torch not installed: its comparison is skipped)"
    lines = [
        "# Benchmark results",
        "",
        f"`python -m benchmarks{' --quick' if report['quick'] else ''}` "
        f"({'quick smoke run: small data, few repetitions' if report['quick'] else 'full run'}).",
        "",
        f"- Machine: {env['cpu']}, {env['cores']} cores ({env['cores_usable']} usable), {ram}; {env['os']}",
        f"- Load average at start: {', '.join(f'{x:.2f}' for x in load) if load else 'unknown'} "
        "(a shared machine: other jobs may have run during the timings)",
        f"- Versions: {versions}",
        f"- Date: {env['date']}" + (f"; commit {env['commit']}" if env["commit"] else ""),
        f"- Total time: {report['seconds']:.0f} s",
        "",
        "## Data (generated)",
        "",
    ]
    for run in report["runs"]:
        if "error" in run:
            lines.append(f"- {run['name']}: FAILED (see below)")
        else:
            lines.append(f"- {run['name']} ({run['seconds']:.0f} s): {run['sizes']}{_separately(run)}")
    lines += [
        "",
        "## Ours against each peer",
        "",
        "Medians over the repetitions, min-max in brackets; ours and the peer ran alternately in the same "
        "process after a warm-up. **ours vs peer** is how many times better ours is "
        "(ours/peer for a rate, peer/ours for a time or memory): above 1 ours wins. "
        "⚠ marks a row whose min-max spread is wider than the gap between the medians: "
        "that ratio is not settled.",
        "",
        "| what | peer | unit | ours | ours min-max | peer | peer min-max | ours vs peer | limit / target | ⚠ |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['what']} | {row['peer_name']} | {row['unit']} | {_figure(row['ours'])} "
            f"| {_spread(row['ours_min'], row['ours_max'])} | {_figure(row['peer'])} "
            f"| {_spread(row['peer_min'], row['peer_max'])} | {row['ratio']:.2f}x | {row['limit']} "
            f"| {'⚠ noisy' if row['noisy'] else ''} |"
        )
    for run in report["runs"]:
        if "error" in run:
            lines.append(f"| {run['name']} | FAILED |  |  |  |  |  |  |  |  |")
    lines += _fast_paths_section(report.get("results", {}).get("convert_to_coo"))
    if report["plots"]:
        lines += ["", "## Plots", ""]
        lines += [f"![{name}](plots/{name})" for name in report["plots"]]
    if report["plot_notes"]:
        lines += [""] + [f"- {note}" for note in report["plot_notes"]]
    failures = [run for run in report["runs"] if "error" in run]
    if failures:
        lines += ["", "## Failures", ""]
        for run in failures:
            lines += [f"### {run['name']}", "", "```", run["error"].rstrip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _separately(run: dict) -> str:
    """For a benchmark merged in from a later run (`--merge`): when, at which commit and under what load."""
    env = run.get("environment")
    if not env:
        return ""
    load = env["load_average_at_start"]
    return (
        f"; run separately on {env['date']}" + (f" at commit {env['commit']}" if env["commit"] else "")
        + (f", load average at start {', '.join(f'{x:.2f}' for x in load)}" if load else "")
    )


def _fast_paths_section(result: dict | None) -> list[str]:
    """convert_to_coo's scalar-weight and sum paths against its general path, from the same rounds."""
    if not result:
        return []
    lines = [
        "",
        "## convert_to_coo: fast paths against the general path",
        "",
        "CPU seconds of ours only, from the same rounds as the table above. **median ratio** is median over "
        "median; **per-round ratio** is the median of the ratios of the two paths timed in the same round "
        "(seconds apart, so load from elsewhere cancels) and **cheaper in** the rounds where the fast path "
        "took less CPU, with the one-sided sign-test p (below 0.01: measurably cheaper). **bytes** counts "
        "what the ops allocate plus, for a per-id path, its 4-byte weight per id. Below 1 the fast path is "
        "cheaper.",
        "",
        "| variant | path | median ratio | per-round ratio | cheaper in | sign test p | bytes/id vs general |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for variant, figures in result["variants"].items():
        for path, f in figures["fast_paths_vs_general"].items():
            if "paired cpu vs general" not in f:
                continue
            lines.append(
                f"| {variant} | {path} | {f['cpu vs general']:.2f} | {f['paired cpu vs general']:.2f} "
                f"| {f['cheaper in rounds']} | {f['sign test p']:.2g} | {f['bytes+weights vs general']:.2f} |"
            )
    return lines


def write_results(report: dict, output: str) -> tuple[str, str]:
    """Writes RESULTS.md and results.json into `output`; returns their paths."""
    from sparse_io.atomic import atomic_write_text

    markdown = os.path.join(output, "RESULTS.md")
    data = os.path.join(output, "results.json")
    atomic_write_text(markdown, results_markdown(report))
    atomic_write_text(data, json.dumps(report, indent=1, default=_jsonable) + "\n")
    return markdown, data


def _jsonable(value):
    """numpy scalars and other strays that some benchmark dicts carry."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)
