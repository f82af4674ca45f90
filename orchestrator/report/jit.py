"""The report's "JIT cold builds" section (seed 004): per module built during the job, its wall time
(AITER's ``finish build`` cost and ninja's own), the slowest translation units and the critical path.

Context key read (``orchestrator.steps.jitprofile.collect``)::

    jit_profile: {"builds", "minimum",
                  "modules": [{"phase", "module", "reason", "cost_s", "failed", "builds", "node_log", "local_log",
                               "edges", "wall_s", "busy_s", "parallelism", "critical_s",
                               "slowest": [{"output", "seconds", "start_s", "end_s"}],
                               "critical_path": [{...same}]}],
                  "missing": [{"label", "jit_dir", "module"}]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .fmt import DASH

TOP = 8


def _s(x: Any) -> str:
    return DASH if x is None else f"{float(x):.1f}"


def jit_view(ctx: Mapping[str, Any], table_cls) -> dict[str, Any]:
    v: dict[str, Any] = {"has_jit": False, "jit_headline": "", "jit_modules": None, "jit_units": None,
                         "jit_paths": [], "jit_notes": []}
    prof = ctx.get("jit_profile") or {}
    mods = [dict(m) for m in prof.get("modules") or []]
    if not mods:
        return v
    v["has_jit"] = True
    total = sum(m["cost_s"] for m in mods if m.get("cost_s") is not None)
    worst = max(mods, key=lambda m: m.get("cost_s") or m.get("wall_s") or 0)
    v["jit_headline"] = (f"{len(mods)} module build(s) during the job, {total:.1f} s in total (AITER's "
                         f"'finish build' cost); the longest: {worst['module']} ({worst['phase']}, "
                         f"{_s(worst.get('cost_s') or worst.get('wall_s'))} s).")
    if prof.get("minimum") is not None:
        n = prof.get("builds") or len(mods)
        v["jit_headline"] += (f" {n} build(s) against a minimum of {prof['minimum']} for this job (each module "
                              "once per phase; none after promotion where it reused the after arm's module).")
    if any(m["phase"] == "after promotion" for m in mods):
        v["jit_headline"] += (" The builds after promotion were paid by the engaged-at-runtime check (a fresh "
                              "process on the live configuration): the next server start imports those modules.")
    t = table_cls(["phase", "module", "builds", "reason", "finish build s", "ninja wall s", "edges",
                   "parallelism", "critical path s", "slowest unit"],
                  [False, False, True, False, True, True, True, True, True, False])
    for m in mods:
        slow = (m.get("slowest") or [None])[0]
        t.add([m["phase"], m["module"] + (" (failed)" if m.get("failed") else ""), str(m.get("builds") or 0),
               m.get("reason") or DASH, _s(m.get("cost_s")),
               _s(m.get("wall_s")), DASH if not m.get("edges") else str(m["edges"]),
               DASH if m.get("parallelism") is None else f"{m['parallelism']:.1f}x", _s(m.get("critical_s")),
               f"{slow['output']} ({slow['seconds']:.1f} s)" if slow else DASH],
              row_class="regressed" if m.get("failed") else "")
    v["jit_modules"] = t
    units = sorted(((m, u) for m in mods for u in m.get("slowest") or []), key=lambda mu: -mu[1]["seconds"])[:TOP]
    ut = table_cls(["translation unit", "module", "phase", "seconds", "% of module wall"],
                   [False, False, False, True, True])
    for m, u in units:
        share = (f"{u['seconds'] / m['wall_s'] * 100:.0f}%" if m.get("wall_s") else DASH)
        ut.add([u["output"], m["module"], m["phase"], f"{u['seconds']:.1f}", share])
    v["jit_units"] = ut
    for m in mods:
        path = m.get("critical_path") or []
        if path:
            chain = " -> ".join(f"{u['output']} ({u['seconds']:.1f} s)" for u in path)
            v["jit_paths"].append(f"{m['module']} ({m['phase']}): {chain} = {m['critical_s']:.1f} s of "
                                  f"{_s(m.get('wall_s'))} s ninja wall")
        elif m.get("node_log") is None:
            v["jit_notes"].append(f"{m['module']} ({m['phase']}): 'finish build' logged but no .ninja_log on "
                                  "the node (build dir removed, e.g. by AITER_REBUILD=1 in a later process)")
        if m.get("truncated"):
            v["jit_notes"].append(f"{m['module']} ({m['phase']}): .ninja_log read from its tail (large log)")
    for miss in prof.get("missing") or []:
        v["jit_notes"].append(f"no .ninja_log for {miss.get('module')} under {miss.get('jit_dir')} "
                              f"({miss.get('label')})")
    return v
