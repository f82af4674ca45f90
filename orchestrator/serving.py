"""Serving benchmark figures (vLLM's benchmark_serving / SGLang's bench_serving output) -> serving.csv.

Lines like ``Request throughput (req/s):   2.37`` or ``Mean TTFT (ms):  123.4``; the last value of a
metric in a log wins. serving.csv: metric,before,after,change_pct (after vs before, raw: for throughput
higher is better, for latencies (ms) lower is).
"""

from __future__ import annotations

import csv
import io
import re

_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 ./\-]*?\((?:req/s|tok/s|ms|s)\))\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*$",
                   re.MULTILINE)


def parse(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in _LINE.findall(text or ""):
        out[name.strip()] = float(value)
    return out


def better(metric: str, change_pct: float) -> bool:
    return change_pct < 0 if metric.endswith("(ms)") or metric.endswith("(s)") else change_pct > 0


def table(before: dict[str, float], after: dict[str, float]) -> list[dict]:
    rows = []
    for m in [*before, *[x for x in after if x not in before]]:
        b, a = before.get(m), after.get(m)
        ch = round((a / b - 1) * 100, 2) if a is not None and b else None
        rows.append({"metric": m, "before": b, "after": a, "change_pct": ch})
    return rows


def csv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["metric", "before", "after", "change_pct"], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()


# --- the server a --serve-cmd starts (issue 36: a server that never reads the tuned rows) -----------------
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "\n"}


def serve_cmd_server(cmd: str | None, env: dict | None) -> dict | None:
    """The vLLM / SGLang server a ``--serve-cmd`` shell line starts, as discover lists a running one
    (``{"kind", "env", "label"}``; ``env``: the container's environment with the line's own ``X=V``,
    ``env X=V`` / ``env -u X`` and ``export X=V``), or None (no server named in it, or a line this cannot
    read). Its notes (steps/servers.py) say when it would never read the rows a job tunes."""
    import shlex
    try:
        lex = shlex.shlex(cmd or "", posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:
        return None
    seen = dict(env or {})
    start = True
    for i, tok in enumerate(tokens):
        if tok in _SEPARATORS:
            start = True
            continue
        m = _ASSIGN.match(tok)
        if m and (start or tokens[i - 1] in ("export", "env") or _ASSIGN.match(tokens[i - 1] or "")):
            seen[m.group(1)] = m.group(2)
            continue
        if tok == "-u" and i and tokens[i - 1] == "env" and i + 1 < len(tokens):
            seen.pop(tokens[i + 1], None)
            continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        kind = ("vllm" if (tok.rsplit("/", 1)[-1] == "vllm" and nxt == "serve") or "vllm.entrypoints" in tok
                else "sglang" if "sglang.launch_server" in tok else None)
        if kind:
            name = "vLLM" if kind == "vllm" else "SGLang"
            return {"kind": kind, "env": seen, "label": f"the {name} server --serve-cmd starts"}
        start = tok in ("export", "env", "exec", "nohup", "sudo", "time") or tok.startswith("-") and start
    return None
