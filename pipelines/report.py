"""report.html: what an ingest produced, laid out to be looked at rather than read.

The launcher writes it after the pipeline finishes, from what the pipeline
already computed over every row: stats.json (sparse features, dense features,
the label), schema.json (hash buckets, vocabulary sizes) and the dead letters
under errors/. Nothing is re-read from the shards, so the report costs the
same however large the output is. Charts are inline SVG: the page needs no
plotting library, loads nothing and shows no broken images.

Sections, each an element with its id: `flags` (the anomalies, first),
`run` (the run's figures), `features` (a table of every feature, sortable
and filterable, each row a link to its card), `label` (class balance),
`sparse` (a card per sparse feature, naturally sorted: C2 before C10),
`dense` (a card per dense feature), `dead-letters` (by reason, with the
reasons as written and example records). A card's id is
`pipelines.report_table.card_id(name)`. When stats.json records a comparison
with a baseline, cards show the baseline's top values and histogram beside
this ingest's (`pipelines.report_compare`).

The page is one file: inline CSS, SVG and script, and a Content-Security-Policy
that forbids loading anything (no network, no external fonts).
"""

from __future__ import annotations

import html
import json
import math
import os

from pipelines.report_compare import dense_comparison, load_baseline, sparse_comparison
from pipelines.report_svg import (
    TIME_UNIT_SECONDS,
    bars_svg,
    format_count,
    format_duration,
    format_number,
    format_rate,
    format_timestamp,
    histogram_svg,
    share_bar_svg,
)
from pipelines.report_table import TABLE_SCRIPT, TABLE_STYLE, card_id, features_table, natural_key
from sparse_io.output_files import DEAD_LETTERS_FILE, ERRORS_DIR, REPORT_FILE, SCHEMA_FILE, STATS_FILE

__all__ = ["write_report", "summary_text", "estimate_hash_collisions", "natural_key", "REPORT_SECTIONS"]

