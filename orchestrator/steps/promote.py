"""Promote: merge the proven rows of the staging table into the live table (node op `promote`, after a
backup), move the stale live JIT module aside so a fresh process builds it from the new table; rollback.

Modes (run --promote, tune-remote promote --rows): ``proven`` = rows whose verdict is ``improved``;
``all`` = every tuned row of the requested shapes; ``none`` = the live table and modules stay untouched.
What was promoted is recorded in the job's state and on the node (``<job dir>/promotion/promotion.json``),
so promote and rollback are idempotent.
"""

from __future__ import annotations

import json
import time

from ..context import Ctx
from ..errors import TuneRemoteError, UsageError
from ..state import JobState, atomic_write
from ..outcome.compare import Comparison, norm_key_value
from ..variants import table_modules

MODES = ("proven", "all", "none")
def backup_dir(ctx: Ctx) -> str:
    return f"{ctx.job.remote.job_dir}/promotion"


def _comparison(ctx: Ctx) -> Comparison | None:
    path = ctx.job_dir / "comparison.json"
    if not path.is_file():
        return None
    return Comparison.from_dict(json.loads(path.read_text()))


def chosen_keys(ctx: Ctx, mode: str) -> list[list]:
    """Key values (variant key column order) of the rows to promote."""
    cols = list(ctx.variant.key_columns)
    if mode == "all":
        tuned = ctx.job.step_state("compare").info.get("tuned") or {}
        return [[s.get(c) for c in cols] for s in tuned.get("tuned") or []]
    comp = _comparison(ctx)
    if comp is None or not comp.judged:
        return []
    rows = comp.rows[comp.rows["verdict"] == "improved"]
    return [[norm_key_value(r[c]) if c in comp.rows.columns else None for c in cols] for _, r in rows.iterrows()]


def refuse_unparsable(ctx: Ctx, keys: list[list]) -> list[list]:
    """The keys whose tuned row names a FlyDSL kernel AITER's runtime cannot parse are never promoted: AITER
    would log a hit and run another kernel (aiter#2817, #5069). The job notes each one."""
    from ..parsing.audit import unparsable_kernel
    cols = list(ctx.variant.key_columns)
    gfx = getattr(getattr(ctx.job, "facts", None), "gfx", None)      # a gfx1250 row goes to the WMMA runner
    kernels = (ctx.job.step_state("compare").info.get("tuned") or {}).get("kernels") or []
    bad = {tuple(norm_key_value(k.get(c)) for c in cols): (k.get("kernel"), why) for k in kernels
           for why in [unparsable_kernel(k.get("kernel"), gfx=gfx)] if why}
    kept = []
    for key in keys:
        hit = bad.get(tuple(norm_key_value(v) for v in key))
        if hit is None:
            kept.append(key)
        else:
            ctx.job.note(f"not promoted: {dict(zip(cols, key))}: {hit[0]}: {hit[1]}")
    return kept


def _others(ctx: Ctx) -> list[str]:
    """Tables AITER merges with the live one at runtime (their keys must never be duplicated)."""
    variant, remote = ctx.variant, ctx.job.remote
    configured = ({**(ctx.job.facts.env or {}), **ctx.target.container.env}.get(variant.config_env) or "")
    if configured:
        return [p for p in configured.split(":")[1:] if p]
    base = variant.tuned_csv.rsplit("/", 1)[-1].removesuffix(".csv")
    return [f"{remote.aiter_root}/aiter/configs/model_configs/*{base}*.csv"]


def promote(ctx: Ctx, mode: str, then=None) -> dict:
    """Promote the job's rows in `mode`; returns the node's record (``already`` when nothing changed).
    ``then(keys)``: ops ``[(name, request)]`` to run right after it, in the same round trip; their answers
    are the record's ``then``."""
    job, variant = ctx.job, ctx.variant
    if mode not in MODES:
        raise UsageError(f"unknown promote mode {mode!r}", hint="one of: " + ", ".join(MODES))
    keys = refuse_unparsable(ctx, chosen_keys(ctx, mode))
    after = then(keys) if then and keys else []
    req = {
        "live": job.remote.live_csv, "staging": job.remote.tuned_csv, "backup_dir": backup_dir(ctx),
        "key_columns": list(variant.key_columns), "keys": [[str(v) for v in k] for k in keys],
        "gfx": job.facts.gfx,  # used only when the table has a gfx column
        "cu_num": str(job.facts.cu_num) if job.facts.cu_num is not None else None,
        "others": _others(ctx), "modules": table_modules(variant.name, ctx.profile.name),
        "package_dir": job.facts.package_dir,
        "jit_dir_env": ({**(job.facts.env or {}), **ctx.target.container.env}.get("AITER_JIT_DIR")),
        "mode": mode,
        "merge_rule": ctx.profile.merge_rule,    # probed: does a duplicate key across the merged tables raise?
        # the after arm built these modules from the staging table: reused when the promoted table equals it
        "built_dir": ((job.remote.get("bench_env") or {}).get("after") or {}).get("AITER_JIT_DIR"),
    }
    answers = ctx.call_batch([("promote", req), *after]) if after else [ctx.call("promote", req)]
    res = answers[0]
    res.pop("ok", None)
    if not res.get("nothing"):     # the node's record only: never ``then``, nor this call's own keys
        job.remote.promotion = {"mode": mode, **{k: v for k, v in res.items() if k != "promoted_now"}}
    _mark(ctx, res)
    if after:
        res["then"] = answers[1:]
    return res


