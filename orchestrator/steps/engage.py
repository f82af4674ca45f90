"""Closed loop after promotion: does a fresh process now use the promoted rows ("engaged at runtime")?

The benchmarks of the promoted shapes run once more as a fresh process with the live configuration: the
container's own environment only (no AITER_CONFIG_* override, no private JIT dir, no AITER_REBUILD), plus
``AITER_LOG_TUNED_CONFIG=1`` (v0.1.6+) so AITER prints a "found ... is tuned" line per hit, on the job's
pinned GPU. This also builds the live JIT module from the new table (promotion moved the stale one aside),
so the next server start does not pay the build. Per shape: hit line (and through which padded M),
the time against the before/after medians, and why a shape is not engaged.
"""

from __future__ import annotations

import re

from ..context import Ctx
from ..remote.shell import Cmd
from .bench import announced, call_path, measured_by_call, plan_bench, prepare_ops
from .armargs import arm_args
from ..outcome.keys import norm_key_value
from ..shapelib.shapefmt import MX_START, parse_mx_lookup
from ..variants import jit_modules, table_modules

# GEMM / batched hit and miss lines (aiter-formats.md §3.1); MoE (§3.2) is judged by its time alone
_GEMM = re.compile(r"shape (?:is )?(?:B:\s*(?P<b>\d+), )?M:\s*(?P<m>\d+), N:\s*(?P<n>\d+), K:\s*(?P<k>\d+)")
_PADDED = re.compile(r"found padded_M: (\d+)")
_KERNEL = re.compile(r"kernel ?name is (\S+?)!", re.I)
_LIBTYPE = re.compile(r"libtype is (\w+)!")
_LOADED = re.compile(r"(?:import|finish build) \[(module_\w+)\]")


def lookup_hits(text: str) -> dict[tuple, dict]:
    """{(m, n, k) or (b, m, n, k): {"hit": bool, "padded_m": int|None}} from AITER's lookup lines."""
    out: dict[tuple, dict] = {}
    for line in text.splitlines():
        mx = MX_START.search(line)
        if mx:          # the MX asm GEMMs' own lines (A6W6/A6W4/A4W6/A16W8 MXFP8; shapefmt.parse_mx_lookup)
            _mx_hit(out, line[mx.start():])
            continue
        m = _GEMM.search(line)
        if not m:
            continue
        key = tuple(int(m.group(g)) for g in ("b", "m", "n", "k") if m.group(g) is not None)
        hit = "not found" not in line and ("is tuned" in line or "found padded_M" in line)
        p = _PADDED.search(line)
        cur = out.setdefault(key, {"hit": False, "padded_m": None, "kernel": None, "libtype": None})
        if hit:
            kn, lib = _KERNEL.search(line), _LIBTYPE.search(line)
            cur.update(hit=True, padded_m=int(p.group(1)) if p else None, kernel=kn.group(1) if kn else None,
                       libtype=lib.group(1) if lib else None)
    return out


def _mx_hit(out: dict, message: str) -> None:
    parsed = parse_mx_lookup(message)
    if parsed is None:
        return
    hit, _, shape, meta = parsed
    cur = out.setdefault((shape["m"], shape["n"], shape["k"]),
                         {"hit": False, "padded_m": None, "kernel": None, "libtype": None})
    if hit:
        cur.update(hit=True, padded_m=meta.get("padded_m"), kernel=meta.get("kernel"), libtype=None,
                   row=meta.get("row"))


STALE_K = 3.75   # one fresh sample must lie this many single-run sds from the after median to contradict it


def time_says_stale(now, before, after, noise_pct, hit: bool) -> bool:
    """Whether the fresh process's one time says the promoted row is NOT what runs (issue 37). When AITER's
    lookup line says the row was found (``hit``), the time is corroboration only: it contradicts the hit
    only when it lies beyond ``STALE_K`` x the shape's measured run-to-run sd from the after median and
    nearer the before median; a time inside the noise decides nothing. Without a lookup line (or without
    a noise estimate) the time alone decides, nearer the after median or not, as before issue 37."""
    if now is None or before is None or after is None:
        return True
    nearer_before = abs(now - before) <= abs(now - after)
    if not hit or noise_pct is None or not after:
        return nearer_before
    try:
        noise = float(noise_pct)
    except (TypeError, ValueError):
        return nearer_before
    if noise != noise:          # NaN: no noise estimate
        return nearer_before
    return nearer_before and abs(now / after - 1.0) * 100.0 > STALE_K * noise


