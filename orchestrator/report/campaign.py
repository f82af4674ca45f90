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


def campaign_report(title: str, comparisons: Mapping[str, Path], tail_md: str,
                    job: Mapping[str, Any], intro_md: str = "") -> tuple[str, str]:
    """Return (markdown, html): one single-job report per variant over all targets, then ``tail_md``."""
    from markdown_it import MarkdownIt      # rich's own Markdown parser; raw HTML in the text stays escaped
    mds, bodies, head = [], [], ""
    for variant, path in comparisons.items():
        rows = _records(path)
        ctx = {"job": {**job, "variant": variant},
               "comparison": {"rows": rows, "summary": {}} if rows else None}
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