def _mark(ctx: Ctx, res: dict) -> None:
    """Write the promoted flags into comparison.csv/json (key values without the gfx/cu_num prefix)."""
    comp = _comparison(ctx)
    if comp is None or not comp.judged:
        return
    n = len(ctx.variant.key_columns)
    keys = [] if res.get("rolled_back") else [k[-n:] for k in res.get("promoted") or []]
    comp.set_promoted(keys)
    comp.to_csv(ctx.job_dir / "comparison.csv")
    atomic_write(ctx.job_dir / "comparison.json", json.dumps(comp.to_dict(), default=str).encode())


def rollback(ctx: Ctx) -> dict:
    """Undo the job's promotion(s): the live table and module as before its FIRST promotion."""
    res = ctx.call("rollback", {"backup_dir": backup_dir(ctx)})
    res.pop("ok", None)
    ctx.job.remote.promotion = {**(ctx.job.remote.promotion or {}), **res}
    _mark(ctx, res)
    if not res.get("already"):
        later_change(ctx, "rollback", f"the live table and JIT module are as before the job's first promotion "
                     f"({res.get('rounds_undone') or 1} promotion(s) undone, {len(res.get('promoted') or [])} "
                     "row(s)); nothing of this job is promoted now")
    return res


def later(ctx: Ctx, mode: str) -> dict:
    """``tune-remote promote JOB --rows MODE`` on a finished job: the rows of MODE not promoted yet (a first
    promotion, or the next round of an earlier one), then the engaged-at-runtime check of every promoted
    shape (it also builds the live module from the new table). Repeating it changes nothing (``already``)."""
    res = promote(ctx, mode)
    now = res.get("promoted_now") or []
    if res.get("already") or res.get("nothing") or not now:
        return res
    info = ctx.job.step_state("promote").info
    info.update({k: res.get(k) for k in ("added", "replaced", "skipped_duplicates", "backup", "modules",
                                         "shadowed", "overrides")})
    info.update(mode=mode, promoted=len(res.get("promoted") or []))
    duplicate_notes(ctx, res)
    rounds = res.get("rounds") or [res]
    later_change(ctx, f"promote --rows {mode}", f"{len(now)} more row(s) promoted ({info['promoted']} in all, "
                 f"promotion {len(rounds)} of the job; backup of the live table before it: "
                 f"{rounds[-1].get('backup') or 'none, it did not exist'})")
    try:
        info["engaged"] = engaged_at_runtime(ctx, res)
    except TuneRemoteError as exc:
        info.pop("engaged", None)
        ctx.job.note(f"engaged-at-runtime check after `tune-remote promote` failed: {exc.one_line()}")
    return res


def duplicate_notes(ctx: Ctx, res: dict) -> None:
    """What promotion did about keys another merged table holds, by the node's probed merge rule (issue 36):
    where a duplicate raises, they were not promoted; where the merge resolves it, which row AITER keeps."""
    resolve = ctx.profile.merge_resolves_duplicates
    for k in res.get("skipped_duplicates") or []:
        ctx.job.note(f"not promoted: {k} already has a row in another table AITER merges (model_configs/ "
                     "or AITER_CONFIG list); " + (
                         "one of the rows has no numeric us, which makes AITER's merge raise" if resolve else
                         f"a duplicate key makes AITER {ctx.job.facts.version}'s merge raise"))
    rounds = res.get("rounds") or [res]
    last = rounds[-1] if res.get("promoted_now") else {}
    for x in last.get("shadowed") or []:
        ctx.job.note(f"promoted but shadowed: {x['key']} also has a row in {x['by']} (us {x['by_us']}); AITER's "
                     f"merge keeps that row (lowest us), so the promoted one (us {x['us']}) is ineffective while "
                     "that table is merged")
    for x in last.get("overrides") or []:
        files = ", ".join(f"{o['file']} (us {o['us']})" for o in x["over"])
        ctx.job.note(f"promoted: {x['key']} also has a row in {files}; AITER's merge keeps the promoted row "
                     f"(us {x['us']}, lowest) and that row is shadowed")


def later_change(ctx: Ctx, command: str, what: str) -> None:
    """A command run after the job changed its outcome: kept for the report's first lines."""
    ctx.job.step_state("promote").info.setdefault("later", []).append(
        {"command": f"tune-remote {command}", "at": time.time(), "what": what})


