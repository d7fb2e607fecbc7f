"""Small inline SVG charts for report.html: no plotting library, nothing fetched, nothing to break.

Each function returns one `<svg>` element as text, sized in CSS pixels, with
a `<title>` so the chart has an accessible name.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Callable

__all__ = ["histogram_svg", "bars_svg", "paired_bars_svg", "share_bar_svg", "format_number", "format_count",
           "format_rate", "format_timestamp", "format_duration", "TIME_UNIT_SECONDS"]

# Seconds per unit of a `time_unit` column (sparse_io.schema.TIME_UNITS).
TIME_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}

_BAR = "#3b6ea8"
_MUTED = "#c9d6e6"
_TEXT = "#333"


def format_number(value: float) -> str:
    """A short human form: 1234567 -> '1.23M', 0.000123 -> '0.000123', 12.5 -> '12.5'.

    Suffixes run up to P (1e15); anything larger is written in scientific
    notation rather than as a pile of suffixed digits.

    Example:
      >>> format_number(1_712_345_678_901), format_number(2.5e19), format_number(-42), format_number(2203.5)
      ('1.71T', '2.5e+19', '-42', '2204')
    """
    value = float(value)
    magnitude = abs(value)
    if magnitude >= 1e18:
        return f"{value:.3g}"
    for limit, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if magnitude >= limit:
            return f"{value / limit:.3g}{suffix}"
    if magnitude >= 999.5:  # where 3 significant digits would switch to scientific notation: whole numbers
        return f"{value:.0f}"
    if value.is_integer():
        return f"{int(value)}"
    return f"{value:.3g}"


def format_count(value: float) -> str:
    """A count with thousands separators: 1234567 -> '1,234,567' (rounded to a whole number)."""
    return f"{round(float(value)):,}"


def format_rate(value: float) -> str:
    """A share in [0, 1] as a percentage with one decimal: 0.2534 -> '25.3%'."""
    return f"{float(value):.1%}"


def format_timestamp(value: float, unit: str) -> str:
    """A timestamp in `unit` ("s", "ms" or "us" since the Unix epoch) as a UTC date and time.

    Midnight is written as the date alone. A value no calendar can hold falls
    back to `format_number`.

    Example:
      >>> format_timestamp(1_700_000_000_000, "ms"), format_timestamp(1_700_006_400, "s")
      ('2023-11-14 22:13:20', '2023-11-15')
    """
    if unit not in TIME_UNIT_SECONDS:
        raise ValueError(f"format_timestamp: unit must be one of {sorted(TIME_UNIT_SECONDS)}, got {unit!r}")
    try:
        moment = datetime.datetime.fromtimestamp(float(value) * TIME_UNIT_SECONDS[unit], tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return format_number(value)
    if (moment.hour, moment.minute, moment.second) == (0, 0, 0):
        return moment.strftime("%Y-%m-%d")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def format_duration(seconds: float) -> str:
    """A span of time in the largest unit that keeps it at least 1: 90 -> '1.5 min', 172800 -> '2 days'.

    Example:
      >>> format_duration(45), format_duration(5400), format_duration(3 * 86400), format_duration(0.25)
      ('45 s', '1.5 h', '3 days', '0.25 s')
    """
    seconds = float(seconds)
    for size, name in ((365.25 * 86400, "years"), (86400, "days"), (3600, "h"), (60, "min")):
        if abs(seconds) >= size:
            return f"{seconds / size:.3g} {name}"
    return f"{seconds:.3g} s"


def histogram_svg(edges: list[float], counts: list[int], title: str, *, width: int = 260, height: int = 110,
                  label: Callable[[float], str] = format_number) -> str:
    """An SVG histogram: vertical bars, one per bin, the first and last edges labelled underneath.

    Bins are drawn equally wide, as a log-scale histogram needs. `label`
    writes an edge (`format_number`; a date for a timestamp column).
    """
    top = max(counts) if counts and max(counts) > 0 else 1
    plot_height = height - 22
    bar_width = width / max(len(counts), 1)
    bars = []
    for i, count in enumerate(counts):
        h = plot_height * count / top
        low, high = label(edges[i]), label(edges[i + 1])
        bars.append(
            f"<rect x='{i * bar_width + 0.5:.1f}' y='{plot_height - h:.1f}' width='{max(bar_width - 1, 1):.1f}' "
            f"height='{h:.1f}' fill='{_BAR}'><title>[{html.escape(low)}, {html.escape(high)}): {count:,}</title></rect>"
        )
    labels = (
        f"<text x='0' y='{height - 6}' font-size='10' fill='{_TEXT}'>{html.escape(label(edges[0]))}</text>"
        f"<text x='{width}' y='{height - 6}' font-size='10' fill='{_TEXT}' text-anchor='end'>"
        f"{html.escape(label(edges[-1]))}</text>"
    )
    return (
        f"<svg class='chart' role='img' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"xmlns='http://www.w3.org/2000/svg'><title>{html.escape(title)}</title>"
        f"<line x1='0' y1='{plot_height + 0.5}' x2='{width}' y2='{plot_height + 0.5}' stroke='#999'/>"
        + "".join(bars) + labels + "</svg>"
    )


def bars_svg(items: list[tuple[str, float]], title: str, *, width: int = 260, row: int = 16) -> str:
    """Horizontal bars of shares in [0, 1], each labelled with its name and percentage."""
    height = row * max(len(items), 1)
    label_width = 92
    span = width - label_width - 46
    parts = []
    for i, (name, share) in enumerate(items):
        y = i * row
        w = max(span * share, 1.0)
        parts.append(
            f"<text x='{label_width - 4}' y='{y + row - 4}' font-size='11' fill='{_TEXT}' text-anchor='end' "
            f"font-family='monospace'>{html.escape(name[:12])}</text>"
            f"<rect x='{label_width}' y='{y + 2}' width='{w:.1f}' height='{row - 4}' fill='{_BAR}'/>"
            f"<text x='{label_width + w + 4:.1f}' y='{y + row - 4}' font-size='11' fill='{_TEXT}'>"
            f"{share:.1%}</text>"
        )
    return (
        f"<svg class='chart' role='img' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"xmlns='http://www.w3.org/2000/svg'><title>{html.escape(title)}</title>" + "".join(parts) + "</svg>"
    )


def share_bar_svg(share: float, title: str, *, width: int = 120, height: int = 10) -> str:
    """A thin bar filled to `share` (in [0, 1]) of its width: a missing share at a glance."""
    filled = width * min(max(share, 0.0), 1.0)
    return (
        f"<svg class='share' role='img' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"xmlns='http://www.w3.org/2000/svg'><title>{html.escape(title)}</title>"
        f"<rect width='{width}' height='{height}' fill='{_MUTED}'/>"
        f"<rect width='{filled:.1f}' height='{height}' fill='{_BAR}'/></svg>"
    )


def paired_bars_svg(items: list[tuple[str, float, float]], title: str, *, width: int = 300, row: int = 22) -> str:
    """Two horizontal bars per name, baseline (light) above current (dark), shares in [0, 1] labelled.

    `items` are `(name, baseline share, current share)`; a share of None is a value the list does not hold
    (drawn as no bar, labelled "-").
    """
    height = row * max(len(items), 1)
    label_width = 92
    span = width - label_width - 46
    parts = []
    for i, (name, base, current) in enumerate(items):
        y = i * row
        parts.append(f"<text x='{label_width - 4}' y='{y + row / 2 + 4:.1f}' font-size='11' fill='{_TEXT}' "
                     f"text-anchor='end' font-family='monospace'>{html.escape(name[:12])}</text>")
        for j, (share, fill) in enumerate(((base, _MUTED), (current, _BAR))):
            top = y + 2 + j * (row - 4) / 2
            bar = (row - 4) / 2 - 1
            w = 0.0 if share is None else max(span * share, 1.0)
            text = "-" if share is None else f"{share:.1%}"
            parts.append(f"<rect x='{label_width}' y='{top:.1f}' width='{w:.1f}' height='{bar:.1f}' fill='{fill}'/>"
                         f"<text x='{label_width + w + 4:.1f}' y='{top + bar:.1f}' font-size='9' fill='{_TEXT}'>"
                         f"{text}</text>")
    return (
        f"<svg class='chart' role='img' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"xmlns='http://www.w3.org/2000/svg'><title>{html.escape(title)}</title>" + "".join(parts) + "</svg>"
    )
