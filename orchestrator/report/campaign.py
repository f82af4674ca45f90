"""A campaign's report: the single job's report sections over the merged comparison, then the campaign's own parts.

``campaign_report(title, comparisons, tail_md, job) -> (markdown, html)``. Each variant's merged
comparison.csv is rendered by :func:`render_report` (summary with verdict counts, charts, the per-shape
table with verdicts) with ``node`` as the first key column, so every row says which target measured it;
``tail_md`` (targets, plan, promotion across kinds) follows, in both files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import render_report

_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.S)


def _records(path: Path) -> list[dict]:
    import pandas as pd
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    if "node" in df:
        df = df[["node"] + [c for c in df.columns if c != "node"]]
    return df.to_dict("records")


_COPIED = ("verdict", "promoted", "noise_pct", "threshold_pct", "p_value", "before_n", "after_n", "before_err",
           "after_err", "err_worse", "gain_hl_pct", "gain_lo_pct", "gain_hi_pct", "gain_conf_pct")  # issue 37: last 4


def merged_comparison(rows: list[dict]):
    """The merged rows as a Comparison: ``node`` a key column (the table says which target measured each shape),
    the charts and group tables per key without it (one per (N,K) or MoE config over all targets), and the
    verdicts copied from the merged comparison.csv (each target judged its own samples; a shape measured again
    after the promotion across its kind carries that verdict), never recomputed here."""
    import math
    from ..outcome.compare import Comparison
    from ..outcome.compare_stats import group_stats
    from ..outcome.compare_values import VERDICT_STATUS, rows_frame
    from ..outcome.keys import norm_key_value
    cmp = Comparison.from_records(rows)
    if "verdict" not in (rows[0] if rows else {}):
        return cmp
    cols = cmp.key_columns
    by_key = {tuple(norm_key_value(r.get(c)) for c in cols): r for r in rows}
    groups = tuple(c for c in cmp.group_columns if c != "node")
    recs, order = [], {}
    for rec in cmp.rows.to_dict("records"):
        rec = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in rec.items()}
        src = by_key.get(tuple(norm_key_value(rec[c]) for c in cols)) or {}
        rec.update({c: (src[c] if src[c] != "" else None) for c in _COPIED if c in src})
        verdict = str(rec.get("verdict") or "")
        rec["status"] = "missing" if rec.get("speedup_pct") is None else VERDICT_STATUS.get(verdict, rec["status"])
        rec["_in_before"], rec["_in_after"] = rec.get("before") is not None, rec.get("after") is not None
        order.setdefault(tuple(rec[c] for c in groups), len(order))
        recs.append(rec)
    size = cmp.size_column
    recs.sort(key=lambda r: (order[tuple(r[c] for c in groups)], float(r[size]) if size else 0, str(r["node"])))
    summary = dict(cmp.summary)
    counts = {s: sum(1 for r in recs if r["status"] == s) for s in ("improved", "regressed", "unchanged", "missing")}
    summary.update(counts, promoted=sum(1 for r in recs if str(r.get("promoted")) == "true"),
                   verdicts={v: sum(1 for r in recs if r.get("verdict") == v)
                             for v in dict.fromkeys([*VERDICT_STATUS, *(str(r.get("verdict")) for r in recs)])},
                   samples={"before": max((int(r.get("before_n") or 0) for r in recs), default=0),
                            "after": max((int(r.get("after_n") or 0) for r in recs), default=0)})
    by_group, per_group = group_stats(recs, groups, size)
    return Comparison(key_columns=cols, metric=cmp.metric, higher_is_better=cmp.higher_is_better,
                      noise_pct=cmp.noise_pct, size_column=size, group_columns=groups,
                      rows=rows_frame(recs, cols), summary=summary, by_group=by_group, per_group=per_group,
                      judged=True)


def campaign_report(title: str, comparisons: Mapping[str, Path], tail_md: str,
                    job: Mapping[str, Any], intro_md: str = "") -> tuple[str, str]:
    """Return (markdown, html): one single-job report per variant over all targets, then ``tail_md``."""
    from markdown_it import MarkdownIt      # rich's own Markdown parser; raw HTML in the text stays escaped
    mds, bodies, head = [], [], ""
    for variant, path in comparisons.items():
        rows = _records(path)
        ctx = {"job": {**job, "variant": variant},
               "comparison": merged_comparison(rows) if rows else None}
        md, html = render_report(ctx)
        mds.append(md)
        m = _BODY.search(html)
        bodies.append(m.group(1) if m else html)
        head = head or html[: html.find("<body")]
    md = f"# {title}\n\n{intro_md}\n\n" + "\n".join(re.sub(r"^# ", "## ", x, count=1) for x in mds) + "\n" + tail_md
    render = MarkdownIt("commonmark", {"html": False}).enable("table").render
    tail_html = render(tail_md)
    if not head:
        head = ("<!doctype html><html><head><meta charset='utf-8'><title></title>"
                "<style>body{font-family:system-ui,sans-serif;margin:2em}</style></head>")
    head = re.sub(r"<title>.*?</title>", f"<title>{_esc(title)}</title>", head, count=1, flags=re.S)
    return md, f"{head}<body>\n<h1>{_esc(title)}</h1>\n" + render(intro_md) + "\n".join(bodies) + tail_html + "</body></html>\n"


def _esc(s: str) -> str:
    import html
    return html.escape(s)
