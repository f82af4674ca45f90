"""The report step: the report's context from the job's state, rendered to report.md / report.html (and
again from the saved state after a later promote or rollback)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..context import Ctx
from ..outcome.compare import Comparison
from ..records import NodePaths
from ..report import render_report
from ..state import Status, atomic_write
from .jitprofile import collect as jit_collect


def report_context(ctx: Ctx, saved: bool = False) -> dict:
    """The report's context (keys documented in orchestrator/report/__init__.py). ``saved``: from the job's
    saved state only (a later re-render: the JIT profile from jit_profile.json, nothing asked of the node)."""
    job, remote = ctx.job, ctx.job.remote
    comp_info = job.step_state("compare").info
    comparison = None
    cjson = ctx.job_dir / "comparison.json"
    if cjson.is_file() and not comp_info.get("skipped"):
        comparison = Comparison.from_dict(json.loads(cjson.read_text()))
    sub = job.step_state("remote").info.get("sub", {})
    tuned = comp_info.get("tuned") or {}
    logs = remote.logs or {}
    facts = job.facts
    return {
        "job": {"id": job.job_id, "variant": job.variant, "node": job.node, "container": job.container,
                "started": job.created,
                "finished": (job.step_state("report").started or time.time()) if saved else time.time(),
                # rendered before the final fetch: the node's work is over, so say how it ended
                "state": "succeeded (partial tuning)" if job.step_state("remote").info.get("partial")
                else (Status.SUCCEEDED if job.state == Status.RUNNING else job.state)},
        "environment": {"aiter_version": _version_text(facts), "pip_name": facts.pip_name,
                        "install_mode": facts.install_mode, "aiter_root": facts.aiter_root,
                        "gfx": facts.gfx, "cu_num": facts.cu_num,
                        "gpu_count": facts.gpu_count, "free_gpus": facts.tune_gpus,
                        "profile": facts.profile,
                        "probed": "; ".join(facts.probed or []) or None,
                        "assumed": "; ".join(facts.assumed or []) or None},
        "shapes": {"source": "; ".join(job.step_state("shapes").info.get("sources", [])), "list": job.shapes},
        "bench": _bench_view(remote),
        "tuning": {
            "command": remote.tune_argv or [],
            "env": remote.tune_env or {},
            "rc": sub.get("tune", {}).get("rc"),
            "partial": bool(job.step_state("remote").info.get("partial")),
            "duration_s": _duration(sub),
            "rows_written": _rows_written(tuned),
            "keys_added_changed_removed": ([tuned.get(k) for k in ("keys_added", "keys_changed", "keys_removed")]
                                           if "keys_added" in tuned else None),
            "no_kernel": tuned.get("no_kernel", []),
            "kernels": tuned.get("kernels"),
        },
        "comparison": comparison,
        "moe_tuners": comp_info.get("moe_tuners"),
        "simulated": bool(job.request.get("demo_dir")),
        "promotion": _promotion(job),
        "engaged": job.step_state("promote").info.get("engaged"),
        "jit_profile": _saved_jit_profile(ctx) if saved else jit_collect(ctx),
        "outcome_changes": job.step_state("promote").info.get("later") or [],
        "serving": {"command": job.request.serve_cmd,
                    "rows": job.step_state("promote").info.get("serving"),
                    "verdict": job.step_state("promote").info.get("serving_verdict"),
                    "expected_gain_pct": (comp_info.get("summary") or {}).get("expected_e2e_gain_pct")},
        "sequential": comp_info.get("sequential"),
        "notes": list(job.notes),
        "logs": {name: {"node": path, "local": str(ctx.job_dir / "logs" / Path(path).name)}
                 for name, path in logs.items()},
        "tuned_csv": {"node_path": remote.tuned_csv, "backup_path": remote.tuned_backup,
                      "rows_added": tuned.get("keys_added", _rows_written(tuned)),
                      "local_path": str(ctx.job_dir / Path(remote.tuned_csv or "-").name)},
    }


def _rows_written(tuned: dict) -> int:
    """Rows the tuner wrote: keys added + keys whose row changed (the row-count difference for jobs from
    before C-11)."""
    if "keys_added" in tuned:
        return int(tuned["keys_added"]) + int(tuned["keys_changed"])
    return max(0, (tuned.get("rows_after") or 0) - (tuned.get("rows_before") or 0))


def _bench_view(remote: NodePaths) -> dict:
    shown = remote.bench_display
    if shown:   # every call, exactly as the node ran it (C-18)
        return {"before_command": "\n".join(shown.get("before") or []),
                "after_command": "\n".join(shown.get("after") or []),
                "env": {"runs per arm (interleaved)": remote.repeats, "pinned GPU": remote.bench_gpu,
                        "calls per run": len(shown.get("before") or []),
                        **({"JIT": remote.bench_jit} if remote.bench_jit
                           else {"AITER_REBUILD": "1 on the first after run only"})}}
    argv = ["python3", *(remote.bench_argv or [[]])[0]]
    arms = remote.bench_env or {}

    def line(arm: str, extra: str = "") -> str:
        return " ".join([extra, *(f"{k}={v}" for k, v in (arms.get(arm) or {}).items()), *argv]).strip()

    if not arms:  # a job from before staging
        return {"before_command": " ".join(argv), "after_command": "AITER_REBUILD=1 " + " ".join(argv),
                "env": {"AITER_REBUILD": "1 (after only)"}}
    return {"before_command": line("before"), "after_command": line("after", "AITER_REBUILD=1 (first run only)"),
            "env": {"runs per arm (interleaved)": remote.repeats, "pinned GPU": remote.bench_gpu}}


def _promotion(job) -> dict | None:
    mode = job.step_state("promote").info.get("mode") or job.request.promote
    if not mode:
        return None  # a job from before promotion existed
    return {"mode": mode, **(job.remote.promotion or {})}


def _duration(sub: dict):
    tune = sub.get("tune", {})
    after = sub.get("after", {})
    if tune.get("started") and after.get("started"):
        return round(after["started"] - tune["started"], 1)
    return None


def run(ctx: Ctx) -> None:
    md, html = render_report(report_context(ctx))
    atomic_write(ctx.job_dir / "report.md", md.encode())
    atomic_write(ctx.job_dir / "report.html", html.encode())
    ctx.job.remote.report_md_on_node = False   # the fetch step writes it there, in its first round trip
    ctx.ui.event(f"report: {ctx.job_dir / 'report.md'} (and on the node: {ctx.job.remote.report_md})")


def rerender_report(ctx: Ctx) -> None:
    """report.md / report.html again, from the job's saved state, after a later command (promote, rollback)
    changed the outcome; the node's copy follows (now when the node is at hand, else with the next fetch)."""
    if not (ctx.job_dir / "report.md").is_file():
        return                   # the job never reached its report: nothing to bring up to date
    md, html = render_report(report_context(ctx, saved=True))
    atomic_write(ctx.job_dir / "report.md", md.encode())
    atomic_write(ctx.job_dir / "report.html", html.encode())
    if ctx.job.remote.report_md:
        ctx.job.remote.report_md_on_node = False


def _saved_jit_profile(ctx: Ctx) -> dict | None:
    path = ctx.job_dir / "jit_profile.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except ValueError:
        return None


def _version_text(facts: dict):
    """The release, and the build as pip or git names it when that says more (``0.1.29 (0.1.29.post1+rocm10.1)``)."""
    version, raw = facts.get("version"), facts.get("version_raw")
    return f"{version} ({raw})" if raw and version and raw != version else version


def refresh_after(ctx: Ctx, res: dict) -> dict:
    """After a promote or rollback that changed the live table: the job's report (md + html) rendered again
    from its saved state, and its copy on the node written again in one round trip (else by the next fetch)."""
    if res.get("already") or res.get("nothing"):
        return res
    from ..errors import TuneRemoteError
    from .fetch import report_for_the_node
    rerender_report(ctx)
    writes = report_for_the_node(ctx)
    if writes:
        try:
            ctx.call("write_files", {"files": writes})
            ctx.job.remote.report_md_on_node = True
        except TuneRemoteError:
            pass                 # the next `tune-remote fetch` writes it
    return res
