"""Small-multiple SVG charts: per (N, K) pair or MoE config, before and after against M (log axis),
with the band a verdict must clear around the before line, and the verdicts at a glance (after points
coloured by verdict). Inline SVG, no script; one ``<svg class="mchart" data-group="...">`` per group.
"""

from __future__ import annotations

import html as _html
import math
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from ..outcome.compare import Comparison
from .fmt import fmt_key, fmt_value, is_missing

W, H = 330.0, 210.0
LEFT, RIGHT, TOP, BOTTOM = 46.0, 18.0, 34.0, 30.0
MAX_GROUPS = 60


def _num(x: Any) -> float | None:
    return None if is_missing(x) else float(x)


def _ticks_log2(lo: float, hi: float) -> list[int]:
    a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = max(1, math.ceil((b - a) / 5))
    return [2 ** e for e in range(a, b + 1, step) if lo <= 2 ** e <= hi] or [int(lo)]


def _ticks_y(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0 ** e for e in range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)) + 1)] or [lo, hi]
    raw = (hi - lo) / 4 or 1.0
    p = 10 ** math.floor(math.log10(raw))
    step = next(m * p for m in (1, 2, 5, 10) if raw <= m * p)
    return [i * step for i in range(math.ceil(lo / step), math.floor(hi / step) + 1)]


def _fmt_tick(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}" if v >= 1 else f"{v:.2g}"


