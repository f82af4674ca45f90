"""JIT cold-build profile: ninja's ``.ninja_log`` and AITER's ``start/finish build`` lines (seed 004).

``.ninja_log`` (aiter-formats.md §6: ``{jit dir}/build/<module>/build/.ninja_log``) is ninja's own record:
a ``# ninja log vN`` header, then one tab-separated line per output of every edge that ran,
``start_ms end_ms mtime output cmdhash``, written when the edge finished (times in ms since that ninja
run started). The file is appended to by every incremental build; as in ninjatracing, an end time earlier
than the previous line's starts a new build, and only the last build is profiled. Outputs of one edge
share its start, end and hash and are merged.

Critical path: the log has no dependencies, so it is read from timing: from the edge that ended last,
go back to the edge that ended last before it started (what it waited for: an input, or a free ninja
slot), and so on. For an AITER module that is the slowest instance translation unit, then the link.

``build_lines(text)``: AITER's ``[aiter] [pid=.. pname=..] start build [md] under dir`` /
``finish build [md], cost 12.3s`` (colour codes, v0.1.4's 8 decimals and no prefix accepted) and
``failed jit build [md]``; ``finish build`` is printed from a ``finally``, so a failed build has one too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..shapelib.text import strip_ansi

__all__ = ["Edge", "parse_ninja_log", "profile", "build_lines", "TOP_UNITS"]

TOP_UNITS = 8
_HEADER = re.compile(r"^# ninja log v(\d+)\s*$")
_START = re.compile(r"start build \[(?P<md>[^\]\s]+)\](?: under (?P<dir>\S+))?")
_FINISH = re.compile(r"finish build \[(?P<md>[^\]\s]+)\], cost (?P<s>\d+(?:\.\d+)?)s")
_FAILED = re.compile(r"failed jit build \[(?P<md>[^\]\s]+)\]")


@dataclass
class Edge:
    start_ms: int
    end_ms: int
    outputs: list[str] = field(default_factory=list)
    cmdhash: str = ""

    @property
    def seconds(self) -> float:
        return max(0, self.end_ms - self.start_ms) / 1000.0

    @property
    def name(self) -> str:
        """The first output's file name (objects are named after their source: ``x.cu`` -> ``x.cuda.o``)."""
        return self.outputs[0].rsplit("/", 1)[-1] if self.outputs else ""


def parse_ninja_log(text: str) -> tuple[list[Edge], int | None]:
    """The edges of the LAST build in a ``.ninja_log`` text, in log order, and the log version (None
    when the header is missing, e.g. a log read from its tail). Malformed lines are skipped."""
    version = None
    edges: list[Edge] = []
    by_key: dict[tuple, Edge] = {}
    last_end = -1
    for line in text.splitlines():
        if line.startswith("#"):
            m = _HEADER.match(line)
            if m:
                version = int(m.group(1))
            continue
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) < 4:
            continue
        try:
            start, end = int(parts[0]), int(parts[1])
        except ValueError:
            continue
        if end < last_end:   # an earlier time stamp: a new (incremental) build began
            edges, by_key = [], {}
        last_end = end
        cmdhash = parts[4] if len(parts) > 4 else ""
        key = (start, end, cmdhash) if cmdhash else (start, end, parts[3])
        if key in by_key:
            by_key[key].outputs.append(parts[3])
            continue
        e = Edge(start, end, [parts[3]], cmdhash)
        by_key[key] = e
        edges.append(e)
    return edges, version


def critical_path(edges: list[Edge]) -> list[Edge]:
    """From the last edge to end back through what each one waited for (see the module doc)."""
    if not edges:
        return []
    cur = max(edges, key=lambda e: (e.end_ms, e.start_ms))
    path = [cur]
    seen = {id(cur)}
    while True:
        preds = [e for e in edges if id(e) not in seen and e.end_ms <= cur.start_ms]
        if not preds:
            break
        cur = max(preds, key=lambda e: (e.end_ms, e.seconds))
        seen.add(id(cur))
        path.append(cur)
    return path[::-1]


def profile(edges: list[Edge], top: int = TOP_UNITS) -> dict[str, Any]:
    """Wall time, summed edge time, parallelism, the slowest edges and the critical path of one build."""
    if not edges:
        return {"edges": 0, "wall_s": None, "busy_s": None, "parallelism": None, "slowest": [],
                "critical_path": [], "critical_s": None}
    t0 = min(e.start_ms for e in edges)
    wall = (max(e.end_ms for e in edges) - t0) / 1000.0
    busy = sum(e.seconds for e in edges)
    path = critical_path(edges)

    def item(e: Edge) -> dict[str, Any]:
        return {"output": e.name, "seconds": round(e.seconds, 3), "start_s": round((e.start_ms - t0) / 1000.0, 3),
                "end_s": round((e.end_ms - t0) / 1000.0, 3), "outputs": len(e.outputs)}

    slowest = sorted(edges, key=lambda e: (-e.seconds, e.name))[:top]
    return {"edges": len(edges), "wall_s": round(wall, 3), "busy_s": round(busy, 3),
            "parallelism": round(busy / wall, 2) if wall > 0 else None,
            "slowest": [item(e) for e in slowest], "critical_path": [item(e) for e in path],
            "critical_s": round(sum(e.seconds for e in path), 3)}


def build_lines(text: str) -> list[dict[str, Any]]:
    """AITER's JIT build lines in a log: ``[{"module", "cost_s", "failed", "dir"}]`` in order, one per
    ``finish build`` (a ``start build`` without its finish, e.g. a killed process, gets ``cost_s`` None)."""
    out: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    for raw in text.splitlines():
        if "build [" not in raw:
            continue
        line = strip_ansi(raw)
        m = _START.search(line)
        if m:
            rec = {"module": m.group("md"), "cost_s": None, "failed": False, "dir": m.group("dir")}
            open_[m.group("md")] = rec
            out.append(rec)
            continue
        m = _FAILED.search(line)
        if m:
            rec = open_.get(m.group("md"))
            if rec is None:
                rec = {"module": m.group("md"), "cost_s": None, "failed": True, "dir": None}
                out.append(rec)
                open_[m.group("md")] = rec
            rec["failed"] = True
            continue
        m = _FINISH.search(line)
        if m:
            rec = open_.pop(m.group("md"), None)
            if rec is None:   # a log cut before its start line
                rec = {"module": m.group("md"), "cost_s": None, "failed": False, "dir": None}
                out.append(rec)
            rec["cost_s"] = round(float(m.group("s")), 3)
    return out
