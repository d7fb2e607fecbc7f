"""report.html's table of every feature: sortable by a click on a header, filtered by a text box, rows linking to cards.

The table is plain HTML that reads without script; the inline script (no
library, nothing fetched) adds the sorting and the filter. Each cell carries
its sort key in `data-v` (a number where the column is numeric), so sorting
compares values rather than their formatted text.

Example:
  >>> card_id("C1"), card_id("user id/2")
  ('f-C1', 'f-user_20id_2f2')
"""

from __future__ import annotations

import html
import re

__all__ = ["card_id", "features_table", "natural_key", "TABLE_SCRIPT", "TABLE_STYLE"]

TABLE_STYLE = """
#features-filter{font-size:.95em;padding:3px 6px;margin:.3em 0 .5em;width:22em}
#features-table th{cursor:pointer;user-select:none;background:#f0f3f7}
#features-table th[aria-sort=ascending]::after{content:' \\25B2'}
#features-table th[aria-sort=descending]::after{content:' \\25BC'}
#features-table td.num{text-align:right;font-variant-numeric:tabular-nums}
#features-table tr.flagged td:first-child{border-left:3px solid #a33}
"""

# Sorting: a click on a header orders the rows by that column, a second click reverses it; numeric cells (data-v
# parses as a number) compare as numbers, others as text in `natural_key`'s order (C2 before C10). The filter hides rows
# whose text does not contain what is typed (any case).
TABLE_SCRIPT = r"""
(function () {
  const table = document.getElementById('features-table');
  if (!table) return;
  const body = table.tBodies[0];
  const heads = [...table.tHead.rows[0].cells];
  const key = (row, i) => row.cells[i].dataset.v ?? row.cells[i].textContent;
  // natural_key's order: text parts by code point, digit runs by value (C2 before C10).
  const parts = t => t.split(/(\d+)/).map((p, j) => j % 2 ? Number(p) : p);
  const natural = (x, y) => {
    const a = parts(x), b = parts(y);
    for (let j = 0; j < Math.min(a.length, b.length); j++) {
      if (a[j] !== b[j]) return a[j] < b[j] ? -1 : 1;
    }
    return a.length - b.length;
  };
  heads.forEach((th, i) => th.addEventListener('click', () => {
    const down = th.getAttribute('aria-sort') === 'ascending';
    heads.forEach(h => h.removeAttribute('aria-sort'));
    th.setAttribute('aria-sort', down ? 'descending' : 'ascending');
    const rows = [...body.rows];
    const numeric = rows.every(r => key(r, i) === '' || !isNaN(Number(key(r, i))));
    rows.sort((a, b) => {
      const x = key(a, i), y = key(b, i);
      const c = numeric ? (x === '' ? -Infinity : Number(x)) - (y === '' ? -Infinity : Number(y))
                        : natural(x, y);
      return down ? -c : c;
    });
    rows.forEach(r => body.appendChild(r));
  }));
  const filter = document.getElementById('features-filter');
  const count = document.getElementById('features-shown');
  const apply = () => {
    const q = filter.value.trim().toLowerCase();
    let shown = 0;
    for (const r of body.rows) {
      r.hidden = q !== '' && !r.textContent.toLowerCase().includes(q);
      if (!r.hidden) shown += 1;
    }
    count.textContent = shown + ' of ' + body.rows.length + ' features shown';
  };
  filter.addEventListener('input', apply);
  apply();
})();
"""


def natural_key(name: str) -> list:
    """Sort key that orders embedded numbers by value: C2 before C10, I9 before I10 (as the page's script sorts)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def card_id(name: str) -> str:
    """The id of a feature's card: `f-` and the name with any character but [A-Za-z0-9-] written `_hex`."""
    return "f-" + re.sub(r"[^A-Za-z0-9-]", lambda m: f"_{ord(m.group()):x}", name)


def _e(value) -> str:
    return html.escape(str(value))


def _cell(text: str, value=None, numeric: bool = False) -> str:
    v = "" if value is None else f" data-v='{_e(value)}'"
    return f"<td{v}{' class=num' if numeric else ''}>{text}</td>"