def not_engaged_reason(skipped: bool, now, h: dict | None, lk: tuple | None, own: str | None, loaded: set,
                       near_after: bool, promoted_kernel: str | None = None, merge_resolves: bool = False) -> str:
    """Why a promoted shape is not engaged ("" when it is), from what AITER said first (issue 37: its lookup
    line, the kernel that line names against the promoted row's, the module it loaded), the time last."""
    if skipped:
        return "duplicate key in model_configs/ (not promoted)"
    if now is None:
        return "the fresh process printed no value for it"
    if h is not None and not h["hit"]:
        return ("no tuned row matched at runtime (gfx/cu_num of the row differ from the running GPU's, "
                "or CU_NUM/GPU_ARCHS overrides)")
    if h is not None and h.get("row"):          # an MX asm GEMM's padded match (M/N to 256, K to 128)
        return "served through the padded row M:%d N:%d K:%d, not its own row" % tuple(h["row"])
    if h is not None and lk is not None and h["padded_m"] not in (None, lk[-3]):
        return f"served through the padded-M bucket M={h['padded_m']}, not its own row"
    found = (h or {}).get("kernel")
    if found and promoted_kernel and " + " not in promoted_kernel and found != promoted_kernel:
        if merge_resolves:      # the node's merge keeps the lowest-us row of a key (probed, issue 36)
            return (f"the lookup found another row (kernel {found}), not the promoted one ({promoted_kernel}): "
                    "another table AITER merges holds this key with a lower us, and its merge keeps that row "
                    "(shadowed)")
        return (f"the lookup found another row (kernel {found}), not the promoted one ({promoted_kernel}): a "
                "file read before the live table holds this key (AITER_CONFIG_* order, model_configs/)")
    if own and own not in loaded:
        return f"a {own.rsplit('_', 1)[-1]} row, but the fresh process did not load its module {own}"
    if not near_after:
        return "time as before promotion: stale JIT module (restart the server / AITER_REBUILD=1)"
    return ""


def _own_module(ctx: Ctx, h: dict | None) -> str | None:
    """The module a hit row is compiled into when it is not the table's main one: a cktile row (its
    libtype, or a cktile kernel name) is served through the table's ``*_cktile`` module (issue 26)."""
    if not h or not h["hit"]:
        return None
    cktile = h.get("libtype") == "cktile" or "cktile" in (h.get("kernel") or "")
    mods = [m for m in table_modules(ctx.variant.name, ctx.profile.name) if m.endswith("_cktile")]
    return mods[0] if cktile and mods else None


def lookup_key(variant, shape: dict) -> tuple | None:
    cols = [c for c in ("b", "m", "n", "k") if c in variant.key_columns]
    if "m" not in cols:
        return None
    return tuple(int(shape[c]) for c in cols)


def _wanted(ctx: Ctx, keys: list[list]) -> list[dict]:
    cols = list(ctx.variant.key_columns)
    wanted = {tuple(norm_key_value(v) for v in k) for k in keys}
    return [s for s in ctx.job.shapes if tuple(norm_key_value(s[c]) for c in cols) in wanted]


def unplanned(variant, remote, calls: list) -> str | None:
    """Why a --run_config benchmark cannot run again for the engaged check (None: it can): prepare planned none
    (the node's tuner --help has no --run_config, or the job was prepared before its variant had a benchmark:
    no shapes CSV on the node), which ``bench_run_as`` shows (prepare records every call it planned)."""
    if variant.bench is None or variant.bench.style != "run_config":
        return None
    run_as = dict(getattr(remote, "bench_run_as", None) or {})
    if calls and any(c.script not in run_as for c in calls):
        return "its --run_config benchmark did not run in this job, so the fresh process was not measured"
    return None


def run_request(ctx: Ctx, keys: list[list]) -> dict | None:
    """The helper ``run`` request of the fresh-process benchmark of ``keys`` (the shapes about to be
    promoted), for the promote step to send in its own round trip; None when it cannot go that way (no
    benchmark, nothing to run, or a bench script prepare did not check)."""
    variant, remote = ctx.variant, ctx.job.remote
    shapes = _wanted(ctx, keys)
    if not shapes or variant.bench is None:
        return None
    calls = plan_bench(variant, shapes)
    run_as = dict(remote.bench_run_as or {})     # prepare's checked (maybe patched) scripts
    if any(c.checked and c.script not in run_as for c in calls) or unplanned(variant, remote, calls):
        return None
    return _request(ctx, calls, run_as, {})


