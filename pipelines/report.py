"""report.html: what an ingest produced, with plots embedded as PNG images.

The launcher writes it after the pipeline finishes. Capacities and counts come
from stats.json (computed over every row by the pipeline); the ids-per-row
histograms and id-frequency curves are drawn from a bounded sample of the
written shards (at most `sample_rows` rows), so making the report costs the
same however large the output is.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os

import numpy as np

__all__ = ["write_report", "summary_text"]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _sample_lengths_and_ids(output_dir: str, features: list[str], sample_rows: int) -> dict[str, tuple]:
    """Row lengths and flat ids per feature from the first shards, up to `sample_rows` rows."""
    import glob

    import pyarrow.parquet as pq

    shards = sorted(glob.glob(os.path.join(output_dir, "part-*.parquet")))
    lengths: dict[str, list[np.ndarray]] = {f: [] for f in features}
    ids: dict[str, list[np.ndarray]] = {f: [] for f in features}
    seen = 0
    for shard in shards:
        pf = pq.ParquetFile(shard)
        available = [f for f in features if f in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=min(sample_rows, 65536), columns=available):
            for f in available:
                col = batch.column(f)
                lengths[f].append(np.diff(col.offsets.to_numpy()))
                ids[f].append(col.flatten().to_numpy(zero_copy_only=False))
            seen += batch.num_rows
            if seen >= sample_rows:
                break
        if seen >= sample_rows:
            break
    return {
        f: (np.concatenate(lengths[f]) if lengths[f] else np.zeros(0, np.int64),
            np.concatenate(ids[f]) if ids[f] else np.zeros(0, np.int64))
        for f in features
    }


NO_PLOTS = "no plots in report.html: matplotlib is not installed (pip install 'sparseflow[report]')"


def _plots(stats: dict, samples: dict[str, tuple]) -> list[tuple[str, str]] | None:
    """(title, base64 PNG) per plot; None where matplotlib is not installed (the report then has none)."""
    try:
        import matplotlib
    except ImportError:
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    names = sorted(samples)
    if names:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        top = max((int(samples[n][0].max()) if samples[n][0].size else 0) for n in names)
        bins = np.arange(top + 2) - 0.5
        for n in names[:12]:
            ax.hist(samples[n][0], bins=bins, histtype="step", label=n)
        ax.set_xlabel("ids per row")
        ax.set_ylabel("rows (sample)")
        ax.set_yscale("log")
        ax.legend(fontsize=6, ncol=3)
        ax.set_title("Ids per row")
        figures.append(("Ids per row (histogram, sampled rows)", _png(fig)))
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 3.5))
        for n in names[:12]:
            flat = samples[n][1]
            if flat.size:
                _, counts = np.unique(flat, return_counts=True)
                counts = np.sort(counts)[::-1]
                ax.loglog(np.arange(1, counts.size + 1), counts, label=n)
        ax.set_xlabel("id rank")
        ax.set_ylabel("frequency")
        ax.legend(fontsize=6, ncol=3)
        ax.set_title("Id frequency by rank (log-log)")
        figures.append(("Id frequency (log-log)", _png(fig)))
        plt.close(fig)

    feats = stats.get("features", {})
    if feats:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for n in sorted(feats)[:12]:
            cap = feats[n].get("capacity", {})
            sizes = sorted(int(b) for b in cap)
            if sizes:
                ax.plot(sizes, [cap[str(b)]["max"] for b in sizes], marker="o", label=n)
        ax.set_xlabel("batch size (rows)")
        ax.set_ylabel("COO capacity (ids)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=6, ncol=3)
        ax.set_title("Capacity per batch size")
        figures.append(("Capacity per batch size (from stats.json)", _png(fig)))
        plt.close(fig)
    return figures


def summary_text(summary: dict) -> str:
    """The one-screen text summary printed at the end of a run."""
    rows_in = summary.get("rows_in", 0)
    seconds = max(summary.get("seconds", 0.0), 1e-9)
    lines = [
        "sparseflow ingest summary",
        f"  input        {summary.get('input', '')} ({summary.get('format', '')})",
        f"  output       {summary.get('output', '')}",
        f"  rows in      {rows_in:,}",
        f"  rows out     {summary.get('rows_out', 0):,}",
        f"  bad records  {summary.get('bad_records', 0):,}"
        + (f"  (dead letters in {summary['errors_dir']})" if summary.get("bad_records") else ""),
        f"  shards       {summary.get('num_shards', 0)} {summary.get('shard_format', '')}",
        f"  time         {summary.get('seconds', 0.0):.1f} s  ({rows_in / seconds:,.0f} rows/s)",
    ]
    if summary.get("report"):
        lines.append(f"  report       {summary['report']}")
    return "\n".join(lines)


def write_report(output_dir: str, summary: dict, *, sample_rows: int = 200_000) -> str:
    """Writes `output_dir/report.html`; returns its path.

    Args:
      output_dir: an ingest output directory (stats.json and shards inside).
      summary: the run summary (rows in/out, bad records, seconds, ...).
      sample_rows: rows of the shards read for histograms (bounded cost).
    """
    from sparse_io.atomic import atomic_write_text

    stats_path = os.path.join(output_dir, "stats.json")
    stats = {}
    if os.path.exists(stats_path):
        with open(stats_path, encoding="utf-8") as f:
            stats = json.load(f)
    features = sorted(stats.get("features", {}))
    samples = _sample_lengths_and_ids(output_dir, features, sample_rows) if features else {}
    figures = _plots(stats, samples)
    if figures is None:
        import logging

        # The workers and a lean launcher need no plotting library; the report says what it left out.
        logging.getLogger("sparseflow.report").warning(NO_PLOTS)

    rows = []
    for n in features:
        s = stats["features"][n]
        ipr = s.get("ids_per_row", {})
        by_size = sorted(s.get("capacity", {}).items(), key=lambda x: int(x[0]))
        caps = ", ".join(f"{b}: {c['max']}" for b, c in by_size)
        rows.append(
            "<tr>" + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (n, s.get("rows"), f"{ipr.get('mean', 0):.2f}", ipr.get("p99"), ipr.get("max"),
                          s.get("distinct_ids"), caps)
            ) + "</tr>"
        )
    body = [
        "<!doctype html><html><head><meta charset='utf-8'><title>sparseflow ingest report</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}</style>",
        "</head><body><h1>sparseflow ingest report</h1>",
        f"<pre>{html.escape(summary_text(summary))}</pre>",
        "<h2>Features</h2><table><tr><th>feature</th><th>rows</th><th>ids/row mean</th><th>p99</th>"
        "<th>max</th><th>distinct ids</th><th>capacity (batch: ids)</th></tr>",
        *rows,
        "</table>",
    ]
    if figures is None:
        body.append(f"<p>{html.escape(NO_PLOTS)}.</p>")
    for title, data in figures or ():
        label = html.escape(title)
        body.append(f"<h2>{label}</h2><img alt='{label}' src='data:image/png;base64,{data}'>")
    body.append("</body></html>")
    path = os.path.join(output_dir, "report.html")
    atomic_write_text(path, "\n".join(body))
    return path