def _row(name: str, kind: str, missing: float | None, distinct, typical: str, flags: list[str]) -> str:
    from pipelines.report_svg import format_count

    cells = [
        f"<td data-v='{_e(name)}'><a href='#{card_id(name)}'><code>{_e(name)}</code></a></td>",
        _cell(kind),
        _cell("-" if missing is None else f"{missing:.1%}", "" if missing is None else f"{missing:.6g}", True),
        _cell("-" if distinct is None else format_count(distinct), "" if distinct is None else int(distinct), True),
        _cell(typical),
        _cell(f"<span class='warn'>{_e(', '.join(flags))}</span>" if flags else "", len(flags)),
    ]
    return f"<tr{' class=flagged' if flags else ''}>{''.join(cells)}</tr>"


def _sparse_row(name: str, s: dict, flags: list[str]) -> str:
    rows = s.get("rows", 0)
    raw = s.get("raw_values") or {}
    top = raw.get("top") or []
    typical = f"<code>{_e(str(top[0][0])[:40])}</code> ({top[0][2]:.1%})" if top else ""
    distinct = raw.get("distinct", s.get("distinct_ids"))
    return _row(name, "sparse", s.get("empty_rows", 0) / rows if rows else None, distinct, typical, flags)


def _dense_row(name: str, s: dict, flags: list[str], kind: str = "dense", time_unit: str | None = None) -> str:
    from pipelines.report_svg import TIME_UNIT_SECONDS, format_number, format_timestamp

    rows = s.get("rows", 0)
    typical = ""
    if "quantiles" in s and time_unit in TIME_UNIT_SECONDS:
        typical = f"{_e(format_timestamp(s['min'], time_unit))} &hellip; {_e(format_timestamp(s['max'], time_unit))}"
    elif "mean" in s and s.get("value_counts") and all(v in (0, 1) for v, _ in s["value_counts"]):
        typical = f"rate {s['mean']:.1%}"  # a click label
    elif "quantiles" in s:
        typical = f"median {format_number(s['quantiles']['p50'])}, mean {format_number(s['mean'])}"
    elif "mean" in s:
        typical = f"mean {format_number(s['mean'])}"
    distinct = len(s["value_counts"]) if s.get("value_counts") is not None else None
    return _row(name, kind, s.get("missing", 0) / rows if rows else None, distinct, typical, flags)


def features_table(stats: dict, anomalies: list[dict], specs: dict | None = None) -> str:
    """The `features` section: one row per sparse feature, dense feature and the label, naturally sorted.

    Columns: feature (a link to its card), kind, missing (share of rows), distinct (raw values of a sparse
    feature, values of a column with value counts), typical (the top raw value, or median and mean), flags
    (the anomaly kinds recorded for it). `specs`: schema.json's features by name (a `time_unit` column's
    typical figures are dates).
    """
    flags: dict[str, list[str]] = {}
    for a in anomalies:
        flags.setdefault(str(a["feature"]), []).append(str(a["kind"]))
    rows = []
    for name, s in (stats.get("features") or {}).items():
        rows.append((name, _sparse_row(name, s, flags.get(name, []))))
    for name, s in (stats.get("dense") or {}).items():
        unit = (specs or {}).get(name, {}).get("time_unit")
        rows.append((name, _dense_row(name, s, flags.get(name, []), time_unit=unit)))
    label = stats.get("label")
    if label and label.get("name"):
        rows.append((label["name"], _dense_row(label["name"], label, flags.get(label["name"], []), "label")))
    head = f"<section id='features'><h2>Features ({len(rows)})</h2>"
    if not rows:
        return f"{head}<p class='note'>None.</p></section>"
    heads = "".join(f"<th>{h}</th>" for h in ("feature", "kind", "missing", "distinct", "typical", "flags"))
    body = "".join(row for _, row in sorted(rows, key=lambda r: natural_key(r[0])))
    return (f"{head}<p class='note'>Click a header to sort, a name to go to its card.</p>"
            "<input id='features-filter' type='search' placeholder='filter features' aria-label='filter features'> "
            "<span id='features-shown' class='note'></span>"
            f"<table id='features-table'><thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table></section>")
