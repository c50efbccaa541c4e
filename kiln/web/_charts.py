"""Charts drawn on the server as inline SVG: no script, no library, nothing the CSP
has to allow. Each chart carries its numbers (``data-values`` and a ``<title>`` per
point), so a reader, a screen reader and a test all see what it shows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from markupsafe import Markup

from kiln._model._printable import printable

WIDTH, HEIGHT = 600, 120
PAD = 4


def _top(values: Sequence[float]) -> float:
    return max(max(values, default=0), 1)


def _count(v: float) -> str:
    return f"{v:,}"


def bars(name: str, values: Sequence[float], labels: Sequence[str], css: str,
         fmt: Callable[[float], str] = _count) -> Markup:
    """A bar per value, oldest on the left; ``labels`` name each bar's time, ``fmt``
    writes a value (counts by default; a duration for the timings)."""
    top = _top(values)
    step = (WIDTH - 2 * PAD) / max(len(values), 1)
    parts = []
    for i, (v, label) in enumerate(zip(values, labels, strict=True)):
        h = (HEIGHT - 2 * PAD) * v / top
        parts.append(
            f'<rect x="{PAD + i * step:.1f}" y="{HEIGHT - PAD - h:.1f}" '
            f'width="{max(step - 1, 1):.1f}" height="{h:.1f}">'
            f"<title>{escape(label)}: {escape(fmt(v))} {escape(printable(name))}</title></rect>"
        )
    return _svg(name, css, ",".join(str(v) for v in values),
                f"peak {fmt(max(values, default=0))}", "".join(parts))


def line(name: str, points: Sequence[tuple[float, int]], start: float, end: float,
         css: str) -> Markup:
    """A line through (unix seconds, value) points between ``start`` and ``end``."""
    top = _top([v for _t, v in points])
    span = max(end - start, 1.0)

    def xy(t: float, v: int) -> str:
        x = PAD + (WIDTH - 2 * PAD) * (t - start) / span
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * v / top
        return f"{x:.1f},{y:.1f}"

    path = " ".join(xy(t, v) for t, v in points)
    dots = "".join(
        f'<circle cx="{xy(t, v).split(",")[0]}" cy="{xy(t, v).split(",")[1]}" r="2">'
        f"<title>{v:,} {escape(printable(name))}</title></circle>" for t, v in points[-60:]
    )
    body = (f'<polyline fill="none" points="{path}"/>' if len(points) > 1 else "") + dots
    return _svg(name, css, ",".join(str(v) for _t, v in points),
                f"peak {max((v for _t, v in points), default=0):,}", body)


def _svg(name: str, css: str, values: str, peak: str, body: str) -> Markup:
    return Markup(
        f'<svg class="chart {escape(css)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'preserveAspectRatio="none" role="img" '
        f'aria-label="{escape(printable(name))}, {escape(peak)}" '
        f'data-values="{escape(values)}"><line class="axis" x1="0" y1="{HEIGHT - PAD}" '
        f'x2="{WIDTH}" y2="{HEIGHT - PAD}"/>{body}</svg>'
    )