def _request(ctx: Ctx, calls: list, run_as: dict, prepared: dict) -> dict:
    job, remote, root = ctx.job, ctx.job.remote, ctx.job.remote.aiter_root
    # AITER_LOG_TUNED_CONFIG exists from v0.1.6 on (older than every supported profile)
    env = {"HIP_VISIBLE_DEVICES": str(remote.bench_gpu or job.facts.tune_gpus[0]),
           "AITER_LOG_TUNED_CONFIG": "1"}
    configured = {**(job.facts.env or {}), **ctx.target.container.env}.get(ctx.variant.config_env)
    if configured:      # the tables the server's AITER reads (a list it merges): the fresh process reads them too
        env[ctx.variant.config_env] = configured
    cmds = [Cmd((ctx.target.container.python,
                 run_as.get(c.script) or prepared.get(id(c), {}).get("script") or call_path(c, remote),
                 *arm_args(c.args, "live", remote)), env=env, cwd=root) for c in calls
            if arm_args(c.args, "live", remote) is not None]
    # every call in one command (one round trip, issue 9), each announced by its call mark (C-19)
    return {"argv": ["sh", "-c", announced(cmds, "2>&1")], "timeout_s": 3600}


def check(ctx: Ctx, promoted_keys: list[list], comparison_rows: dict[tuple, dict], skipped: list,
          ran: dict | None = None, ran_keys: list[list] | None = None) -> dict:
    """Judge each promoted shape from the fresh-process benchmark: ``ran`` is the helper ``run`` answer of
    ``run_request(ctx, ran_keys)`` (sent with the promotion, for the keys asked to be promoted: a superset);
    without it the benchmark of the promoted shapes runs here."""
    variant, remote = ctx.variant, ctx.job.remote
    cols = list(variant.key_columns)
    shapes = _wanted(ctx, promoted_keys)
    out: dict = {"shapes": [], "engaged": 0, "total": len(shapes), "log": None}
    if not shapes or variant.bench is None:
        return out
    run_shapes = shapes if ran is None else _wanted(ctx, ran_keys or [])
    calls = plan_bench(variant, run_shapes)
    why = unplanned(variant, remote, calls)
    if why:
        out["unchecked"] = why
        return out
    if ran is None:
        run_as = dict(remote.bench_run_as or {})
        checked = [c for c in calls if c.checked and c.script not in run_as]
        prepared = dict(zip(map(id, checked), ctx.call_batch(prepare_ops(checked, remote.aiter_root,
                                                                          f"{remote.job_dir}/patched"))
                            if checked else []))
        ran = ctx.call("run", _request(ctx, calls, run_as, prepared), timeout=3700)
    text = ran.get("stdout") or ""
    if ran.get("stderr"):
        text += "\n" + ran["stderr"]
    log = ctx.job_dir / "engaged_at_runtime.log"   # not under logs/: that mirrors the node's logs
    log.write_text(text, encoding="utf-8")
    out["log"] = str(log)
    values = {tuple(norm_key_value(r["key"][c]) for c in cols): r["value"]
              for r in measured_by_call(variant.bench, run_shapes, text, [c.shapes for c in calls])}
    hits = lookup_hits(text)
    loaded = set(_LOADED.findall(text))
    skipped_keys = {tuple(norm_key_value(v) for v in k[-len(cols):]) for k in skipped}
    for s in shapes:
        k = tuple(norm_key_value(s[c]) for c in cols)
        cmp = comparison_rows.get(k, {})
        before, after, now = cmp.get("before"), cmp.get("after"), values.get(k)
        lk = lookup_key(variant, s)
        h = hits.get(lk) if lk else None
        near_after = not time_says_stale(now, before, after, cmp.get("noise_pct"), bool(h and h["hit"]))
        own = _own_module(ctx, h)
        reason = not_engaged_reason(k in skipped_keys, now, h, lk, own, loaded, near_after, cmp.get("kernel"),
                                    ctx.profile.merge_resolves_duplicates)
        engaged = not reason
        out["engaged"] += int(engaged)
        out["shapes"].append({"key": {c: s[c] for c in cols}, "engaged": engaged, "reason": reason,
                              "hit": None if h is None else h["hit"], "value": now,
                              **({"kernel": h["kernel"]} if h and h.get("kernel") else {}),
                              "module": own or (next(iter(jit_modules(variant.name)), None) if h and h["hit"] else None),
                              "before": before, "after": after})
    return out
