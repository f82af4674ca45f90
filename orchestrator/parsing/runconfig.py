"""Parse a tuner's own ``--run_config`` benchmark (BenchSpec output ``"run_config"``) into rows.

Upstream: aiter/utility/base_tuner.py (ROCm/aiter, from v0.1.13; read at v0.1.20 and 3886b0a8)
``TunerCommon.run`` prints ``=== Running production operator benchmark (default) ===`` (no CSV argument) or
``(tuned)`` (``--run_config TUNED_CSV``), then ``_print_benchmark_results(label, results)``::

    ============= Benchmark (default) Benchmark Results =============
    Shape                                    |    E2E(us) |   Status
    -----------------------------------------------------------------
    (16, 7168, 2048)                         |      12.34 |       OK
    keys: gfx=gfx950, cu_num=256, M=16, N=7168, K=2048
    reason: err_ratio=0.2(>--errRatio=0.05)          (only for a MISMATCH / ERROR row)

A ``Kernel(us)`` column comes before ``E2E(us)`` when any result carries a kernel time. Times print as
``f"{us:.2f}"``, ``N/A`` when not positive. Status is ``OK``, ``ERROR``, ``MISMATCH`` or the status upper-cased.
A ``Repro CSV`` block may follow (ignored). A tuner that does not override ``run_config`` logs
``run_config not implemented for <name>, skipping benchmark`` and the table is ``<label>: no results``.

Rows: ``{"Shape", ["Kernel(us)"], "E2E(us)", "Status", <every keys: column>}``; the keys line's values become
numbers where they parse. A row whose Status is not ``OK`` keeps its times None: a mismatching or failing
output measures nothing the comparison may use. A row without its ``keys:`` line (upstream prints none only
when it has no shapes frame) is dropped: it cannot be matched to a shape.
"""

from __future__ import annotations

import re

from ..shapelib.text import strip_ansi, strip_prefix

__all__ = ["parse_runconfig_rows", "unavailable", "TITLE"]

TITLE = re.compile(r"=+ (?P<label>.+?) Benchmark Results =+\s*$")
_NO_RESULTS = re.compile(r"(?P<label>Benchmark \((?:default|tuned)\)): no results\s*$")
_NOT_IMPLEMENTED = re.compile(r"run_config not implemented for (?P<name>\S+), skipping benchmark")
_KEYS = "keys: "
_END = re.compile(r"^=+ .* =+\s*$|^=== ")


def _clean(line: str) -> str:
    return strip_prefix(strip_ansi(line).rstrip("\r\n"))


def _value(text: str):
    t = text.strip()
    if t in ("", "N/A", "nan", "None"):
        return None
    try:
        v = float(t)
    except ValueError:
        return t
    return int(v) if v.is_integer() and "." not in t else v     # keys: M=16 -> 16, times stay floats


def _keys(line: str) -> dict:
    out = {}
    for part in line[len(_KEYS):].split(", "):
        name, sep, val = part.partition("=")
        if sep:
            out[name.strip()] = _value(val)
    return out


def parse_runconfig_rows(text: str) -> list[dict]:
    """Rows of every ``<label> Benchmark Results`` table in ``text``, in order."""
    rows: list[dict] = []
    header: list[str] | None = None
    pending: dict | None = None
    for raw in text.splitlines():
        line = _clean(raw)
        m = TITLE.search(line)
        if m:
            header, pending = None, None
            if m.group("label").startswith("Benchmark ("):
                header = []
            continue
        if header is None:
            continue
        if not header:
            if "|" in line and "Shape" in line:
                header = [c.strip() for c in line.split("|")]
            continue
        if line.startswith(_KEYS):
            if pending is not None:
                pending.update(_keys(line))
                rows.append(pending)
            pending = None
            continue
        if line.startswith("reason:") or set(line.strip()) <= {"-"}:
            continue
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != len(header) or _END.search(line):
            header, pending = None, None      # the table ended (Repro CSV block, another section)
            continue
        pending = {h: _value(c) if h != "Shape" and h != "Status" else c for h, c in zip(header, cells)}
        if pending.get("Status") != "OK":
            for h in header:
                if h.endswith("(us)"):
                    pending[h] = None
    return rows


def unavailable(text: str) -> str | None:
    """Why a ``--run_config`` log measured nothing, or None when it printed a results table."""
    for raw in text.splitlines():
        line = _clean(raw)
        m = _NOT_IMPLEMENTED.search(line)
        if m:
            return f"the tuner does not implement --run_config ({m.group(0)})"
    for raw in text.splitlines():
        m = _NO_RESULTS.search(_clean(raw))
        if m:
            return f"the tuner's --run_config printed '{m.group(0).strip()}'"
    return None