def run(ctx: Ctx) -> None:
    """The workflow step (after compare): promote per run --promote (default proven)."""
    mode = ctx.job.request.promote or "proven"
    info = ctx.job.step_state("promote").info
    info["mode"] = mode
    if mode == "none":
        ctx.ui.event("--promote none: the live table and JIT modules stay untouched")
        serve_after(ctx)
        return
    asked: list[list] = []

    ahead: list = []

    def engage_run(keys: list[list]) -> list:
        """The engaged check's benchmark rides with the promotion, then the JIT logs of what it built."""
        from .engage import run_request
        from .jitprofile import ahead_request
        asked[:] = keys
        req = run_request(ctx, keys)
        if not req:
            return []
        jit = ahead_request(ctx, ctx.job.step_state("remote").info.get("node_now"))
        ahead[:] = [jit] if jit else []
        return [("run", req), *([("jit_logs", jit)] if jit else [])]

    res = promote(ctx, mode, then=engage_run)
    then = res.pop("then", None) or [None]
    ran = then[0]
    if ahead and len(then) > 1:         # for the report step's JIT profile (in memory; a resume asks again)
        ctx.prefetched["jit_logs"] = (ahead[0], then[1])
    info.update({k: res.get(k) for k in ("added", "replaced", "skipped_duplicates", "backup", "modules",
                                         "shadowed", "overrides")})
    info["promoted"] = len(res.get("promoted") or [])
    duplicate_notes(ctx, res)
    ctx.ui.event(f"promoted {info['promoted']} row(s) ({mode}) into {ctx.job.remote.live_csv}"
                 + (f" (backup {res['backup']})" if res.get("backup") else ""))
    if info["promoted"]:
        info["engaged"] = eng = engaged_at_runtime(ctx, res, ran, asked)
        ctx.ui.event(f"engaged at runtime: not checked ({eng['unchecked']})" if eng.get("unchecked") else
                     f"engaged at runtime: {eng['engaged']}/{eng['total']} promoted "
                     "shape(s) hit their tuned row in a fresh process")
    serve_after(ctx)


def engaged_at_runtime(ctx: Ctx, res: dict, ran: dict | None = None, asked: list[list] | None = None) -> dict:
    from .engage import check
    comp = _comparison(ctx)
    rows = {}
    if comp is not None:
        for _, r in comp.rows.iterrows():
            rows[tuple(norm_key_value(r[c]) for c in ctx.variant.key_columns)] = {
                "before": None if r["before"] != r["before"] else float(r["before"]),
                "after": None if r["after"] != r["after"] else float(r["after"]),
                # the shape's run-to-run noise: a fresh sample is judged against it (engage.time_says_stale)
                "noise_pct": (None if "noise_pct" not in r or r["noise_pct"] != r["noise_pct"]
                              else float(r["noise_pct"]))}
    cols = list(ctx.variant.key_columns)    # the kernel each tuned row names: a hit line naming another is not it
    for k in (ctx.job.step_state("compare").info.get("tuned") or {}).get("kernels") or []:
        key = tuple(norm_key_value(k.get(c)) for c in cols)
        if key in rows and k.get("kernel"):
            rows[key]["kernel"] = k["kernel"]
    n = len(cols)
    return check(ctx, [k[-n:] for k in res.get("promoted") or []], rows, res.get("skipped_duplicates") or [],
                 ran=ran, ran_keys=asked)


def serve_after(ctx: Ctx) -> None:
    """--serve-cmd again after promotion, judged, and a regression rolled back (steps/serving_check.py)."""
    from .serving_check import after
    after(ctx, rollback)


def promote_summary(job: JobState, res: dict) -> dict:
    """What `promote` prints for one job: its totals, what this call added, what a rollback would restore."""
    rounds = res.get("rounds") or ([res] if res.get("promoted") else [])
    eng = job.step_state("promote").info.get("engaged") or {}
    out = {"live": res.get("live"), "already": bool(res.get("already")),
           "promoted": len(res.get("promoted") or []), "promoted_now": len(res.get("promoted_now") or []),
           "promotions": len(rounds),
           "backup": (rounds[-1].get("backup") if rounds else None),
           "rollback_restores": (res.get("backup") or "(no table: rollback removes it)") if rounds else None,
           "skipped_duplicates": res.get("skipped_duplicates") or [],
           "shadowed": res.get("shadowed") or []}     # promoted rows a resolving merge ranks below another's
    if res.get("promoted_now") and eng:
        out["engaged"] = f"{eng.get('engaged', 0)}/{eng.get('total', 0)}"
        if eng.get("unchecked"):
            out["engaged_unchecked"] = eng["unchecked"]
    return out


def rollback_summary(res: dict) -> dict:
    n = len(res.get("rounds") or [res])
    return {"live": res.get("live"), "already": bool(res.get("already")), "restored_from": res.get("backup"),
            "restored": (("the live table as it was before the job's first promotion" if res.get("backup") else
                          "no live table, as before the job's first promotion (the file it created is removed)")
                         + f" ({n} promotion(s) undone)"),
            "modules": res.get("modules")}
