"""PNG plots of a suite run (matplotlib, Agg backend: no display needed).

  throughput.png    ours against each peer, for every rate figure (log scale, one panel per unit);
  block_sparse.png  block-sparse matmul time against density: the native CPU kernel and the stock-op
                    composition, with dense tf.linalg.matmul, scipy BSR and the bandwidth limit;
  batch_size.png    input throughput against batch size (tf.data contenders).

Error bars are the min-max spread over the repetitions.
"""

from __future__ import annotations

import os
import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

__all__ = ["write_plots"]

_DPI = 90


def _save(fig, path: str) -> None:
    """Writes `fig` as a PNG of a 256-colour palette: flat bar charts lose nothing and take a third of the bytes."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=_DPI, format="png")
    buffer.seek(0)
    Image.open(buffer).convert("RGB").quantize(256).save(path, format="PNG", optimize=True)


def _errors(rows: list[dict], key: str) -> list[list[float]] | None:
    low, high = [], []
    for row in rows:
        if row[f"{key}_min"] is None:
            return None
        low.append(row[key] - row[f"{key}_min"])
        high.append(row[f"{key}_max"] - row[key])
    return [low, high]


def throughput_plot(rows: list[dict], path: str) -> bool:
    """Horizontal bars, ours and peer per comparison, one panel per rate unit; False when no rate rows."""
    rates = [row for row in rows if row["higher_is_better"]]
    if not rates:
        return False
    units = list(dict.fromkeys(row["unit"] for row in rates))
    counts = [sum(row["unit"] == unit for row in rates) for unit in units]
    fig, axes = plt.subplots(
        len(units), 1, figsize=(10, 1.2 + 0.42 * sum(counts) + 0.6 * len(units)), squeeze=False,
        gridspec_kw={"height_ratios": counts}, layout="constrained",
    )
    for ax, unit in zip(axes[:, 0], units):
        group = [row for row in rates if row["unit"] == unit]
        positions = list(range(len(group)))
        ax.barh([p + 0.2 for p in positions], [r["ours"] for r in group], 0.4, xerr=_errors(group, "ours"),
                label="ours", color="tab:blue")
        ax.barh([p - 0.2 for p in positions], [r["peer"] for r in group], 0.4, xerr=_errors(group, "peer"),
                label="peer", color="tab:gray")
        # Long names wrap, so that the label column does not squeeze the bars.
        labels = [
            f"{textwrap.fill(r['what'], 52)}\nvs {r['peer_name']}{' (noisy)' if r['noisy'] else ''}" for r in group
        ]
        ax.set_yticks(positions, labels, fontsize=6)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel(unit + " (log scale; higher is better)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=7, loc="lower right")
    axes[0, 0].set_title("Throughput: ours against each peer (median, min-max bars)", fontsize=10)
    _save(fig, path)
    plt.close(fig)
    return True


def block_sparse_plot(block_sparse: dict, path: str) -> None:
    """Time per call against density for both passes, against the dense product of the same shape.

    Rows with `native_ms` (and `native_spread_ms`) add the native kernel's series beside the composition's.
    """
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, step in zip(axes, ("fwd", "fwd+bwd")):
        rows = [r for r in block_sparse["rows"] if r["pass"] == step]
        density = [r["density"] for r in rows]
        ours = [r["ours_ms"] for r in rows]
        spread = [[o - r["ours_spread_ms"][0] for o, r in zip(ours, rows)],
                  [r["ours_spread_ms"][1] - o for o, r in zip(ours, rows)]]
        ax.errorbar(density, ours, yerr=spread, marker="o", capsize=3, label="ours, stock-op composition")
        native = [r for r in rows if r.get("native_ms") is not None]
        if native:  # what `implementation="auto"` runs on a CPU
            times = [r["native_ms"] for r in native]
            ax.errorbar([r["density"] for r in native], times, marker="D", capsize=3, color="tab:purple",
                        yerr=[[t - r["native_spread_ms"][0] for t, r in zip(times, native)],
                              [r["native_spread_ms"][1] - t for t, r in zip(times, native)]],
                        label="ours, native CPU kernel (the default on CPU)")
        dense, (low, high) = rows[0]["dense_ms"], rows[0]["dense_spread_ms"]
        ax.axhline(dense, color="tab:red", label="dense tf.linalg.matmul")
        ax.axhspan(low, high, color="tab:red", alpha=0.15)
        scipy = [r for r in rows if "scipy_bsr_ms" in r]
        if scipy:
            ax.errorbar([r["density"] for r in scipy], [r["scipy_bsr_ms"] for r in scipy], marker="s",
                        linestyle=":", color="tab:green", label="scipy.sparse.bsr_matrix")
        ax.plot(density, [r["copy_limit_ms"] for r in rows], linestyle="--", color="black",
                label="bandwidth limit (numpy copy)")
        ax.set_yscale("log")
        ax.set_xlabel("block density")
        ax.set_ylabel("ms per call (log scale)")
        ax.set_title(f"{step}: M={block_sparse['m']} K={block_sparse['k']} N={block_sparse['n']}, "
                     f"block {block_sparse['block_size']}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def batch_size_plot(sweep: list[dict], path: str) -> None:
    """Rows per second against batch size, one line per contender."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for contender in dict.fromkeys(r["contender"] for r in sweep):
        rows = sorted((r for r in sweep if r["contender"] == contender), key=lambda r: r["batch_size"])
        rates = [r["rows_per_s"] for r in rows]
        spread = [[v - r["rows_per_s_min"] for v, r in zip(rates, rows)],
                  [r["rows_per_s_max"] - v for v, r in zip(rates, rows)]]
        ax.errorbar([r["batch_size"] for r in rows], rates, yerr=spread, marker="o", capsize=3, label=contender)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (rows)")
    ax.set_ylabel("rows/s (higher is better)")
    ax.set_title("Input throughput against batch size: shards to COO batches", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def write_plots(rows: list[dict], results: dict[str, dict], directory: str) -> tuple[list[str], list[str]]:
    """Writes the plots the results allow into `directory`; returns (file names, notes on plots left out)."""
    os.makedirs(directory, exist_ok=True)
    written, notes = [], []
    if throughput_plot(rows, os.path.join(directory, "throughput.png")):
        written.append("throughput.png")
    else:
        notes.append("throughput.png not drawn: no rate figures in this run")
    if "embedding_bag_and_block_sparse" in results:
        block_sparse_plot(
            results["embedding_bag_and_block_sparse"]["block_sparse"], os.path.join(directory, "block_sparse.png")
        )
        written.append("block_sparse.png")
    else:
        notes.append("block_sparse.png not drawn: embedding_bag_and_block_sparse did not run")
    if results.get("tfdata_input", {}).get("batch_sweep"):
        batch_size_plot(results["tfdata_input"]["batch_sweep"], os.path.join(directory, "batch_size.png"))
        written.append("batch_size.png")
    else:
        notes.append("batch_size.png not drawn: tfdata_input did not run")
    if "ingest_scaling" in results:
        from benchmarks.ingest_scaling import scaling_plot

        scaling_plot(results["ingest_scaling"], os.path.join(directory, "ingest_scaling.png"))
        written.append("ingest_scaling.png")
    else:
        notes.append("ingest_scaling.png not drawn: ingest_scaling did not run")
    return written, notes
