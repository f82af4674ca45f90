"""Render the tuning report (markdown + self-contained HTML) from a plain context dict; pure, no I/O.

``render_report(ctx) -> (markdown, html)``. Every key is optional: a missing section renders as
"not recorded" so a failed or partial job still gets a report. The HTML has inline CSS and an
inline SVG chart only: no script, no external asset, readable offline.

Context keys (values are plain JSON-able data unless said otherwise)::

    job:          {"id", "variant", "node", "container", "started", "finished", "state"}
                  started/finished: ISO text, datetime or epoch seconds; duration is derived.
    environment:  {"aiter_version", "pip_name", "install_mode", "aiter_root", "gfx", "cu_num",
                   "gpu_count", "free_gpus": [int], "profile"}   (profile = AiterProfile name)
    shapes:       {"source": str, "list": [shape dict]}  (a bare list of shape dicts is accepted)
    bench:        {"before_command": str|[argv], "after_command": str|[argv], "env": {name: value}}
    tuning:       {"command": str|[argv], "flags": {"--mp": 8, "--batch": 100, "--timeout": 600,
                   "--libtype": "both", ...}, "env": {"HIP_VISIBLE_DEVICES": "0,1,..."},
                   "duration_s": float, "rc": int, "rows_written": int,
                   "no_kernel": [shape dict], "partial": bool}
    comparison:   orchestrator.steps.compare.Comparison, or its ``to_dict()``, or None
    warnings:     [str]   shown first, e.g. "MoE bypass on this AITER version: tuned rows for
                  token*topk<=128 are ignored at runtime"
    notes:        [str]   e.g. "benchmark script choices patched: ran a patched copy"
    shape_notes:  [{"key": {col: value}, "note": str}]  per-shape remarks put in the table's note
                  column (e.g. MoE bypass); a key matches a row on the columns they share
    logs:         {name: {"node": path, "local": path}} | {name: path} | [{"name", "node", "local"}]
    tuned_csv:    {"node_path", "backup_path", "rows_added", "local_path"}
    generated_at: str|datetime (default: now, UTC);  tool_version: str

Also accepted (spellings already in use): ``environment.version`` for ``aiter_version``;
``shape_sources: [str]`` for ``shapes.source``; ``tuning.rows_before/rows_after`` (rows written =
after - before) and ``tuning.started``; ``tuning.flags`` parsed from ``tuning.command`` when
absent; ``tuned_csv.node/backup/local``; ``logs: {"node": {name: path}, "local": dir}``;
``comparison`` as comparison.csv records ``{"rows": [...], "summary": {...}}`` or a path to
comparison.csv (recomputed with ``Comparison.from_records``).

Derived warnings are appended: partial tuning, non-zero tuner rc, shapes without a kernel,
shapes missing from a benchmark, regressions, run-to-run spread wider than the noise band.
"""

from __future__ import annotations

import datetime as _dt
import html as _html
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from .report_outcome import outcome_view, verdict_method
from .verdict import MIN_GAIN_PCT, NOISE_K, SINGLE_SAMPLE_PCT
from .steps.compare import Comparison, norm_key_value

__all__ = ["render_report", "write_report", "build_view"]

TEMPLATES_DIR = Path(__file__).with_name("templates")
DASH = "—"

_JOB_FIELDS = (("id", "job id"), ("variant", "variant"), ("node", "node"), ("container", "container"),
               ("state", "state"), ("started", "started"), ("finished", "finished"))
_ENV_FIELDS = (("aiter_version", "AITER version"), ("pip_name", "pip name"),
               ("install_mode", "install mode"), ("aiter_root", "AITER root"), ("gfx", "gfx"),
               ("cu_num", "cu_num"), ("gpu_count", "GPUs"), ("free_gpus", "free GPUs"),
               ("profile", "version profile"), ("probed", "probed on node"),
               ("assumed", "assumed"))
