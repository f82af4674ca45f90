"""Compare and report: read the pulled bench logs and tuned CSV, compare with pandas, render reports."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

from ..context import Ctx
from ..parsing.csvtools import diff_tuned, read_tuned_csv
from ..report import render_report
from ..records import NodePaths
from ..state import Status, atomic_write
from .bench import measured_by_call, plan_bench
from ..outcome.compare import Comparison, compare, norm_key_value
from .fetch import pull, wanted_files
from .jitprofile import collect as jit_collect
from .prepare import SAMPLE_MARK


def tuned_outcome(ctx: Ctx) -> dict:
    """Which requested shapes have a row for this GPU in the tuned CSV now (and which found no kernel).

    Also notes rows tuned for another GPU (gfx/cu_num): AITER never matches them here (e.g. rows tuned
    on an MI308X, cu_num 80, are ignored on an MI300X, cu_num 304; aiter-formats.md §7).
    """
    job, variant = ctx.job, ctx.variant
    local = ctx.job_dir / Path(job.remote.tuned_csv).name
    if not local.is_file():
        return {"tuned": [], "no_kernel": list(job.shapes), "rows_before": 0, "rows_after": 0}
    full = read_tuned_csv(str(local))
    cols = {c.lower(): c for c in full.columns}
    mine = full.index == full.index
    if "gfx" in cols and job.facts.gfx:
        mine &= full[cols["gfx"]].astype(str) == str(job.facts.gfx)
    if "cu_num" in cols and job.facts.cu_num:
        mine &= full[cols["cu_num"]].astype(str).map(norm_key_value) == norm_key_value(job.facts.cu_num)
    foreign = full[~mine]
    if len(foreign):
        others = sorted({f"{r.get(cols.get('gfx', ''), '') or '?'}/cu_num={norm_key_value(r[cols['cu_num']])}"
                         for _, r in foreign.iterrows()} if "cu_num" in cols else {"?"})
        job.note(f"{len(foreign)} row(s) of {Path(job.remote.tuned_csv).name} were tuned for another GPU "
                 f"({', '.join(others[:5])}); AITER never uses them on this {job.facts.gfx} with "
                 f"cu_num={job.facts.cu_num}")
    df = full[mine]
    keys = [c for c in variant.key_columns if c in cols]
    have = {tuple(norm_key_value(r[cols[c]]) for c in keys) for _, r in df.iterrows()}
    tuned, missing = [], []
    for s in job.shapes:
        (tuned if tuple(norm_key_value(s[c]) for c in keys) in have else missing).append(s)
    out = {"tuned": tuned, "no_kernel": missing, "rows_before": 0, "rows_after": len(full),
           "kernels": _kernels(df, cols, keys, job.shapes)}
    backup = job.remote.tuned_backup
    bpath = ctx.job_dir / "backup" / Path(backup).name if backup else None
    if bpath is not None and bpath.is_file():
        old = read_tuned_csv(str(bpath))
        out["rows_before"] = len(old)
        out.update(_key_changes(ctx, old, full))
    return out


def _kernels(df, cols: dict, keys: list[str], shapes: list[dict]) -> list[dict]:
    """The kernel the table now holds for each of the job's shapes (P-11): kernelName (MoE: stage 1 + 2),
    splitK, the tuner's us and TFLOPS, in the order the shapes were tuned."""
    names = [cols[c] for c in sorted(cols) if c.startswith("kernelname")]
    rows = {}
    for _, r in df.iterrows():
        rows[tuple(norm_key_value(r[cols[c]]) for c in keys)] = r
    out = []
    for s in shapes:
        r = rows.get(tuple(norm_key_value(s[c]) for c in keys))
        if r is None:
            continue
        out.append({**{c: s[c] for c in keys},
                    "kernel": " + ".join(str(r[n]) for n in names if str(r[n]) not in ("", "nan", "None")) or None,
                    **{k: norm_key_value(r[cols[k.lower()]]) for k in ("splitK", "us", "tflops")
                       if k.lower() in cols}})
    return out


