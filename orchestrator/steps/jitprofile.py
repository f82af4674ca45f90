"""JIT cold-build profile of the modules the job built (seed 004), for the report.

Where the job builds modules: the before and after benchmarks in their private JIT dirs
(``<job>/jit/before``, ``<job>/jit/after``; the after arm's first run with ``AITER_REBUILD=1``), the tuner's
``module_*_tune`` and, after promotion, the engaged-at-runtime fresh process (it rebuilds the live module
from the promoted table, and builds any module the live dir lacked) in the live JIT dir. For each, the ``finish build [md], cost N s`` lines of that
step's log and the module's ``.ninja_log`` (node op ``jit_logs``) give: wall time per module, the slowest
translation units, the critical path (``orchestrator.parsing.ninjalog``). The logs are kept under
``<job>/jit/<phase>/<module>.ninja_log``; the profile under ``<job>/jit_profile.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..context import Ctx
from ..errors import RemoteCommandError
from ..parsing.ninjalog import build_lines, parse_ninja_log, profile
from ..state import atomic_write

# phase label, the step's log (remote.logs key, or a file in the job dir), the bench arm whose JIT dir it is
PHASES = (("before benchmark", "baseline", "before"), ("tuning", "tune", None),
          ("after benchmark", "after", "after"), ("after promotion", "engaged_at_runtime.log", None))


def _log_text(ctx: Ctx, name: str) -> str:
    if name.endswith(".log"):
        path = ctx.job_dir / name
    else:
        node = (ctx.job.remote.logs or {}).get(name)
        if not node:
            return ""
        path = ctx.job_dir / "logs" / Path(node).name
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


LAST = PHASES[-1][0]    # after promotion: its builds happen in the promote step's round trip


def _dirs(ctx: Ctx, builds: dict[str, list[dict]], since: float | None = None) -> list[dict]:
    """The jit_logs request's dirs. With ``since`` (a node time, before the engaged check ran), the last
    phase asks for every module the live dir built from then on: sent ahead, with the promotion."""
    job, arms = ctx.job, ctx.job.remote.bench_env or {}
    env = {**(job.facts.env or {}), **ctx.target.container.env}
    dirs = []
    for label, _log, arm in PHASES:
        if arm:
            jit_dir = (arms.get(arm) or {}).get("AITER_JIT_DIR")
            if jit_dir:   # private: everything built there was built by this job
                dirs.append({"label": label, "jit_dir": jit_dir, "modules": None})
        elif builds.get(label) or (since is not None and label == LAST):
            live = {"label": label, "jit_dir": None, "package_dir": job.facts.package_dir,
                    "jit_dir_env": env.get("AITER_JIT_DIR")}
            if since is not None and label == LAST:
                dirs.append({**live, "modules": None, "since": since})
            else:
                dirs.append({**live, "modules": sorted({b["module"] for b in builds[label]})})
    return dirs


def ahead_request(ctx: Ctx, since: float | None) -> dict | None:
    """jit_logs for the promote step's batch (after the engaged check's benchmark); None without a node time."""
    if since is None:
        return None
    builds = {label: build_lines(_log_text(ctx, log)) for label, log, _arm in PHASES if label != LAST}
    return {"dirs": _dirs(ctx, builds, since)}


def _from_ahead(ahead: tuple[dict, dict], dirs: list[dict]) -> dict | None:
    """The answer to ``dirs`` cut from the one sent ahead, or None when that asked for something else."""
    req, answer = ahead
    sent = {d["label"]: d for d in req["dirs"]}
    wanted: set = set()
    for d in dirs:
        a = sent.get(d["label"])
        if d["label"] == LAST:
            if a is None or {**a, "modules": d["modules"]} != {**d, "since": a.get("since")}:
                return None
            wanted = set(d["modules"])
        elif a != d:
            return None
    if len(sent) != len(dirs) + (LAST in sent and all(d["label"] != LAST for d in dirs)):
        return None
    logs = [e for e in answer.get("logs") or [] if e["label"] != LAST or e["module"] in wanted]
    got = {e["module"] for e in logs if e["label"] == LAST}
    missing = [m for m in answer.get("missing") or [] if m.get("label") != LAST]
    live = next((e["jit_dir"] for e in answer.get("logs") or [] if e["label"] == LAST), None)
    missing += [{"label": LAST, "jit_dir": live, "module": m} for m in sorted(wanted - got)]
    return {"logs": logs, "missing": missing}


def collect(ctx: Ctx) -> dict[str, Any] | None:
    """The profile (``{"modules": [...], "missing": [...]}``) or None when the job built nothing."""
    job = ctx.job
    builds = {label: build_lines(_log_text(ctx, log)) for label, log, _arm in PHASES}
    dirs = _dirs(ctx, builds)
    ahead = ctx.prefetched.pop("jit_logs", None)
    if not dirs:
        return None
    res = _from_ahead(ahead, dirs) if ahead else None
    try:
        res = res or ctx.call("jit_logs", {"dirs": dirs})
    except RemoteCommandError as exc:
        job.note(f"JIT build profile missing: the node could not list the .ninja_log files ({exc.message})")
        res = {"logs": [], "missing": []}
    modules, seen = [], set()
    for entry in res.get("logs") or []:
        label, name = entry["label"], entry["module"]
        edges, version = parse_ninja_log(entry.get("text") or "")
        lines = [b for b in builds.get(label, []) if b["module"] == name]
        last = lines[-1] if lines else {}
        local = ctx.job_dir / "jit" / _slug(label) / f"{_slug(name)}.ninja_log"
        local.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(local, (entry.get("text") or "").encode())
        modules.append({"phase": label, "module": name, "cost_s": last.get("cost_s"), "failed": bool(last.get("failed")),
                        "builds": len(lines), "node_log": entry.get("path"), "local_log": str(local),
                        "truncated": bool(entry.get("truncated")), "log_version": version, **profile(edges)})
        seen.add((label, name))
    for label, lines in builds.items():   # a finish build line whose .ninja_log the node no longer has
        for b in lines:
            if (label, b["module"]) not in seen:
                seen.add((label, b["module"]))
                modules.append({"phase": label, "module": b["module"], "cost_s": b["cost_s"],
                                "failed": b["failed"], "builds": 1, "node_log": None, "local_log": None,
                                "truncated": False, "log_version": None, **profile([])})
    if not modules:
        return None
    minimum = _reasons(ctx, modules)
    out = {"modules": modules, "missing": [m for m in res.get("missing") or [] if m.get("module")],
           "builds": sum(m["builds"] for m in modules), "minimum": minimum}
    atomic_write(ctx.job_dir / "jit_profile.json", json.dumps(out, indent=1).encode())
    return out


WHY = {"before benchmark": "the live module was missing or not current for the live table: built from it in "
                           "the arm's private dir",
       "tuning": "the tuner's own module (every candidate instance), once per install",
       "after benchmark": "from the staging table (the tuned rows) in the arm's private dir",
       "after promotion": "promotion moved the live module aside; the engaged check's fresh process built it "
                          "from the promoted table"}


def _reasons(ctx: Ctx, modules: list[dict]) -> int:
    """Each build's reason (``reason``) and the job's minimum number of builds: each module once per phase,
    and none after promotion for a module promotion reused from the after arm (issue 26)."""
    rounds = (ctx.job.remote.get("promotion") or {}).get("rounds") or []
    reused = {Path(p).stem for r in rounds for p in r.get("reused_modules") or []}
    minimum = 0
    for m in modules:
        avoidable = m["phase"] == LAST and m["module"] in reused
        m["reason"] = ("rebuilt although promotion reused the after arm's module" if avoidable
                       else WHY.get(m["phase"], ""))
        if m["builds"] > 1:
            m["reason"] += f"; built {m['builds']} times (once is enough)"
        minimum += 0 if avoidable or not m["builds"] else 1
    return minimum