_CSV_FIELDS = (("node_path", "tuned CSV on node"), ("backup_path", "backup of the previous CSV"),
               ("rows_added", "rows added"), ("local_path", "local copy"))


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def _isnum(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _missing(x: Any) -> bool:
    if x is None:
        return True
    if isinstance(x, float) and math.isnan(x):
        return True
    try:
        import pandas as pd

        return bool(pd.isna(x)) if not isinstance(x, (str, list, tuple, dict)) else False
    except (TypeError, ValueError):
        return False


def column_decimals(values: Iterable[Any]) -> int | None:
    """One number of decimals for a column: 4 significant digits for its smallest value (1..4)."""
    small = [abs(float(v)) for v in values if not _missing(v) and float(v) != 0]
    if not small:
        return None
    return max(1, min(4, 3 - math.floor(math.log10(min(small)))))


def fmt_value(x: Any, decimals: int | None = None) -> str:
    """Benchmark value, fixed point, no thousands separator; ``decimals`` None = >= 4 significant digits."""
    if _missing(x):
        return DASH
    x = float(x)
    if decimals is not None:
        return f"{x:.{decimals}f}"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:.1f}"
    if a >= 100:
        return f"{x:.2f}"
    if a >= 1:
        return f"{x:.3f}"
    decimals = min(8, 3 - math.floor(math.log10(a)))
    return f"{x:.{decimals}f}"


def fmt_pct(x: Any, signed: bool = True) -> str:
    if _missing(x):
        return DASH
    x = float(x)
    if x == 0:
        return "0.00%"
    return f"{x:+.2f}%" if signed else f"{x:.2f}%"


def fmt_int(x: Any) -> str:
    if _missing(x):
        return DASH
    return str(int(x))


def fmt_key(x: Any) -> str:
    if _missing(x):
        return DASH
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def fmt_scalar(x: Any) -> str:
    if _missing(x) or x == "":
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (list, tuple, set, frozenset)):
        return ", ".join(fmt_scalar(v) for v in x) if x else "none"
    if isinstance(x, Mapping):
        return ", ".join(f"{k}={fmt_scalar(v)}" for k, v in x.items()) if x else "none"
    if isinstance(x, _dt.datetime):
        return _fmt_time(x)
    return str(x)


def fmt_duration(seconds: Any) -> str:
    if _missing(seconds):
        return DASH
    s = float(seconds)
    neg = s < 0
    s = abs(s)
    h, rem = divmod(int(round(s)), 3600)
    m, sec = divmod(rem, 60)
    if h:
        txt = f"{h}h {m:02d}m {sec:02d}s"
    elif m:
        txt = f"{m}m {sec:02d}s"
    else:
        txt = f"{s:.1f}s" if s < 10 else f"{sec}s"
    return f"-{txt}" if neg else txt


def _to_datetime(x: Any) -> _dt.datetime | None:
    """Aware datetimes for epoch seconds and zoned text; naive ones (local, zone unknown) stay naive."""
    if x is None or x == "":
        return None
    if isinstance(x, _dt.datetime):
        return x
    if _isnum(x):
        return _dt.datetime.fromtimestamp(float(x), tz=_dt.timezone.utc)
    try:
        return _dt.datetime.fromisoformat(str(x).strip().replace("Z", "+00:00"))
    except ValueError:
        return None


def _fmt_time(x: Any) -> str:
    d = _to_datetime(x)
    if d is None:
        return DASH if _missing(x) or x == "" else str(x)
    if d.tzinfo is None:
        return d.strftime("%Y-%m-%d %H:%M:%S")
    return d.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _elapsed(start: Any, end: Any) -> float | None:
    s, f = _to_datetime(start), _to_datetime(end)
    if s is None or f is None:
        return None
    if (s.tzinfo is None) != (f.tzinfo is None):  # one zoned, one local: read both as wall clock
        s, f = s.replace(tzinfo=None), f.replace(tzinfo=None)
    return (f - s).total_seconds()


def _fmt_command(cmd: Any) -> str:
    if cmd is None or cmd == "":
        return ""
    if isinstance(cmd, (list, tuple)):
        import shlex

        return " ".join(shlex.quote(str(a)) for a in cmd)
    return str(cmd)