def _key_changes(ctx: Ctx, old, new) -> dict:
    """Keys added / changed (kernel or config) / removed between the table before tuning and after (C-11):
    a row count hides replaced rows and rows the tuner dropped (FmoeTuner drops `_tag` rows, sortResults
    dedups). A key that vanished is said in a note."""
    d = diff_tuned(old, new)
    counts = d["status"].value_counts().to_dict() if len(d) else {}
    res = {"keys_added": int(counts.get("only_b", 0)), "keys_changed": int(counts.get("changed", 0)),
           "keys_removed": int(counts.get("only_a", 0))}
    if res["keys_removed"]:
        gone = d[d["status"] == "only_a"]
        cols = [c for c in d.columns if c.lower() in ("gfx", "cu_num", *ctx.variant.key_columns)]
        sample = "; ".join(" ".join(f"{c}={norm_key_value(r[c])}" for c in cols) for _, r in gone.head(3).iterrows())
        ctx.job.note(f"{res['keys_removed']} key(s) of {Path(ctx.job.remote.tuned_csv).name} as it was before "
                     f"tuning are gone from the tuned table (e.g. {sample}); the promoted live table keeps them "
                     "(promotion merges rows in, it never drops any)")
    return res


def split_samples(text: str, arm: str) -> list[str]:
    """The benchmark runs of one arm in a bench log, cut at prepare's sample marker lines (a log without
    markers, from an older job, is one run)."""
    mark = re.compile(rf"^{re.escape(SAMPLE_MARK)} (\w+) (\d+)\s*$", re.M)
    found = list(mark.finditer(text))
    if not found:
        return [text]
    return [text[m.end():found[i + 1].start() if i + 1 < len(found) else len(text)]
            for i, m in enumerate(found) if m.group(1) == arm]


def run_compare(ctx: Ctx) -> None:
    job, variant = ctx.job, ctx.variant
    pull(ctx, wanted_files(ctx, ctx.job_dir))
    info = job.step_state("compare").info
    info["tuned"] = tuned_outcome(ctx)
    from .remote import settle_tuning_results
    settle_tuning_results(ctx)
    logs = job.remote.logs or {}
    before_log = ctx.job_dir / "logs" / Path(logs.get("baseline", "-")).name
    after_log = ctx.job_dir / "logs" / Path(logs.get("after", "-")).name
    if variant.bench is None or not before_log.is_file() or not after_log.is_file():
        info["skipped"] = "no benchmark logs"
        return
    results: dict[str, list[dict]] = {}
    errors: dict[str, list[dict]] = {}
    # the error column next to the metric (`ck us` -> `ck err`, `us` -> `err`; aiter-formats.md §4), P-05
    err_spec = dataclasses.replace(variant.bench, metric=" ".join([*variant.bench.metric.split()[:-1], "err"]))
    # each call's output section is matched against that call's shapes only (C-19): bench_argv[i] is call i
    by_args = {c.args: c.shapes for c in plan_bench(variant, job.shapes)}
    call_shapes = [by_args.get(tuple(a[1:]), job.shapes) for a in job.remote.bench_argv or []]
    for side, path in (("before", before_log), ("after", after_log)):
        results[side], errors[side] = [], []
        for text in split_samples(path.read_text(encoding="utf-8", errors="replace"), side):
            results[side].extend(measured_by_call(variant.bench, job.shapes, text, call_shapes))
            errors[side].extend(measured_by_call(err_spec, job.shapes, text, call_shapes))
    comp = compare(results["before"], results["after"], key_columns=variant.key_columns,
                   metric=variant.bench.metric, higher_is_better=variant.bench.higher_is_better, judge=True)
    comp.set_errors(errors["before"], errors["after"])
    if comp.summary.get("err_worse"):
        job.note(f"{comp.summary['err_worse']} shape(s) have a larger benchmark error ({err_spec.metric}) after "
                 "tuning (comparison.csv err_worse): check them before keeping their rows")
    comp.to_csv(ctx.job_dir / "comparison.csv")
    atomic_write(ctx.job_dir / "comparison.json", json.dumps(comp.to_dict(), default=str).encode())
    info["summary"] = comp.summary
    info["measured"] = {k: len(v) for k, v in results.items()}
    if not results["before"] and not results["after"]:
        job.note(f"the benchmark printed no {variant.bench.metric!r} values (see the bench logs)")


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
        "simulated": bool(job.request.get("demo_dir")),
        "promotion": _promotion(job),
        "engaged": job.step_state("promote").info.get("engaged"),
        "jit_profile": _saved_jit_profile(ctx) if saved else jit_collect(ctx),
        "outcome_changes": job.step_state("promote").info.get("later") or [],
        "serving": {"command": job.request.serve_cmd,
                    "rows": job.step_state("promote").info.get("serving")},
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


def run_report(ctx: Ctx) -> None:
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
