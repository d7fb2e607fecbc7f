"""Small inline SVG charts for report.html: no plotting library, nothing fetched, nothing to break.

Each function returns one `<svg>` element as text, sized in CSS pixels, with
a `<title>` so the chart has an accessible name.
"""

from __future__ import annotations

import html

__all__ = ["histogram_svg", "bars_svg", "share_bar_svg", "format_number"]

_BAR = "#3b6ea8"
_MUTED = "#c9d6e6"
_TEXT = "#333"


def format_number(value: float) -> str:
    """A short human form: 1234567 -> '1.23M', 0.000123 -> '0.000123', 12.5 -> '12.5'."""
    value = float(value)
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if magnitude >= limit:
            return f"{value / limit:.3g}{suffix}"
    if value.is_integer():
        return f"{int(value)}"
    return f"{value:.3g}"


def histogram_svg(edges: list[float], counts: list[int], title: str, *, width: int = 260, height: int = 110) -> str:
    """An SVG histogram: vertical bars, one per bin, the first and last edges labelled underneath.

    Bins are drawn equally wide, as a log-scale histogram needs.
    """
    top = max(counts) if counts and max(counts) > 0 else 1
    plot_height = height - 22
    bar_width = width / max(len(counts), 1)
    bars = []
    for i, count in enumerate(counts):
        h = plot_height * count / top
        low, high = format_number(edges[i]), format_number(edges[i + 1])
        bars.append(
            f"<rect x='{i * bar_width + 0.5:.1f}' y='{plot_height - h:.1f}' width='{max(bar_width - 1, 1):.1f}' "
            f"height='{h:.1f}' fill='{_BAR}'><title>[{low}, {high}): {count}</title></rect>"
        )
    labels = (
        f"<text x='0' y='{height - 6}' font-size='10' fill='{_TEXT}'>{html.escape(format_number(edges[0]))}</text>"
        f"<text x='{width}' y='{height - 6}' font-size='10' fill='{_TEXT}' text-anchor='end'>"
        f"{html.escape(format_number(edges[-1]))}</text>"
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
