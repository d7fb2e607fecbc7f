"""report.html beside its baseline: a feature's top raw values and histogram drawn next to the baseline's.

When stats.json records a comparison (`validation.baseline`, set by an
ingest with `--vocab_from`), each card also shows what the baseline had:

  * a sparse feature: the union of both sides' most frequent raw values, two
    bars each (baseline light, this ingest dark), as the L-infinity distance
    compares them;
  * a dense feature: the baseline's histogram and this ingest's re-binned
    onto the baseline's edges (as the Jensen-Shannon divergence compares
    them), side by side, with the share of values below and above the
    baseline's range.

The baseline's stats.json is read once when the report is written (any Beam
filesystem); when it cannot be read the report says so and shows this
ingest alone.
"""

from __future__ import annotations

import html

from sparse_io.output_files import STATS_FILE
from sparse_io.stats_file import Stats, StatsError

__all__ = ["load_baseline", "sparse_comparison", "dense_comparison", "TOP_COMPARED"]

TOP_COMPARED = 6


def load_baseline(stats: dict) -> tuple[dict | None, str | None]:
    """`(the baseline's stats.json, None)`, or `(None, why not)`; `(None, None)` when nothing was compared."""
    baseline = (stats.get("validation") or {}).get("baseline")
    if not baseline:
        return None, None
    try:
        return dict(Stats.load(baseline).data), None
    except StatsError as e:
        return None, f"the baseline's {e}"
    except Exception as e:  # any filesystem's error: the report still shows this ingest
        return None, f"the baseline's {baseline}/{STATS_FILE} could not be read ({type(e).__name__}: {e})"


def sparse_comparison(name: str, base: dict, current: dict) -> str:
    """Paired bars of the most frequent raw values on either side (HTML; empty when either has none)."""
    from pipelines.report_svg import paired_bars_svg

    b_top, c_top = (base.get("raw_values") or {}).get("top"), (current.get("raw_values") or {}).get("top")
    if not b_top or not c_top:
        return ""
    b_share = {str(v): s for v, _, s in b_top}
    c_share = {str(v): s for v, _, s in c_top}
    shown = sorted(set(list(b_share)[:TOP_COMPARED]) | set(list(c_share)[:TOP_COMPARED]),
                   key=lambda v: -max(b_share.get(v, 0.0), c_share.get(v, 0.0)))[:TOP_COMPARED]
    items = [(v, b_share.get(v), c_share.get(v)) for v in shown]
    chart = paired_bars_svg(items, f"top values of {name}: baseline and this ingest")
    return ("<div class='note'>top raw values: <span class='key base'>baseline</span> "
            "<span class='key now'>this ingest</span> (- : not among that side's most frequent)</div>" + chart)


def dense_comparison(name: str, base: dict, current: dict, label=None) -> str:
    """The baseline's histogram beside this one re-binned onto its edges (HTML; empty without both histograms)."""
    from pipelines.anomalies import rebinned
    from pipelines.report_svg import format_number, histogram_svg

    if "histogram" not in base or "histogram" not in current:
        return ""
    label = label or format_number
    hb, hs = base["histogram"], current["histogram"]
    counts = rebinned(hs["edges"], hs["counts"], hb["edges"])
    total = float(sum(counts))
    below, above = (counts[0] / total, counts[-1] / total) if total else (0.0, 0.0)
    inside = [int(round(c)) for c in counts[1:-1]]
    left = histogram_svg(hb["edges"], hb["counts"], f"baseline histogram of {name}", width=180, label=label)
    right = histogram_svg(hb["edges"], inside, f"histogram of {name} on the baseline's bins", width=180, label=label)
    outside = f"{below:.1%} below and {above:.1%} above the baseline's range"
    return ("<div class='pair'><figure><figcaption>baseline</figcaption>" + left + "</figure>"
            "<figure><figcaption>this ingest</figcaption>" + right + "</figure></div>"
            f"<div class='note'>{html.escape(outside)}</div>")