def group_chart(label: str, points: list[dict[str, Any]], metric: str) -> Markup | None:
    """``points``: ``{"m", "before", "after", "band_pct", "verdict", "key"}`` sorted by m; None when
    fewer than one point has both values."""
    pts = [p for p in points if p["m"] and p["m"] > 0 and (p["before"] or p["after"])]
    if not pts:
        return None
    e = _html.escape
    xs = [float(p["m"]) for p in pts]
    x_lo, x_hi = min(xs), max(xs)
    if x_lo == x_hi:
        x_lo, x_hi = x_lo / 2, x_hi * 2
    vals = [v for p in pts for v in (p["before"], p["after"]) if v]
    vals += [p["before"] * (1 + s * p["band_pct"] / 100) for p in pts if p["before"] for s in (1, -1)]
    vals = [v for v in vals if v > 0]
    y_lo, y_hi = min(vals), max(vals)
    log_y = y_hi / y_lo > 20
    if log_y:
        y_lo, y_hi = y_lo / 1.25, y_hi * 1.25
    else:
        pad = (y_hi - y_lo) * 0.08 or y_hi * 0.1 or 1.0
        y_lo, y_hi = max(0.0, y_lo - pad), y_hi + pad
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(m: float) -> float:
        return LEFT + (math.log2(m) - math.log2(x_lo)) / (math.log2(x_hi) - math.log2(x_lo)) * pw

    def y(v: float) -> float:
        if log_y:
            f = (math.log10(max(v, y_lo)) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))
        else:
            f = (v - y_lo) / ((y_hi - y_lo) or 1.0)
        return TOP + (1 - f) * ph

    counts = {k: sum(1 for p in pts if p["verdict"] == k) for k in ("improved", "regressed")}
    others = len(pts) - counts["improved"] - counts["regressed"]
    out = [f'<svg class="mchart" data-group="{e(label)}" width="{W:.0f}" height="{H:.0f}" '
           f'viewBox="0 0 {W:.0f} {H:.0f}" role="img" aria-label="{e(metric)} before and after against M, {e(label)}">',
           f'<text class="mtitle" x="6" y="13">{e(label)}</text>',
           f'<text class="mcount" x="6" y="26">{counts["improved"]} improved, '
           f'{counts["regressed"]} regressed, {others} other</text>']
    for t in _ticks_y(y_lo, y_hi, log_y):
        out.append(f'<line class="grid" x1="{LEFT:.1f}" y1="{y(t):.1f}" x2="{W - RIGHT:.1f}" y2="{y(t):.1f}"/>'
                   f'<text class="tick" x="{LEFT - 4:.1f}" y="{y(t) + 3.5:.1f}" text-anchor="end">{_fmt_tick(t)}</text>')
    for t in _ticks_log2(x_lo, x_hi):
        out.append(f'<line class="grid" x1="{x(t):.1f}" y1="{TOP:.1f}" x2="{x(t):.1f}" y2="{TOP + ph:.1f}"/>'
                   f'<text class="tick" x="{x(t):.1f}" y="{TOP + ph + 12:.1f}" text-anchor="middle">{t}</text>')
    out.append(f'<text class="axis" x="{LEFT + pw / 2:.1f}" y="{H - 4:.1f}" text-anchor="middle">M (log)</text>')
    band = [p for p in pts if p["before"]]
    if band:
        upper = [f"{x(p['m']):.1f},{y(p['before'] * (1 + p['band_pct'] / 100)):.1f}" for p in band]
        lower = [f"{x(p['m']):.1f},{y(p['before'] * (1 - p['band_pct'] / 100)):.1f}" for p in reversed(band)]
        if len(band) == 1:   # a lone shape: a short box instead of a polygon of no width
            x0 = x(band[0]["m"])
            upper = [f"{x0 - 4:.1f},{upper[0].split(',')[1]}", f"{x0 + 4:.1f},{upper[0].split(',')[1]}"]
            lower = [f"{x0 + 4:.1f},{lower[0].split(',')[1]}", f"{x0 - 4:.1f},{lower[0].split(',')[1]}"]
        out.append(f'<polygon class="mband" points="{" ".join(upper + lower)}"><title>verdict bar around '
                   f'before</title></polygon>')
    for side in ("before", "after"):
        line = [f"{x(p['m']):.1f},{y(p[side]):.1f}" for p in pts if p[side]]
        if len(line) > 1:
            out.append(f'<polyline class="{side}" points="{" ".join(line)}"/>')
    for p in pts:
        tip = e(f"{p['key']}: before {fmt_value(p['before'])}, after {fmt_value(p['after'])} {metric}, {p['verdict']}")
        if p["before"]:
            out.append(f'<circle class="before" cx="{x(p["m"]):.1f}" cy="{y(p["before"]):.1f}" r="2"><title>{tip}'
                       '</title></circle>')
        if p["after"]:
            out.append(f'<circle class="after {e(p["verdict"])}" cx="{x(p["m"]):.1f}" cy="{y(p["after"]):.1f}" '
                       f'r="3"><title>{tip}</title></circle>')
    out.append("</svg>")
    return Markup("".join(out))


def group_charts(cmp: Comparison, common: Mapping[str, Any]) -> list[Markup]:
    """One chart per group (group columns = the key without its size column), in table order."""
    size = cmp.size_column
    if size is None or not len(cmp.rows):
        return []
    gcols = [c for c in cmp.group_columns if c not in common]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for _, r in cmp.rows.iterrows():
        g = tuple(fmt_key(r[c]) for c in gcols)
        band = _num(r.get("threshold_pct")) if cmp.judged else cmp.noise_pct
        verdict = str(r["verdict"]) if cmp.judged else str(r["status"])
        groups.setdefault(g, []).append({
            "m": _num(r[size]), "before": _num(r["before"]), "after": _num(r["after"]),
            "band_pct": band if band is not None else cmp.noise_pct, "verdict": verdict,
            "key": f"{size}={fmt_key(r[size])}"})
    charts = []
    for g, pts in list(groups.items())[:MAX_GROUPS]:
        label = " ".join(f"{c}={v}" for c, v in zip(gcols, g)) or "all shapes"
        svg = group_chart(label, sorted(pts, key=lambda p: p["m"] or 0), cmp.metric)
        if svg is not None:
            charts.append(svg)
    return charts
