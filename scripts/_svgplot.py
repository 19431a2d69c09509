"""A line chart as a standalone SVG file, for the figures of ``scripts/bench_ssh.py``.

Small on purpose (no plotting library in the bench's dependencies): a logarithmic x axis (the
benches grow by factors: 1, 16, 64, 256 commands; 10k, 100k, 1M files), a linear y axis from 0,
one polyline with markers per series, and a legend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

__all__ = ["line_chart"]

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 40, 60  # margins around the plot area
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd")


def _ticks(top: float) -> list[float]:
    """About five round y ticks from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / 5
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
    return [i * step for i in range(math.ceil(top / step) + 1)]


def line_chart(
    path: Path,
    title: str,
    x_label: str,
    y_label: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
) -> None:
    """Write ``series`` (name -> points ``(x, y)``, x > 0, on a log scale) to ``path``."""
    xs = [x for points in series.values() for x, _ in points]
    ys = [y for points in series.values() for _, y in points if math.isfinite(y)]
    if not xs or not ys:
        raise ValueError("line_chart: no points to plot")
    lo, hi = math.log10(min(xs)), math.log10(max(xs))
    span = hi - lo or 1.0
    y_ticks = _ticks(max(ys))
    y_top = y_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (math.log10(x) - lo) / span * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - y / y_top * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    for y in y_ticks:
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            'stroke="#ddd"/>'
        )
        out.append(f'<text x="{LEFT - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    for x in sorted(set(xs)):
        label = f"{int(x):,}" if x == int(x) else f"{x:g}"
        out.append(
            f'<text x="{px(x):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{label}</text>'
        )
    out.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>'
    )
    out.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 18}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    out.append(
        f'<text transform="translate(18 {TOP + plot_h / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    for i, (name, points) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        shown = [(x, y) for x, y in points if math.isfinite(y)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in shown)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in shown:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        legend_y = TOP + 10 + 20 * i
        out.append(
            f'<line x1="{LEFT + plot_w + 15}" x2="{LEFT + plot_w + 35}" y1="{legend_y}" '
            f'y2="{legend_y}" stroke="{colour}" stroke-width="2"/>'
        )
        out.append(f'<text x="{LEFT + plot_w + 40}" y="{legend_y + 4}">{escape(name)}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
