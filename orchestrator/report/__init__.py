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
                   "no_kernel": [shape dict], "partial": bool,
                   "kernels": [shape dict + kernel, splitK, us, tflops]}   (the kernel chosen per shape)
    comparison:   orchestrator.outcome.compare.Comparison, or its ``to_dict()``, or None
    moe_tuners:   [{"key": {...}, "tuner": "standard"|"flydsl", "standard": us, "flydsl": us}] or None
                  (run --moe-tuners both: the path each shape kept, steps/moetuners.pick)
    warnings:     [str]   shown first, e.g. "MoE bypass on this AITER version: tuned rows for
                  token*topk<=128 are ignored at runtime"
    notes:        [str]   e.g. "benchmark script choices patched: ran a patched copy"
    shape_notes:  [{"key": {col: value}, "note": str}]  per-shape remarks put in the table's note
                  column (e.g. MoE bypass); a key matches a row on the columns they share
    logs:         {name: {"node": path, "local": path}} | {name: path} | [{"name", "node", "local"}]
    tuned_csv:    {"node_path", "backup_path", "rows_added", "local_path"}
    promotion, engaged, serving, outcome_changes: see orchestrator/report/outcome.py (outcome_changes: the
                  commands run after the job that changed its outcome, listed under the result line)
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

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from .fmt import column_decimals, fmt_pct, fmt_value
from .view import build_view

__all__ = ["render_report", "write_report", "environment", "finish_markdown", "build_view", "column_decimals",
           "fmt_pct", "fmt_value"]

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


@functools.lru_cache(maxsize=None)
def environment(autoescape: bool) -> jinja2.Environment:
    """One environment per kind for the process: a template is compiled once (its cache checks the file's
    mtime, so an edited template is compiled again)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["mdcode"] = _md_inline_code
    env.filters["mdtext"] = _md_text
    env.filters["codespans"] = _code_spans
    return env


NOTE_MAX = 1000   # characters of one note or warning in report.md
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def _md_text(s: str) -> str:
    """One line of text that may quote the node (log lines, paths, tool output) as plain Markdown text: no
    raw HTML, no links or images, no line breaks, bounded (S-05). Code spans (`...`) stay as they are."""
    s = " ".join(str(s).split())
    if len(s) > NOTE_MAX:
        s = s[:NOTE_MAX] + " [...]"
    out, last = [], 0
    for m in _CODE_SPAN.finditer(s):
        out += [_md_escape(s[last:m.start()]), m.group(0)]
        last = m.end()
    return "".join(out + [_md_escape(s[last:])])


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")   # what CommonMark reads as raw HTML or an autolink


def _md_escape(s: str) -> str:
    """`<` that would open a tag or autolink, and link/image brackets; `<= 128` stays as it is."""
    return _TAG_START.sub("&lt;", s).replace("[", "\\[").replace("]", "\\]")


def _code_spans(s: str):
    """Text that may hold Markdown code spans (`...`), as HTML: escaped, each span a ``<code>``."""
    from markupsafe import Markup, escape
    s, out, last = str(s), [], 0
    for m in _CODE_SPAN.finditer(s):
        out += [escape(s[last:m.start()]), Markup("<code>%s</code>") % m.group(0).strip("`").strip()]
        last = m.end()
    return Markup("").join([*out, escape(s[last:])])


def _md_inline_code(s: str) -> str:
    """Inline code span that survives backticks in the text."""
    s = str(s)
    ticks = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (ticks + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def warm_templates() -> None:
    """Compile both report templates now (warm.warm_up: while the job waits on its node): ~0.1-1 s of
    jinja2 lexing and code generation off the report step's critical path."""
    environment(False).get_template("report.md.j2")
    environment(True).get_template("report.html.j2")


def render_report(ctx: Mapping[str, Any]) -> tuple[str, str]:
    """Return (markdown, html) for the context described in the module docstring."""
    view = build_view(ctx)
    md = finish_markdown(environment(False).get_template("report.md.j2").render(v=view), [view])
    html = environment(True).get_template("report.html.j2").render(v=view)
    return md, html


def finish_markdown(md: str, views: list[dict]) -> str:
    """One blank line at most; no absolute path of the node's AITER (report.md goes into a PR)."""
    md = re.sub(r"\n{3,}", "\n\n", md)
    for view in views:
        if view.get("aiter_root", "").startswith("/"):
            md = md.replace(view["aiter_root"], "<aiter root>")
    return md


def write_report(ctx: Mapping[str, Any], directory: str | Path, stem: str = "report") -> tuple[Path, Path]:
    """Render and write ``<stem>.md`` and ``<stem>.html`` into ``directory``; returns both paths."""
    md, html = render_report(ctx)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    md_path, html_path = d / f"{stem}.md", d / f"{stem}.html"
    md_path.write_text(md, encoding="utf-8")
    html_path.write_text(html, encoding="utf-8")
    return md_path, html_path