REPORT_SECTIONS = ("flags", "run", "features", "label", "sparse", "dense", "dead-letters")
_TOP_IDS_SHOWN = 5
_EXAMPLES_PER_REASON = 3
_RAW_SHOWN = 160

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:78em;padding:0 1em;color:#222;background:#fafafa}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
.note{color:#666;font-size:.85em}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(17em,1fr));gap:.8em}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.6em .8em}
.card h3{margin:0 0 .3em;font-size:1em;font-family:monospace}
.card dl{display:grid;grid-template-columns:auto 1fr;gap:.1em .6em;margin:.3em 0;font-size:.85em}
.card dt{color:#666}.card dd{margin:0}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(11em,1fr));gap:.6em}
.figure{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.5em .8em}
.figure b{display:block;font-size:1.3em}.figure span{color:#666;font-size:.8em}
table{border-collapse:collapse;background:#fff}
td,th{border:1px solid #ddd;padding:3px 8px;font-size:.85em;text-align:left}
code{font-size:.85em;word-break:break-all}.warn{color:#a33}
.card.wide{grid-column:span 2}.pair{display:flex;gap:.6em}
.pair figure{margin:0}.pair figcaption{font-size:.75em;color:#666}
.key::before{content:'';display:inline-block;width:.8em;height:.8em;margin:0 .25em 0 .4em;vertical-align:-.1em}
.key.base::before{background:#c9d6e6}.key.now::before{background:#3b6ea8}
"""
# Nothing may be loaded: no script, style, font or image from anywhere but this file.
_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
           "font-src 'none'; connect-src 'none'")


def estimate_hash_collisions(distinct_buckets: int, buckets: int) -> tuple[float, float] | None:
    """`(estimated distinct raw ids, estimated raw ids that share a bucket with another)`.

    stats.json counts ids after hashing, so what it sees is the number of
    occupied buckets k out of `buckets` (m). With n raw ids hashed uniformly,
    E[k] = m (1 - (1 - 1/m)^n); inverting it gives n = ln(1 - k/m) / ln(1 - 1/m),
    and n - k raw ids landed in a bucket another id already took. None when
    every bucket is taken (n cannot be told apart from any larger value).

    Example:
      >>> n, lost = estimate_hash_collisions(9_516, 100_000)  # 10,000 ids into 100k buckets
      >>> round(n), round(lost)
      (10000, 484)
    """
    k, m = int(distinct_buckets), int(buckets)
    if m <= 0 or k < 0 or k > m:
        raise ValueError(f"estimate_hash_collisions: need 0 <= distinct_buckets <= buckets, got {k} and {m}")
    if k == m:
        return None
    if m == 1:
        return float(k), 0.0
    n = math.log1p(-k / m) / math.log1p(-1 / m)
    return n, max(n - k, 0.0)


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


def _load_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _e(value) -> str:
    return html.escape(str(value))


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _run_section(summary: dict, stats: dict) -> str:
    rows_in = summary.get("rows_in", 0)
    seconds = summary.get("seconds", 0.0)
    bad = summary.get("bad_records", 0)
    figures = [
        (f"{rows_in:,}", "rows read"),
        (f"{summary.get('rows_out', stats.get('num_rows', 0)):,}", "rows written"),
        (f"{bad:,}", f"bad records ({_share(bad, rows_in)})"),
        (str(summary.get("num_shards", "-")), f"{summary.get('shard_format', '')} shards"),
        (f"{seconds:.1f} s", f"{rows_in / seconds:,.0f} rows/s") if seconds else ("-", "time not known"),
        (str(len(stats.get("features", {}))), "sparse features"),
        (str(len(stats.get("dense", {}))), "dense features"),
    ]
    cells = "".join(f"<div class='figure'><b>{_e(v)}</b><span>{_e(k)}</span></div>" for v, k in figures)
    where = (f"<p class='note'>input <code>{_e(summary.get('input', ''))}</code> ({_e(summary.get('format', ''))})"
             f" &rarr; output <code>{_e(summary.get('output', ''))}</code></p>")
    return f"<section id='run'><h2>Run</h2>{where}<div class='figures'>{cells}</div></section>"


def _anomalies(stats: dict) -> tuple[list[dict], str | None]:
    """The anomalies stats.json records (`validation`) and their baseline, or those of this ingest alone."""
    validation = stats.get("validation")
    if validation is None:  # an older stats.json
        from pipelines.anomalies import find_anomalies

        return [vars(a) for a in find_anomalies(stats)], None
    return validation.get("anomalies", []), validation.get("baseline")


def _flags_section(stats: dict, unread_baseline: str | None = None) -> str:
    """The anomalies, each with a link to its feature's card (the dead letters' to their section)."""
    from pipelines.anomalies import DEAD_LETTERS

    anomalies, baseline = _anomalies(stats)
    against = f" against the baseline <code>{_e(baseline)}</code>" if baseline else " (no baseline compared)"
    head = f"<section id='flags'><h2>Flags ({len(anomalies)})</h2>"
    if unread_baseline:
        head += f"<p class='note warn'>{_e(unread_baseline)}: its figures are not drawn beside these.</p>"
    if not anomalies:
        return f"{head}<p class='note'>No anomalies{against}.</p></section>"

    # A card for each feature of this ingest; one only the baseline has (feature_missing) has none to go to.
    cards = {*(stats.get("features") or {}), *(stats.get("dense") or {}), (stats.get("label") or {}).get("name")}

    def link(feature: str) -> str:
        if feature == DEAD_LETTERS:
            return "<a href='#dead-letters'>see</a>"
        return f"<a href='#{card_id(feature)}'>see</a>" if feature in cards else ""

    rows = "".join(
        f"<tr><td><code>{_e(a['feature'])}</code></td><td class='warn'>{_e(a['kind'])}</td>"
        f"<td>{float(a['value']):.4g}</td><td>{float(a['threshold']):g}</td><td>{_e(a['detail'])}</td>"
        f"<td>{link(str(a['feature']))}</td></tr>"
        for a in anomalies
    )
    return (f"{head}<p class='note'>Anomalies{against}; thresholds are set under <code>validation:</code> "
            "in the config (python -m pipelines.validate).</p><table><tr><th>feature</th><th>kind</th>"
            f"<th>value</th><th>threshold</th><th>what</th><th></th></tr>{rows}</table></section>")


def _label_section(stats: dict) -> str:
    label = stats.get("label")
    if not label:
        return "<section id='label'><h2>Label</h2><p class='note'>This output has no label column.</p></section>"
    present = label["rows"] - label.get("missing", 0)
    head = f"<h2>Label <code>{_e(label['name'])}</code></h2>"
    note = f"<p class='note'>{present:,} labelled rows, {label.get('missing', 0):,} missing.</p>"
    if "value_counts" in label and present:
        items = [(str(v), c / present) for v, c in label["value_counts"]]
        chart = bars_svg(items, f"label balance of {label['name']}", width=360)
        return f"<section id='label'>{head}{note}<div id='{card_id(label['name'])}'>{chart}</div></section>"
    return f"<section id='label'>{head}{note}{_value_card(label['name'], label)}</section>"


def _sparse_card(name: str, s: dict, spec: dict, base: dict | None = None) -> str:
    rows = s.get("rows", 0)
    empty = s.get("empty_rows", 0)
    ipr = s.get("ids_per_row", {})
    distinct = s.get("distinct_ids", 0)
    exact = "" if s.get("distinct_ids_exact", True) else "&asymp; "
    facts = [("missing", f"{share_bar_svg(empty / rows if rows else 0, f'{name} missing share')} "
                         f"{_share(empty, rows)}")]
    buckets, vocabulary = spec.get("hash_buckets"), spec.get("vocabulary_size")
    if buckets:
        facts.append(("distinct ids", f"{exact}{distinct:,} of {buckets:,} buckets"))
        estimate = estimate_hash_collisions(min(distinct, buckets), buckets)
        if estimate is None:
            facts.append(("collisions", "<span class='warn'>every bucket taken: raise hash_buckets</span>"))
        else:
            raw, lost = estimate
            shared = "&lt; 1" if lost < 1 else f"&asymp; {format_count(lost)}"
            facts.append(("collisions", f"{shared} of &asymp; {format_count(raw)} raw ids share a bucket "
                                        f"({_share(lost, raw)})"))
    elif vocabulary:
        facts.append(("distinct ids", f"{exact}{distinct:,} of a {vocabulary:,}-id vocabulary"))
    else:
        facts.append(("distinct ids", f"{exact}{distinct:,}"))
    if ipr.get("max", 0) > 1:  # ids per row says something only where a row can hold several
        facts.append(("ids per row", f"mean {ipr.get('mean', 0):.2f}, p99 {format_number(ipr.get('p99', 0))}, "
                                     f"max {ipr.get('max', 0)}"))
    capacity = s.get("capacity", {})
    if capacity:
        largest = max(capacity, key=int)
        facts.append((f"capacity @{largest}", f"{capacity[largest]['max']:,} ids"))
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in facts)
    raw = s.get("raw_values")
    if raw and raw.get("top"):  # the values as logged, which a reader recognises, rather than bucket numbers
        top_raw = raw["top"][:_TOP_IDS_SHOWN]
        chart = bars_svg([(str(v), share) for v, _, share in top_raw], f"top values of {name}")
        approx = "" if raw.get("exact", True) else f", each at most {format_count(raw['max_undercount'])} low"
        top_note = (f"<div class='note'>top raw values (share of its {format_count(raw['values'])} values, "
                    f"{format_count(raw['distinct'])} distinct{approx})</div>")
    else:
        ids_total = ipr.get("mean", 0) * rows
        top = s.get("top_ids", [])[:_TOP_IDS_SHOWN]
        chart = bars_svg([(str(i), c / ids_total) for i, c in top], f"top ids of {name}") if top and ids_total else ""
        top_note = "<div class='note'>top ids (share of the feature's ids)</div>" if chart else ""
    compared = sparse_comparison(name, base, s) if base else ""
    if compared:  # the pair replaces this ingest's bars alone
        top_note, chart = "", compared
    return f"<div class='card' id='{card_id(name)}'><h3>{_e(name)}</h3><dl>{dl}</dl>{top_note}{chart}</div>"


def _binary(s: dict) -> bool:
    """Whether the column holds only 0 and 1 (a click label): its mean is then a rate."""
    counts = s.get("value_counts") or []
    return bool(counts) and all(v in (0, 1) for v, _ in counts)


def _value_card(name: str, s: dict, time_unit: str | None = None, base: dict | None = None) -> str:
    """A dense column's card; a `time_unit` column's figures are dates, its spread a duration."""
    rows, missing = s.get("rows", 0), s.get("missing", 0)
    facts = [("missing", f"{share_bar_svg(missing / rows if rows else 0, f'{name} missing share')} "
                         f"{_share(missing, rows)}")]
    chart = ""
    if "quantiles" in s:
        q = s["quantiles"]
        if time_unit in TIME_UNIT_SECONDS:
            def shown(v):
                return format_timestamp(v, time_unit)
            span = format_duration((s["max"] - s["min"]) * TIME_UNIT_SECONDS[time_unit])
            facts.append(("range", f"{_e(shown(s['min']))} &hellip; {_e(shown(s['max']))} ({_e(span)})"))
        else:
            shown = format_number
            mean = format_rate(s["mean"]) if _binary(s) else format_number(s["mean"])
            facts.append(("range", f"{format_number(s['min'])} &hellip; {format_number(s['max'])}, "
                                   f"{'rate' if _binary(s) else 'mean'} {mean}"))
        facts += [
            ("p1 / p50 / p99", " / ".join(_e(shown(q[k])) for k in ("p1", "p50", "p99"))),
            ("p25 / p75", " / ".join(_e(shown(q[k])) for k in ("p25", "p75"))),
        ]
        h = s["histogram"]
        scale = " (log-spaced bins)" if h["scale"] == "symlog" else ""
        sampled = "" if s.get("sample_exact", True) else f", from a sample of {format_count(s['sample_size'])}"
        chart = (f"<div class='note'>histogram{scale}{sampled}</div>"
                 + histogram_svg(h["edges"], h["counts"], f"histogram of {name}", label=shown))
        # A time column is not compared: a later ingest's times all lie past the baseline's.
        compared = dense_comparison(name, base, s, shown) if base and time_unit is None else ""
        if compared:
            chart = f"<div class='note'>histogram{scale}{sampled}, beside the baseline's</div>{compared}"
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in facts)
    wide = " wide" if "class='pair'" in chart else ""
    return f"<div class='card{wide}' id='{card_id(name)}'><h3>{_e(name)}</h3><dl>{dl}</dl>{chart}</div>"


def _sparse_section(stats: dict, specs: dict, baseline: dict | None = None) -> str:
    features = stats.get("features", {})
    base = (baseline or {}).get("features") or {}
    if not features:
        return "<section id='sparse'><h2>Sparse features</h2><p class='note'>None.</p></section>"
    cards = "".join(_sparse_card(n, features[n], specs.get(n, {}), base.get(n))
                    for n in sorted(features, key=natural_key))
    return (f"<section id='sparse'><h2>Sparse features ({len(features)})</h2>"
            "<p class='note'>Ids are counted after hashing, top values before it; collisions are estimated from "
            f"the occupied buckets.</p><div class='grid'>{cards}</div></section>")


def _dense_section(stats: dict, specs: dict, baseline: dict | None = None) -> str:
    dense = stats.get("dense")
    base = (baseline or {}).get("dense") or {}
    if dense is None:
        return ("<section id='dense'><h2>Dense features</h2><p class='note'>stats.json describes no dense "
                "features (an output written without a schema, or before dense statistics existed).</p></section>")
    if not dense:
        return "<section id='dense'><h2>Dense features</h2><p class='note'>None.</p></section>"
    cards = "".join(_value_card(n, dense[n], specs.get(n, {}).get("time_unit"), base.get(n))
                    for n in sorted(dense, key=natural_key))
    return f"<section id='dense'><h2>Dense features ({len(dense)})</h2><div class='grid'>{cards}</div></section>"


def _dead_letter_entry(output_dir: str, stats: dict, summary: dict) -> dict:
    """stats.json's `dead_letters` (counted by the validation), or the same counted here for an older output."""
    if isinstance(stats.get("dead_letters"), dict):
        return stats["dead_letters"]
    from pipelines.dead_letter_counts import count_dead_letters

    path = os.path.join(output_dir, ERRORS_DIR, DEAD_LETTERS_FILE)
    bad = count_dead_letters(path, 0)["bad"]
    return count_dead_letters(path, summary.get("rows_in") or stats.get("num_rows", 0) + bad)


def _reason_text(group: dict) -> str:
    """A group's reasons as written (HTML): the most frequent texts with their counts, then how many more."""
    texts = group.get("texts") or []
    if len(texts) == 1 and not group.get("more_texts"):
        return _e(texts[0][0])
    shown = [f"{_e(text)} ({format_count(n)})" for text, n in texts]
    more = group.get("more_texts", 0)
    return "<br>".join(shown) + (f"<br><span class='note'>and {more:,} more like these</span>" if more else "")


def _dead_letter_section(output_dir: str, summary: dict, stats: dict, anomalies: list[dict]) -> str:
    entry = _dead_letter_entry(output_dir, stats, summary)
    head = "<section id='dead-letters'><h2>Dead letters</h2>"
    if not entry.get("bad"):
        bad = summary.get("bad_records", 0)
        text = "No bad records." if not bad else f"{bad:,} bad records; their dead letters are not beside the shards."
        return f"{head}<p class='note'>{text}</p></section>"
    records = entry.get("records", 0)
    note = (f"<p class='note'>{entry['bad']:,} dead letters in errors/dead_letters.jsonl, "
            f"{_share(entry['bad'], records)} of {records:,} rows read; grouped by kind of reason, the reasons "
            "as written, a few records of each.</p>")
    flagged = [str(a.get("detail", "")) for a in anomalies if a.get("kind") == "dead_letters"]
    rows = []
    for group in entry.get("reasons", []):
        texts = group.get("texts") or [[group.get("pattern", ""), group.get("count", 0)]]
        first = " ".join(str(texts[0][0]).split())
        mark = any(first in detail for detail in flagged)
        examples = "<br>".join(
            f"<code>{_e(x.get('source', ''))}:{_e(x.get('line', ''))}</code> {_e(x.get('reason', ''))}: "
            f"<code>{_e(str(x.get('raw', ''))[:_RAW_SHOWN])}</code>"
            for x in group.get("examples", [])[:_EXAMPLES_PER_REASON]
        )
        share = f"{group.get('share', 0):.2%}" + (" <span class='warn'>flagged</span>" if mark else "")
        rows.append(f"<tr><td>{_reason_text(group)}</td><td>{group.get('count', 0):,}</td><td>{share}</td>"
                    f"<td>{examples}</td></tr>")
    other = entry.get("other")
    if other:
        rows.append(f"<tr><td class='note'>{other['reasons']:,} other kinds of reason</td>"
                    f"<td>{other['count']:,}</td><td>{_share(other['count'], records)}</td><td></td></tr>")
    table = ("<table><tr><th>reason</th><th>records</th><th>of rows read</th><th>examples</th></tr>"
             + "".join(rows) + "</table>")
    return f"{head}{note}{table}</section>"


def write_report(output_dir: str, summary: dict, *, stats: dict | None = None, path: str | None = None) -> str:
    """Writes `output_dir/report.html` (or `path`); returns its path.

    Args:
      output_dir: a local ingest output directory (stats.json, schema.json and errors/ inside).
      summary: the run summary (rows in/out, bad records, seconds, ...), as `run_ingest` returns it.
      stats: the statistics to show instead of output_dir's stats.json (e.g. with another `validation`).
      path: where to write the page instead (`python -m pipelines.validate --report`).
    """
    from sparse_io.atomic import atomic_write_text

    stats = _load_json(os.path.join(output_dir, STATS_FILE)) if stats is None else stats
    schema = _load_json(os.path.join(output_dir, SCHEMA_FILE))
    specs = {f["name"]: f for f in schema.get("features", []) if isinstance(f, dict) and "name" in f}
    anomalies, _ = _anomalies(stats)
    baseline, unread = load_baseline(stats)
    body = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<meta http-equiv='Content-Security-Policy' content=\"{_POLICY}\">",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>sparseflow ingest report: {_e(summary.get('output', output_dir))}</title>",
        f"<style>{_STYLE}{TABLE_STYLE}</style></head><body>",
        "<h1>sparseflow ingest report</h1>",
        _flags_section(stats, unread),
        _run_section(summary, stats),
        features_table(stats, anomalies, specs),
        _label_section(stats),
        _sparse_section(stats, specs, baseline),
        _dense_section(stats, specs, baseline),
        _dead_letter_section(output_dir, summary, stats, anomalies),
        f"<script>{TABLE_SCRIPT}</script>",
        "</body></html>",
    ]
    path = path or os.path.join(output_dir, REPORT_FILE)
    atomic_write_text(path, "\n".join(body))
    return path
