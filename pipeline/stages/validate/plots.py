"""The report's charts as SVG text, written here in plain Python: a horizontal bar chart and a dot chart
of two series. No plotting library: the nightly image carries none, the report builds in milliseconds,
and the charts diff as text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

ROW = 16  # px per bar (horizontal chart) or per label column (dot chart)
LABEL_W, PLOT_W, PAD = 260, 560, 30
GREEN, GRAY, BLUE, ORANGE = "#2ca02c", "#8c8c8c", "#1f77b4", "#ff7f0e"
SERIES = (BLUE, ORANGE, GREEN)  # the dot chart's colours, series by series


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'
    )
    caption = f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>'
    return "\n".join([head, caption, *body, "</svg>\n"])


def ticks(low: float, high: float, count: int = 5) -> tuple[list[float], str]:
    """Ticks at a round step (1, 2 or 5 x 10^k, the nearest to ``count`` intervals) inside ``[low, high]``, and the
    format that writes them with as many decimals as the step needs (``0.95``, ``1.00``; ``0``, ``5``, ``10``)."""
    raw = (high - low) / count if high > low else 1.0
    power = 10 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda s: abs(math.log(s / raw)))
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    first = math.ceil(low / step - 1e-9)
    values = [round(i * step, decimals + 2) for i in range(first, math.floor(high / step + 1e-9) + 1)]
    return values, f"{{:.{decimals}f}}"


def label_width(labels: Sequence[str]) -> int:
    """Room for the longest label at the charts' 11 px font (about 6.6 px a character), never less than before."""
    return max(LABEL_W, int(6.6 * max((len(label) for label in labels), default=0)) + 12)


def bars(
    labels: Sequence[str],
    values: Sequence[float],
    colors: Sequence[str],
    title: str,
    xlabel: str,
    xlim: tuple[float, float],
    reference: float | None = None,
) -> str:
    """Horizontal bars, the first at the bottom, over ``xlim``; a vertical line at ``reference``."""
    low, high = xlim
    top, height = 30, ROW * len(labels)
    x0 = label_width(labels)

    def x(v: float) -> float:
        return x0 + PLOT_W * (min(max(v, low), high) - low) / (high - low)

    body = [f'<rect x="{x0}" y="{top}" width="{PLOT_W}" height="{height}" fill="none" stroke="#444"/>']
    for i, (label, value, color) in enumerate(zip(labels, values, colors, strict=True)):
        y = top + height - ROW * (i + 1)
        body.append(
            f'<rect x="{x0}" y="{y + 2}" width="{x(value) - x0:.1f}" height="{ROW - 4}" fill="{color}">'
            f"<title>{escape(label)}: {value:.4g}</title></rect>"
        )
        body.append(f'<text x="{x0 - 4}" y="{y + ROW - 4}" text-anchor="end">{escape(label)}</text>')
    if reference is not None and low <= reference <= high:
        body.append(
            f'<line x1="{x(reference):.1f}" y1="{top}" x2="{x(reference):.1f}" y2="{top + height}" stroke="#000"/>'
        )
        body.append(f'<text x="{x(reference):.1f}" y="{top - 3}" text-anchor="middle">x{reference:.2f} baseline</text>')
    values, form = ticks(low, high)
    for tick in values:
        body.append(f'<text x="{x(tick):.1f}" y="{top + height + 14}" text-anchor="middle">{form.format(tick)}</text>')
    body.append(f'<text x="{x0 + PLOT_W / 2}" y="{top + height + 30}" text-anchor="middle">{escape(xlabel)}</text>')
    return _svg(x0 + PLOT_W + PAD, top + height + 40, title, body)


def dots(
    labels: Sequence[str],
    series: dict[str, Sequence[float | None]],
    title: str,
    ylabel: str,
    ylim: tuple[float, float],
    reference: float | None = None,
    markers: Sequence[tuple[int, str]] = (),
) -> str:
    """One column per label, a dot per series (colours in order, named in a legend; a None is no dot), over
    ``ylim``; ``reference``: a dashed line at that value (x1.00); ``markers``: a dashed line before column ``i``
    with its text (a library upgrade)."""
    low, high = ylim
    top, plot_h, x0 = 30, 240, 60
    width = max(PLOT_W, ROW * len(labels))

    def y(v: float) -> float:
        return top + plot_h - plot_h * (min(max(v, low), high) - low) / (high - low)

    body = [f'<rect x="{x0}" y="{top}" width="{width}" height="{plot_h}" fill="none" stroke="#444"/>']
    values, form = ticks(low, high)
    for tick in values:
        body.append(f'<text x="{x0 - 4}" y="{y(tick) + 4:.1f}" text-anchor="end">{form.format(tick)}</text>')
    body.append(
        f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">{escape(ylabel)}</text>'
    )
    step = width / max(len(labels), 1)
    if reference is not None and low <= reference <= high:
        body.append(
            f'<line x1="{x0}" x2="{x0 + width}" y1="{y(reference):.1f}" y2="{y(reference):.1f}" stroke="#444" '
            'stroke-dasharray="4 3"/>'
        )
    for i, text in markers:
        x = x0 + step * i
        body.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="{GRAY}" stroke-dasharray="3 3"/>'
        )
        body.append(f'<text x="{x + 3:.1f}" y="{top + plot_h - 6}" font-size="9" fill="{GRAY}">{escape(text)}</text>')
    for (name, values), color in zip(series.items(), SERIES, strict=False):
        for i, value in enumerate(values):
            if value is None or value != value:  # no figure that night (NaN from a table)
                continue
            cx = x0 + step * (i + 0.5)
            body.append(
                f'<circle cx="{cx:.1f}" cy="{y(value):.1f}" r="3.5" fill="{color}">'
                f"<title>{escape(labels[i])}, {escape(name)}: {value:.3f}</title></circle>"
            )
    for i, label in enumerate(labels):
        cx, cy = x0 + step * (i + 0.5), top + plot_h + 8
        body.append(f'<text transform="translate({cx:.1f} {cy}) rotate(90)" font-size="9">{escape(label)}</text>')
    for j, (name, color) in enumerate(zip(series, SERIES, strict=False)):
        body.append(f'<circle cx="{x0 + 12}" cy="{top + 12 + 14 * j}" r="4" fill="{color}"/>')
        body.append(f'<text x="{x0 + 20}" y="{top + 16 + 14 * j}">{escape(name)}</text>')
    return _svg(x0 + width + PAD, top + plot_h + 8 + 7 * max((len(s) for s in labels), default=0), title, body)
