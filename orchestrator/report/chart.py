"""The report's inline SVG chart: speedup per shape, in table order, noise band shaded, groups separated."""

from __future__ import annotations

import html as _html
import math

from markupsafe import Markup

from ..outcome.compare import Comparison
from ..outcome.verdict import MIN_GAIN_PCT, SINGLE_SAMPLE_PCT
from .fmt import fmt_key, fmt_pct, is_missing, key_label


def svg_chart(cmp: Comparison) -> Markup | None:
    rows = cmp.rows
    n = len(rows)
    if n == 0 or rows["speedup_pct"].notna().sum() == 0:
        return None
    sps = [None if is_missing(v) else float(v) for v in rows["speedup_pct"]]
    vals = [v for v in sps if v is not None]
    band = cmp.noise_pct
    if cmp.judged:  # the practical bar the verdicts used at the job's run count (issue 37: SE of the median diff.)
        pooled = cmp.summary.get("pooled_noise_pct")
        runs = cmp.summary.get("samples") or {}
        nb, na = max(1, runs.get("before") or 1), max(1, runs.get("after") or 1)
        k = cmp.summary.get("verdict_k") or 3.75
        band = (round(max(MIN_GAIN_PCT, k * pooled * math.sqrt(1.0 / nb + 1.0 / na)), 2) if pooled is not None
                else SINGLE_SAMPLE_PCT)
    lo = min(min(vals), -band, 0.0)
    hi = max(max(vals), band, 0.0)
    span = hi - lo or 1.0
    lo -= span * 0.05
    hi += span * 0.05
    bar = max(3.0, min(18.0, 900.0 / n))
    left, right, top, bottom = 58.0, 10.0, 22.0, 8.0
    ph = 200.0
    width = left + bar * n + right
    height = top + ph + bottom

    def y(v: float) -> float:
        return top + (hi - v) / (hi - lo) * ph

    e = _html.escape
    parts = [
        f'<svg class="chart" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        f'aria-label="speedup per shape, percent, positive is faster">',
        f'<rect class="band" x="{left:.1f}" y="{y(band):.1f}" width="{bar * n:.1f}" '
        f'height="{max(0.5, y(-band) - y(band)):.1f}"><title>{"verdict bar" if cmp.judged else "noise band"} '
        f'±{band:g}%</title></rect>',
    ]
    # y ticks
    step = _nice_step((hi - lo) / 5)
    decimals = 0 if step >= 1 else 1 if step >= 0.1 else 2
    for i in range(math.ceil(lo / step), math.floor(hi / step) + 1):
        t = i * step
        yy = y(t)
        label = "0%" if i == 0 else f"{t:+.{decimals}f}%"
        parts.append(f'<line class="grid" x1="{left:.1f}" y1="{yy:.1f}" x2="{left + bar * n:.1f}" '
                     f'y2="{yy:.1f}"/>')
        parts.append(f'<text class="tick" x="{left - 4:.1f}" y="{yy + 3.5:.1f}" '
                     f'text-anchor="end">{label}</text>')
    # group separators and labels
    gcols = list(cmp.group_columns)
    prev = None
    start = 0
    bounds: list[tuple[int, int, tuple]] = []
    for i in range(n):
        g = tuple(fmt_key(rows.iloc[i][c]) for c in gcols)
        if g != prev and i:
            bounds.append((start, i, prev))
            start = i
        prev = g
    bounds.append((start, n, prev))
    for s, end, g in bounds:
        x0 = left + s * bar
        if s:
            parts.append(f'<line class="sep" x1="{x0:.1f}" y1="{top - 14:.1f}" x2="{x0:.1f}" '
                         f'y2="{top + ph:.1f}"/>')
        label = " ".join(f"{c}={v}" for c, v in zip(gcols, g or ())) if gcols else ""
        if label and (end - s) * bar >= len(label) * 5.6:
            parts.append(f'<text class="glabel" x="{x0 + 3:.1f}" y="{top - 8:.1f}">{e(label)}</text>')
    # bars
    zero = y(0.0)
    keycols = list(cmp.key_columns)
    for i, v in enumerate(sps):
        x0 = left + i * bar
        rec = rows.iloc[i]
        label = key_label({c: rec[c] for c in keycols})
        if v is None:
            parts.append(f'<text class="miss" x="{x0 + bar / 2:.1f}" y="{zero + 4:.1f}" '
                         f'text-anchor="middle">×<title>{e(label)}: missing</title></text>')
            continue
        y0, y1 = sorted((y(v), zero))
        cls = str(rec["status"])
        parts.append(
            f'<rect class="{e(cls)}" x="{x0 + 0.5:.1f}" y="{y0:.1f}" width="{max(1.0, bar - 1):.1f}" '
            f'height="{max(0.5, y1 - y0):.1f}"><title>{e(label)}: {fmt_pct(v)}</title></rect>'
        )
    parts.append(f'<line class="zero" x1="{left:.1f}" y1="{zero:.1f}" x2="{left + bar * n:.1f}" '
                 f'y2="{zero:.1f}"/>')
    parts.append("</svg>")
    return Markup("\n".join(parts))


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    p = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * p:
            return m * p
    return 10 * p