def _key_label(key: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={fmt_key(v)}" for k, v in key.items())


# --------------------------------------------------------------------------------------------
# Tables: one neutral structure, rendered to markdown here and to HTML by the template
# --------------------------------------------------------------------------------------------


class Table:
    """headers, per-column numeric flag, rows of cell texts, per-row CSS class (HTML only)."""

    def __init__(self, headers: Sequence[str], numeric: Sequence[bool]):
        self.headers = list(headers)
        self.numeric = list(numeric)
        self.rows: list[list[str]] = []
        self.row_classes: list[str] = []
        self.cell_classes: list[list[str]] = []

    def add(self, cells: Sequence[Any], row_class: str = "", cell_classes: Sequence[str] | None = None):
        cells = [str(c) for c in cells]
        assert len(cells) == len(self.headers), (cells, self.headers)
        self.rows.append(cells)
        self.row_classes.append(row_class)
        self.cell_classes.append(list(cell_classes) if cell_classes else [""] * len(cells))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def columns(self) -> list[dict[str, Any]]:
        return [{"name": h, "num": n} for h, n in zip(self.headers, self.numeric)]

    def markdown(self) -> str:
        """GitHub pipe table, padded so the raw text lines up, numbers right-aligned."""
        def esc(s: str) -> str:
            return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

        head = [esc(h) for h in self.headers]
        body = [[esc(c) for c in r] for r in self.rows]
        widths = [max([3, len(head[i])] + [len(r[i]) for r in body]) for i in range(len(head))]

        def line(cells: Sequence[str]) -> str:
            out = []
            for i, c in enumerate(cells):
                out.append(c.rjust(widths[i]) if self.numeric[i] else c.ljust(widths[i]))
            return "| " + " | ".join(out) + " |"

        sep = "| " + " | ".join(
            ("-" * (widths[i] - 1) + ":") if self.numeric[i] else "-" * widths[i]
            for i in range(len(head))
        ) + " |"
        return "\n".join([line(head), sep] + [line(r) for r in body])


def _kv_table(pairs: Iterable[tuple[str, Any]]) -> Table:
    t = Table(["field", "value"], [False, False])
    for k, v in pairs:
        t.add([k, v])
    return t


# --------------------------------------------------------------------------------------------
# Context normalisation
# --------------------------------------------------------------------------------------------


def _as_comparison(c: Any) -> Comparison | None:
    if c is None:
        return None
    if isinstance(c, Comparison):
        return c
    if isinstance(c, Mapping):
        return Comparison.from_dict(c)
    if isinstance(c, (str, Path)):
        return Comparison.from_csv(c)
    raise TypeError(f"comparison must be a Comparison, its to_dict() or None, not {type(c).__name__}")


def _shape_list(shapes: Any) -> tuple[str, list[dict[str, Any]]]:
    if shapes is None:
        return "", []
    if isinstance(shapes, Mapping):
        items = shapes.get("list")
        if items is None:
            items = shapes.get("shapes", shapes.get("items"))
        return str(shapes.get("source") or ""), [dict(s) for s in (items or [])]
    return "", [dict(s) for s in shapes]


def _shape_table(shapes: Sequence[Mapping[str, Any]]) -> Table:
    cols: list[str] = []
    for s in shapes:
        for k in s:
            if not str(k).startswith("_") and k not in cols:
                cols.append(k)
    numeric = [all(_isnum(norm_key_value(s.get(c))) for s in shapes if s.get(c) is not None) for c in cols]
    t = Table(["#", *cols], [True, *numeric])
    for i, s in enumerate(shapes, 1):
        t.add([str(i), *(fmt_key(s.get(c)) for c in cols)])
    return t


def _logs_table(logs: Any) -> Table:
    t = Table(["log", "on node", "local"], [False, False, False])
    if not logs:
        return t
    items: list[tuple[str, Any]]
    if isinstance(logs, Mapping):
        items = list(logs.items())
    else:
        items = [(str(e.get("name", "")), e) for e in logs]
    for name, v in items:
        if isinstance(v, Mapping):
            t.add([name, fmt_scalar(v.get("node")), fmt_scalar(v.get("local"))])
        else:
            t.add([name, fmt_scalar(v), DASH])
    return t


def _matches(key: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    """A shape dict matches a comparison row when they agree on every column they share (>= 1)."""
    k = {str(c).lower(): x for c, x in key.items()}
    shared = [c for c in k if c in row]
    if not shared:
        return False
    return all(norm_key_value(k[c]) == norm_key_value(row[c]) for c in shared)


# --------------------------------------------------------------------------------------------
# SVG chart: speedup per shape, in table order, noise band shaded, groups separated
# --------------------------------------------------------------------------------------------


def _svg_chart(cmp: Comparison) -> Markup | None:
    rows = cmp.rows
    n = len(rows)
    if n == 0 or rows["speedup_pct"].notna().sum() == 0:
        return None
    sps = [None if _missing(v) else float(v) for v in rows["speedup_pct"]]
    vals = [v for v in sps if v is not None]
    band = cmp.noise_pct
    if cmp.judged:  # the practical bar the verdicts used: max(1 %, 3 x the job's pooled noise)
        pooled = cmp.summary.get("pooled_noise_pct")
        band = round(max(MIN_GAIN_PCT, NOISE_K * pooled), 2) if pooled is not None else SINGLE_SAMPLE_PCT
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
        label = _key_label({c: rec[c] for c in keycols})
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


# --------------------------------------------------------------------------------------------
# View model
# --------------------------------------------------------------------------------------------


def build_view(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """Turn the context into ready-to-print strings and tables (shared by both templates)."""
    ctx = _normalise_context(ctx)
    job = dict(ctx.get("job") or {})
    env = dict(ctx.get("environment") or {})
    tuning = dict(ctx.get("tuning") or {})
    bench = dict(ctx.get("bench") or {})
    tuned_csv = dict(ctx.get("tuned_csv") or {})
    cmp = _as_comparison(ctx.get("comparison"))
    shapes_source, shapes = _shape_list(ctx.get("shapes"))
    if not shapes_source and ctx.get("shape_sources"):
        shapes_source = "; ".join(fmt_scalar(x) for x in ctx["shape_sources"])
    no_kernel = tuning.get("no_kernel")
    no_kernel = None if no_kernel is None else [dict(s) for s in no_kernel]
    shape_notes = [dict(s) for s in (ctx.get("shape_notes") or [])]

    v: dict[str, Any] = {}
    variant = job.get("variant") or ""
    where = "/".join(str(x) for x in (job.get("node"), job.get("container")) if x)
    v["title"] = ("tune-remote report" + (f": {variant}" if variant else "")
                  + (f" on {where}" if where else ""))
    v["generated_at"] = _fmt_time(ctx.get("generated_at") or _dt.datetime.now(_dt.timezone.utc))
    v["tool_version"] = str(ctx.get("tool_version") or "")

    # job + environment
    jp = []
    for k, label in _JOB_FIELDS:
        val = job.get(k)
        jp.append((label, _fmt_time(val) if k in ("started", "finished") and val else fmt_scalar(val)))
    jp.append(("wall time", fmt_duration(_elapsed(job.get("started"), job.get("finished")))))
    v["job"] = _kv_table(jp)
    v["environment"] = _kv_table((label, fmt_scalar(env.get(k))) for k, label in _ENV_FIELDS)

    # comparison
    v["has_comparison"] = cmp is not None
    if cmp is not None:
        sm = cmp.summary
        v["metric"] = cmp.metric
        v["direction"] = cmp.direction
        formula = "after / before - 1" if cmp.higher_is_better else "before / after - 1"
        v["metric_line"] = (f"{cmp.metric}, {cmp.direction}. speedup % = ({formula}) x 100: "
                            f"positive = faster. Noise band ±{cmp.noise_pct:g}% (inside it = unchanged).")
        if cmp.judged:
            v["metric_line"] = (f"{cmp.metric}, {cmp.direction}. speedup % = ({formula}) x 100 of the medians: "
                                "positive = faster. " + verdict_method(cmp.summary))
        v["headline"] = (
            f"{sm.get('shapes', 0)} shapes: {sm.get('improved', 0)} improved, "
            f"{sm.get('regressed', 0)} regressed, {sm.get('unchanged', 0)} unchanged, "
            f"{sm.get('missing', 0)} missing; geomean {fmt_pct(sm.get('geomean_speedup_pct'))}, "
            f"mean {fmt_pct(sm.get('avg_speedup_pct'))} "
            f"(min {fmt_pct(sm.get('min_speedup_pct'))}, max {fmt_pct(sm.get('max_speedup_pct'))})"
        )
        v["cards"] = [
            ("geomean speedup", fmt_pct(sm.get("geomean_speedup_pct")),
             _sign_class(sm.get("geomean_speedup_pct"), cmp.noise_pct)),
            ("improved", fmt_int(sm.get("improved")), "improved"),
            ("regressed", fmt_int(sm.get("regressed")), "regressed" if sm.get("regressed") else ""),
            ("unchanged", fmt_int(sm.get("unchanged")), ""),
            ("missing", fmt_int(sm.get("missing")), "missing" if sm.get("missing") else ""),
        ]
        best, worst = sm.get("best"), sm.get("worst")
        gm_ratio = DASH if sm.get("geomean_ratio") is None else format(sm["geomean_ratio"], ".4f")
        v["summary"] = _kv_table([
            ("metric", f"{cmp.metric} ({cmp.direction})"),
            ("shapes in table", fmt_int(sm.get("shapes"))),
            ("compared (both sides)", fmt_int(sm.get("compared"))),
            (f"improved (> +{cmp.noise_pct:g}%)", fmt_int(sm.get("improved"))),
            (f"regressed (< -{cmp.noise_pct:g}%)", fmt_int(sm.get("regressed"))),
            (f"unchanged (within ±{cmp.noise_pct:g}%)", fmt_int(sm.get("unchanged"))),
            ("missing (no speedup)", fmt_int(sm.get("missing"))),
            ("only in before / only in after",
             f"{fmt_int(sm.get('only_before'))} / {fmt_int(sm.get('only_after'))}"),
            ("shapes averaged over repeated runs", fmt_int(sm.get("repeated"))),
            ("mean speedup", fmt_pct(sm.get("avg_speedup_pct"))),
            ("median speedup", fmt_pct(sm.get("median_speedup_pct"))),
            ("min speedup", fmt_pct(sm.get("min_speedup_pct"))),
            ("max speedup", fmt_pct(sm.get("max_speedup_pct"))),
            ("geomean speedup (ratio)", f"{fmt_pct(sm.get('geomean_speedup_pct'))} ({gm_ratio})"),
            ("best shape", f"{_key_label(best['key'])}: {fmt_pct(best['speedup_pct'])}" if best else DASH),
            ("worst shape",
             f"{_key_label(worst['key'])}: {fmt_pct(worst['speedup_pct'])}" if worst else DASH),
        ])
        common = _common_columns(cmp)
        v["common_key"] = ", ".join(f"{c}={fmt_key(x)}" for c, x in common.items())
        v["groups"] = _group_table(cmp, common)
        v["group_title"] = (
            "Per " + (f"({', '.join(cmp.group_columns)})" if cmp.group_columns else "all shapes")
            + (f" by size class of {cmp.size_column}" if cmp.size_column else "")
        )
        v["rows"] = _rows_table(cmp, no_kernel or [], shape_notes, common)
        v["chart"] = _svg_chart(cmp)
        v["band_label"] = ("the practical bar a verdict must clear (max(1 %, 3 x the measured noise))"
                           if cmp.judged else "noise band")
    else:
        v["metric_line"] = ""
        v["common_key"] = ""
        v["headline"] = "no comparison: the after benchmark did not run or produced no results"
        v["cards"] = []
        v["chart"] = None

    # shapes
    v["shapes_source"] = shapes_source
    v["shapes_count"] = len(shapes)
    v["shapes"] = _shape_table(shapes)

    # tuning
    v["tune_command"] = _fmt_command(tuning.get("command"))
    flags = dict(tuning.get("flags") or {})
    ft = Table(["flag", "value"], [False, False])
    for k, val in flags.items():
        ft.add([k, "(set)" if val is True else fmt_scalar(val)])
    v["tune_flags"] = ft
    et = Table(["variable", "value"], [False, False])
    for k, val in dict(tuning.get("env") or {}).items():
        et.add([k, fmt_scalar(val)])
    v["tune_env"] = et
    partial = tuning.get("partial")
    tp = [("exit status", fmt_scalar(tuning.get("rc")))]
    if tuning.get("started"):
        tp.append(("started", _fmt_time(tuning["started"])))
    tp += [("duration", fmt_duration(tuning.get("duration_s"))),
           ("tuned rows written", fmt_scalar(tuning.get("rows_written")))]
    if tuning.get("rows_before") is not None or tuning.get("rows_after") is not None:
        tp.append(("tuned CSV rows before / after",
                   f"{fmt_scalar(tuning.get('rows_before'))} / {fmt_scalar(tuning.get('rows_after'))}"))
    tp += [("shapes without a kernel", DASH if no_kernel is None else str(len(no_kernel))),
           ("partial", fmt_scalar(partial))]
    v["tuning"] = _kv_table(tp)
    v["has_tuning"] = bool(tuning)
    v["no_kernel_known"] = no_kernel is not None
    v["no_kernel"] = _shape_table(no_kernel or [])
    v["bench_before"] = _fmt_command(bench.get("before_command"))
    v["bench_after"] = _fmt_command(bench.get("after_command"))
    bt = Table(["variable", "value"], [False, False])
    for k, val in dict(bench.get("env") or {}).items():
        bt.add([k, fmt_scalar(val)])
    v["bench_env"] = bt

    v["tuned_csv"] = _kv_table((label, fmt_scalar(tuned_csv.get(k))) for k, label in _CSV_FIELDS)
    v["has_tuned_csv"] = bool(tuned_csv)
    v["logs"] = _logs_table(ctx.get("logs"))

    # warnings: the caller's first, then what the numbers say
    warnings = [str(w) for w in (ctx.get("warnings") or [])]
    warnings += _derived_warnings(tuning, no_kernel, cmp)
    v["warnings"] = warnings
    v["notes"] = [str(n) for n in (ctx.get("notes") or [])]
    v.update(outcome_view(ctx, Table))
    return v


def _normalise_context(ctx: Mapping[str, Any] | None) -> dict[str, Any]:
    """Accept the spellings callers already use besides the documented ones (documented ones win)."""
    ctx = dict(ctx or {})
    env = dict(ctx.get("environment") or {})
    if env.get("aiter_version") is None and env.get("version") is not None:
        env["aiter_version"] = env["version"]
    ctx["environment"] = env
    csvd = dict(ctx.get("tuned_csv") or {})
    for new, old in (("node_path", "node"), ("backup_path", "backup"), ("local_path", "local")):
        if csvd.get(new) is None and csvd.get(old) is not None:
            csvd[new] = csvd[old]
    ctx["tuned_csv"] = {k: v for k, v in csvd.items() if k not in ("node", "backup", "local")}
    tuning = dict(ctx.get("tuning") or {})
    if (tuning.get("rows_written") is None and _isnum(tuning.get("rows_after"))
            and _isnum(tuning.get("rows_before"))):
        tuning["rows_written"] = tuning["rows_after"] - tuning["rows_before"]
    if not tuning.get("flags") and isinstance(tuning.get("command"), (list, tuple, str)):
        tuning["flags"] = _flags_from_command(tuning["command"])
    ctx["tuning"] = tuning
    logs = ctx.get("logs")
    if isinstance(logs, Mapping) and set(logs) <= {"node", "local"} and isinstance(logs.get("node"), Mapping):
        local = logs.get("local")
        ctx["logs"] = {
            name: {"node": path,
                   "local": (f"{str(local).rstrip('/')}/{str(path).rsplit('/', 1)[-1]}"
                             if isinstance(local, (str, Path)) and path else None)}
            for name, path in logs["node"].items()
        }
    return ctx


def _flags_from_command(cmd: Any) -> dict[str, Any]:
    """``--mp 8 --libtype both -v`` -> {"--mp": "8", "--libtype": "both", "-v": True} (script args only)."""
    import shlex

    argv = [str(a) for a in cmd] if isinstance(cmd, (list, tuple)) else shlex.split(str(cmd))
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", a):
            if "=" in a and a.startswith("--"):
                k, _, val = a.partition("=")
                out[k] = val
            elif i + 1 < len(argv) and not (argv[i + 1].startswith("-")
                                            and not re.fullmatch(r"-\d+(\.\d+)?", argv[i + 1])):
                out[a] = argv[i + 1]
                i += 1
            else:
                out[a] = True
        i += 1
    return out


def _sign_class(x: Any, band: float) -> str:
    if _missing(x):
        return "missing"
    return "improved" if x > band else "regressed" if x < -band else ""


def _derived_warnings(tuning: Mapping[str, Any], no_kernel: list | None, cmp: Comparison | None) -> list[str]:
    out = []
    if tuning.get("partial"):
        out.append("tuning was partial: some shapes were left untuned (see 'Shapes with no kernel')")
    rc = tuning.get("rc")
    if rc not in (None, 0):
        out.append(f"the tuner exited with status {rc}")
    if no_kernel:
        out.append(f"{len(no_kernel)} shape(s) found no kernel during tuning; "
                   "AITER keeps its default for them")
    if cmp is not None:
        sm = cmp.summary
        if sm.get("only_before"):
            out.append(f"{sm['only_before']} shape(s) benchmarked before but missing after tuning")
        if sm.get("only_after"):
            out.append(f"{sm['only_after']} shape(s) benchmarked after but missing before tuning")
        nov = sm.get("missing", 0) - sm.get("only_before", 0) - sm.get("only_after", 0)
        if nov > 0:
            out.append(f"{nov} shape(s) have no usable value on one side (empty, zero or failed benchmark)")
        if sm.get("regressed") and cmp.judged:
            out.append(f"{sm['regressed']} shape(s) are proven slower with their tuned rows: "
                       "never promoted with --promote proven")
        elif sm.get("regressed"):
            out.append(f"{sm['regressed']} shape(s) regressed beyond -{cmp.noise_pct:g}%: "
                       "review them before keeping their tuned rows")
        rows = cmp.rows
        if len(rows) and not cmp.judged:
            spread = rows[["before_spread_pct", "after_spread_pct"]].max(axis=1, skipna=True)
            noisy = int((spread > cmp.noise_pct).sum())
            if noisy:
                out.append(f"{noisy} shape(s) vary between repeated runs by more than the "
                           f"±{cmp.noise_pct:g}% "
                           "noise band: their status is not reliable")
    return out


def _common_columns(cmp: Comparison) -> dict[str, Any]:
    """Key columns with one value across all rows, factored out of wide (MoE-like) keys only."""
    rows = cmp.rows
    if len(cmp.key_columns) <= 6 or len(rows) < 2:
        return {}
    out = {}
    for c in cmp.key_columns:
        if c == cmp.size_column:
            continue
        vals = {norm_key_value(x) for x in rows[c]}
        if len(vals) == 1 and None not in vals:
            out[c] = vals.pop()
    return out


def _group_table(cmp: Comparison, common: Mapping[str, Any]) -> Table:
    gcols = [c for c in cmp.group_columns if c not in common]
    size_name = cmp.size_column or "size"
    t = Table(
        [*gcols, "class", f"{size_name} range", "shapes", "compared", "improved", "regressed",
         "unchanged", "missing", "mean %", "geomean %", "min %", "max %"],
        [True] * len(gcols) + [False, False] + [True] * 10,
    )
    per_group = cmp.per_group
    by_group = cmp.by_group

    def gkey(r) -> tuple:
        return tuple(norm_key_value(r[c]) for c in gcols)

    totals = {gkey(r): r for _, r in per_group.iterrows()} if len(per_group) else {}
    emitted: set[tuple] = set()
    recs = list(by_group.iterrows())
    for i, (_, r) in enumerate(recs):
        g = gkey(r)
        t.add([*(fmt_key(r[c]) for c in gcols), r["size_class"], r["range"] or DASH, *_stat_cells(r)],
              row_class="cls")
        last_of_group = i + 1 == len(recs) or gkey(recs[i + 1][1]) != g
        if last_of_group and g in totals and g not in emitted:
            tr = totals[g]
            t.add([*(fmt_key(tr[c]) for c in gcols), "all", DASH, *_stat_cells(tr)], row_class="total")
            emitted.add(g)
    return t


def _stat_cells(r) -> list[str]:
    return [fmt_int(r["shapes"]), fmt_int(r["compared"]), fmt_int(r["improved"]), fmt_int(r["regressed"]),
            fmt_int(r["unchanged"]), fmt_int(r["missing"]), fmt_pct(r["mean_speedup_pct"]),
            fmt_pct(r["geomean_speedup_pct"]), fmt_pct(r["min_speedup_pct"]), fmt_pct(r["max_speedup_pct"])]


def _rows_table(cmp: Comparison, no_kernel: list[dict], shape_notes: list[dict],
                common: Mapping[str, Any]) -> Table:
    rows = cmp.rows
    kcols = [c for c in cmp.key_columns if c not in common]
    key_numeric = [all(_isnum(norm_key_value(x)) for x in rows[c] if not _missing(x)) for c in kcols]
    repeated = bool(len(rows)) and bool(((rows["before_n"] > 1) | (rows["after_n"] > 1)).any())
    headers = [*kcols, f"before ({cmp.metric})", f"after ({cmp.metric})", "speedup %",
               "verdict" if cmp.judged else "status"]
    numeric = [*key_numeric, True, True, True, False]
    if repeated:
        headers.append("runs b/a")
        numeric.append(True)
    headers.append("note")
    numeric.append(False)
    t = Table(headers, numeric)
    dec = column_decimals([*rows["before"], *rows["after"]])
    for _, r in rows.iterrows():
        key = {c: r[c] for c in cmp.key_columns}
        notes = []
        if any(_matches(s, key) for s in no_kernel):
            notes.append("no kernel found by the tuner")
        for sn in shape_notes:
            if _matches(dict(sn.get("key") or {}), key) and sn.get("note"):
                notes.append(str(sn["note"]))
        if r["note"]:
            notes.append(str(r["note"]))
        status = str(r["status"])
        label = str(r["verdict"]) + (" (promoted)" if r["promoted"] == "true" else "") if cmp.judged else status
        cells = [*(fmt_key(r[c]) for c in kcols), fmt_value(r["before"], dec), fmt_value(r["after"], dec),
                 fmt_pct(r["speedup_pct"]), label]
        ccls = [""] * len(kcols) + ["", "", status, status]
        if repeated:
            cells.append(f"{int(r['before_n'])}/{int(r['after_n'])}")
            ccls.append("")
        cells.append("; ".join(notes))
        ccls.append("note")
        t.add(cells, row_class=status, cell_classes=ccls)
    return t


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["mdcode"] = _md_inline_code
    return env


def _md_inline_code(s: str) -> str:
    """Inline code span that survives backticks in the text."""
    s = str(s)
    ticks = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (ticks + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def render_report(ctx: Mapping[str, Any]) -> tuple[str, str]:
    """Return (markdown, html) for the context described in the module docstring."""
    view = build_view(ctx)
    md = _environment(False).get_template("report.md.j2").render(v=view)
    md = re.sub(r"\n{3,}", "\n\n", md)
    html = _environment(True).get_template("report.html.j2").render(v=view)
    return md, html


def write_report(ctx: Mapping[str, Any], directory: str | Path, stem: str = "report") -> tuple[Path, Path]:
    """Render and write ``<stem>.md`` and ``<stem>.html`` into ``directory``; returns both paths."""
    md, html = render_report(ctx)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    md_path, html_path = d / f"{stem}.md", d / f"{stem}.html"
    md_path.write_text(md, encoding="utf-8")
    html_path.write_text(html, encoding="utf-8")
    return md_path, html_path
