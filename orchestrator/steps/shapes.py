"""Shapes: mine logs on the node (streamed there), add --shapes-csv / --nk, sweep M, confirm, write -i CSV."""

from __future__ import annotations

import os
from pathlib import Path

from ..outcome import budget
from . import riders
from ..context import Ctx
from ..errors import JobError, UsageError
from ..variants import KernelVariant, get_variant
from ..parsing.untuned import read_shapes_csv
from ..remote.helpers import shapelog
from ..records import JobRequest
from ..state import Status
from ..outcome.keys import norm_key_value


def split_log_sources(logs: list[str]) -> dict[str, list[str]]:
    """'node:PATH' -> on the node's host, 'local:PATH' -> this machine, anything else -> in the container."""
    out: dict[str, list[str]] = {"container": [], "node": [], "local": []}
    for spec in logs:
        if spec.startswith("node:"):
            out["node"].append(spec[5:])
        elif spec.startswith("local:"):
            out["local"].append(spec[6:])
        else:
            out["container"].append(spec)
    return out


def parse_nk(values: list[str]) -> list[tuple[int, int]]:
    pairs = []
    for v in values:
        try:
            n, k = (int(x) for x in v.split(","))
            if n <= 0 or k <= 0:
                raise ValueError
        except ValueError:
            raise UsageError(f"--nk {v!r} is not N,K with two positive integers",
                             hint="e.g. --nk 7168,2048") from None
        pairs.append((n, k))
    return pairs


def _no_sweep(preset) -> bool:
    return preset is None or str(preset).strip().lower() in ("logged", "none")


def sweep_preset(preset):
    """The M sweep of shapes nothing logged (--nk, --model): ``logged``/``none`` mean the default there."""
    return "pow2" if _no_sweep(preset) else preset


def check_m_preset(preset: str | None) -> None:
    """A bad ``--m-preset``: one line, exit 2, before anything runs on a node."""
    if _no_sweep(preset):
        return
    try:
        shapelog.m_sweep(preset)
    except ValueError as exc:
        raise UsageError(f"--m-preset {preset!r}: {exc}",
                         hint="pow2, cudagraph, logged, or M values like 1,16,128") from None


def expand(shapes: list[dict], family: str, preset: str) -> list[dict]:
    """Sweep M (GEMM/batched) or token (MoE) per distinct remaining key, keeping the logged values
    (AITER looks the exact M up first); 'logged' keeps only what was seen."""
    if _no_sweep(preset):
        return _dedupe(shapes)
    if family == "moe":
        return shapelog.expand_m(shapes, "pow2", tokens=shapelog.m_sweep(preset))
    return shapelog.expand_m(shapes, preset)


MOE_PADDED_MAX = 32768  # fused_moe.get_padded_M: nextPow2(token) below this (aiter-after-v0.1.20.md §2.2, #5125)


def next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def padded_m(m: int) -> int:
    """gemm_common.cu getPaddedM(M, N, K, 0): M <= 256 up to a multiple of 16, <= 1024 of 32, <= 4096 of 64,
    else of 128 (aiter-formats.md §3.1)."""
    m = int(m)
    step = 16 if m <= 256 else 32 if m <= 1024 else 64 if m <= 4096 else 128
    return -(-m // step) * step


def runtime_lookups(shapes: list[dict], family: str, max_m: int | None = None,
                    padded: bool = False) -> tuple[list[dict], list[str]]:
    """The shapes the runtime will really look up: MoE tokens snapped to AITER's power-of-two buckets
    (a row for token 96 is never read: the runtime asks for 128; review C-09); with ``padded`` (GEMMs whose
    lookup falls back to getPaddedM) M snapped up to the padded-M grid and deduplicated: a row at M=16 is
    what every M in 1..16 without its own row reads, so 1, 2, 4, 8, 16 are one tuning, not five; M/token
    above the server's batch limit (--max-m) dropped. Returns (shapes, notes)."""
    notes: list[str] = []
    out = shapes
    if padded and family == "gemm":
        moved: dict[int, int] = {}
        for s in shapes:
            if padded_m(s["m"]) != int(s["m"]):
                moved[int(s["m"])] = padded_m(s["m"])
        out = _dedupe([{**s, "m": padded_m(s["m"])} for s in shapes])
        if moved:
            pairs = ", ".join(f"{a}->{b}" for a, b in sorted(moved.items())[:6])
            notes.append(f"{len(moved)} M value(s) snapped to AITER's padded-M grid ({pairs}"
                         f"{', ...' if len(moved) > 6 else ''}): a shape without its own row reads the row at "
                         f"its padded M, so {len(shapes) - len(out)} tuning(s) that the runtime would not look "
                         "up distinctly are dropped")
    if family == "moe":
        snapped: dict[int, int] = {}
        out = []
        for s in shapes:
            t = int(s["token"])
            if t < MOE_PADDED_MAX and next_pow2(t) != t:
                snapped[t] = next_pow2(t)
                s = {**s, "token": next_pow2(t)}
            out.append(s)
        out = _dedupe(out)
        if snapped:
            pairs = ", ".join(f"{a}->{b}" for a, b in sorted(snapped.items())[:6])
            notes.append(f"{len(snapped)} MoE token value(s) snapped to the runtime's power-of-two buckets "
                         f"({pairs}{', ...' if len(snapped) > 6 else ''}): AITER looks up nextPow2(token) below "
                         f"{MOE_PADDED_MAX}, so rows for other tokens are never read (ROCm/aiter#5125)")
    if max_m:
        dim = "token" if family == "moe" else "m"
        kept = [s for s in out if int(s[dim]) <= max_m]
        if len(kept) != len(out):
            notes.append(f"--max-m {max_m}: {len(out) - len(kept)} shape(s) with {dim} above the server's "
                         "batch limit dropped")
        out = kept
    return out, notes


def probe_moe_tuple(facts: dict, forms: list[bool]) -> None:
    """The MoE tuple form seen in the log (leading 'gfx…' or a cu_num) is a probe, not a version guess."""
    from ..aiter_profiles import settle_profile
    facts.setdefault("probes", {})["moe_tuple_gfx"] = max(set(forms), key=forms.count)
    settle_profile(facts)


def reprobe_header(ctx: Ctx, table: str) -> None:
    """--table-from-log: the capability probe read the header of the env/default table; the job tunes
    another one, whose header decides the gfx column (one round trip)."""
    from ..aiter_profiles import settle_profile
    header = ctx.call("probe", {"tuned_csv": table}).get("tuned_header")
    probes = ctx.job.facts.setdefault("probes", {})
    if header:
        probes["tuned_header"] = header
    else:
        probes.pop("tuned_header", None)     # a table not written yet: the version decides
    settle_profile(ctx.job.facts)


def consulted_table(consulted: dict[str, int], target: str, root: str, config_env: str,
                    use: bool) -> tuple[str | None, str | None]:
    """(table to tune instead or None, note) from the tables the miss lines named (C-12): AITER prints the file
    it consulted; a server that sets its own AITER_CONFIG_* reads another table than the container's env
    names. With ``use`` (run --table-from-log) the most-consulted one is tuned."""
    def absolute(p: str) -> str:
        return os.path.normpath(p if p.startswith("/") else f"{root}/{p}")
    # a merge of several tables (/tmp/aiter_configs/, aiter-formats.md §5.1) and the pre-0.1.10 'CKGEMM or
    # asmGEMM' are no table one could tune
    real = {f: n for f, n in consulted.items() if f.endswith(".csv") and not f.startswith("/tmp/aiter_configs/")}
    others = {absolute(f): n for f, n in real.items() if absolute(f) != os.path.normpath(target)}
    if not others:
        return None, None
    top = max(others, key=lambda f: others[f])
    named = ", ".join(f"{f} ({n} shape(s))" for f, n in sorted(others.items(), key=lambda x: -x[1])[:3])
    if use:
        return top, (f"tuning {top}, the table the server's log says AITER consulted (--table-from-log), "
                     f"not {target}")
    return None, (f"the server's log says AITER consulted {named}, not {target} which this job would tune: "
                  f"rerun with --table-from-log to tune {top}, or set {config_env} in the inventory")


def _dedupe(shapes: list[dict]) -> list[dict]:
    seen, out = set(), []
    for s in shapes:
        key = tuple(sorted((k, str(v)) for k, v in s.items()))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def _order(shape: dict, columns: tuple[str, ...]) -> dict:
    return {c: shape[c] for c in columns if c in shape}


def collect(ctx: Ctx) -> tuple[list[dict], list[str]]:
    req, variant = ctx.job.request, ctx.variant
    sources = split_log_sources(req.logs or [])
    found: list[dict] = []
    described: list[str] = []
    consulted: dict[str, int] = {}
    tuple_gfx: list[bool] = []
    looked_up: list[tuple[dict, int]] = []
    for where, paths in sources.items():
        if not paths:
            continue
        if where == "local":
            res = shapelog.parse_files(paths, variant.name, keep_meta=True).to_json()
            res["missing"] = []
        else:
            res = ctx.call("shapes", {"logs": paths, "variant": variant.name, "meta": True},
                           host=(where == "node"), timeout=3600)
        if res.get("missing"):
            raise UsageError(f"log file not found on the {where}: {res['missing'][0]}",
                           hint="paths without a prefix are inside the container; use node:PATH for the "
                                "node's host and local:PATH for this machine")
        for w in res.get("warnings") or []:
            ctx.job.note(w)
        got = []
        counts = (res.get("counts") or {}).get(variant.name) or []
        for i, shape in enumerate((res.get("shapes") or {}).get(variant.name, [])):
            meta = shape.get("_meta") or {}
            looked_up.append((shape, counts[i] if i < len(counts) else 1))   # an older helper: 1 each
            consulted_file = meta.get("file")
            if variant.family == "moe" and ("gfx" in meta or "cu_num" in meta):
                tuple_gfx.append("gfx" in meta)   # the [fused_moe] tuple's form, read from the log (C-20)
            if consulted_file:
                consulted[consulted_file] = consulted.get(consulted_file, 0) + 1
            got.append({k: v for k, v in shape.items() if k != "_meta"})
        if variant.log_gate_env and not ((res.get("misses") or {}).get(variant.name)
                                         or (res.get("hits") or {}).get(variant.name)):
            # e.g. A6W6 prints its lookups only with AITER_LOG_TUNED_CONFIG=1 (aiter-after-v0.1.20.md §3)
            msg = (f"the {where} log(s) have no {variant.name} lookup lines: AITER prints them only with "
                   f"{variant.log_gate_env}=1 in the server's environment; restart the server with it, "
                   "or give the shapes with --nk / --shapes-csv")
            ctx.job.note(msg)
            ctx.ui.event(msg)
        described.append(f"{len(paths)} {where} log(s): {len(got)} untuned {variant.name} shapes "
                         f"({res.get('lines', 0)} lines)")
        found.extend(got)
    if tuple_gfx:
        probe_moe_tuple(ctx.job.facts, tuple_gfx)
    if consulted:
        from .prepare import tuned_csv_path
        chosen, msg = consulted_table(consulted, tuned_csv_path(ctx, variant), ctx.job.remote.aiter_root,
                                      variant.config_env, bool(req.table_from_log))
        if chosen:
            ctx.job.remote.table_from_log = chosen
            reprobe_header(ctx, chosen)
        if msg:
            ctx.job.note(msg)
            ctx.ui.event(msg)
    # GEMM: sweep M per (N,K) (powers of two by default); MoE: the (already padded) logged tokens
    preset = req.m_preset or ("logged" if variant.family == "moe" else "pow2")
    shapes = expand(found, variant.family, preset) if found else []
    if req.shapes_csv:
        rows = read_shapes_csv(req.shapes_csv, variant.name)
        described.append(f"--shapes-csv {Path(req.shapes_csv).name}: {len(rows)} shapes")
        shapes.extend(rows)
    if req.model:
        from ..parsing.modelshapes import shapes_from_model
        gemm_variant = variant.name if variant.family == "gemm" else None
        rows = shapes_from_model(req.model, int(req.tp or 1), m_preset=None,
                                 gfx=ctx.job.facts.gfx, gemm_variant=gemm_variant).get(variant.name, [])
        dim = "token" if variant.family == "moe" else "m"
        sweep = sweep_preset(preset)
        base = [{dim: 1, **r} for r in rows]  # the placeholder M/token is not kept
        shapes.extend(shapelog.expand_m(base, "pow2", keep_logged=False, tokens=shapelog.m_sweep(sweep))
                      if dim == "token" else shapelog.expand_m(base, sweep, keep_logged=False))
        described.append(f"--model (tp {req.tp or 1}, {ctx.job.facts.gfx}): "
                         f"{len(rows)} {variant.name} shape groups")
    if req.nk:
        if variant.family != "gemm":
            raise UsageError(f"--nk applies to dense GEMM variants, not {variant.name}",
                             hint="use --shapes-csv or --log for batched and MoE variants")
        bases = [{"n": n, "k": k} for n, k in parse_nk(req.nk)]
        if "q_dtype_w" in variant.key_columns:
            for b in bases:
                b["q_dtype_w"] = req.q_dtype_w or "torch.int8"
        described.append(f"--nk: {len(bases)} (N,K) pairs")
        shapes.extend(expand(bases, "gemm", sweep_preset(preset)))
    shapes, notes = runtime_lookups(_dedupe(shapes), variant.family, req.max_m,
                                    padded=bool(req.padded_m) and variant.padded_m_lookup)
    for n in notes:
        ctx.job.note(n)
        ctx.ui.event(n)
    shapes = [_order(s, variant.key_columns) for s in shapes]
    if looked_up:   # the most-missed first (P-07): a budget, a cancel or a failure leaves the rarest untuned
        pairs = [(_order(_snap(sh, variant, req), variant.key_columns), n) for sh, n in looked_up]
        exact, family = budget.miss_counts(pairs)
        shapes, missed = budget.rank(shapes, exact, family)
        ctx.job.step_state("shapes").info["misses"] = missed
    return shapes, described


def _snap(shape: dict, variant, req: JobRequest) -> dict:
    """A logged shape as the runtime looks it up (the same snapping ``runtime_lookups`` does)."""
    s = {k: v for k, v in shape.items() if k != "_meta"}
    if variant.family == "moe" and int(s.get("token", 0)) < MOE_PADDED_MAX and "token" in s:
        s["token"] = next_pow2(int(s["token"]))
    elif variant.family == "gemm" and req.padded_m and variant.padded_m_lookup and "m" in s:
        s["m"] = padded_m(s["m"])
    return s


def _model_config_keys(variant: KernelVariant, root: str, cu_num, gfx) -> dict:
    return {"patterns": [f"{root}/aiter/configs/model_configs/*{Path(variant.tuned_csv).stem}*.csv"],
            "key_columns": list(variant.key_columns), "cu_num": cu_num, "gfx": gfx}


def model_config_keys_template(ctx: Ctx) -> dict:
    """drop_tuned_in_model_configs' request as a discover rider (steps/riders.py)."""
    return _model_config_keys(get_variant(ctx.job.variant), "{root}", "{cu_num}", "{gfx}")


def _write_full_list(ctx: Ctx, variant: KernelVariant, shapes: list[dict]) -> str | None:
    """The shapes to tune in the job's directory (untuned/, where fetch puts the node's copy later): the
    terminal shows a summary and says where the whole list is."""
    from ..parsing.untuned import write_untuned_csv
    from ..state import atomic_write
    path = ctx.job_dir / "untuned" / Path(variant.untuned_csv).name
    try:
        text = write_untuned_csv(shapes, variant.name)
    except ValueError:
        return None           # prepare says what is missing
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode())
    return str(path)


def drop_tuned_in_model_configs(ctx: Ctx, shapes: list[dict]) -> list[dict]:
    """Shapes that already have a row (for this GPU) in aiter/configs/model_configs/*<tuned name>*.csv.

    With the AITER_CONFIG_* variable unset, AITER merges those files with the default tuned CSV, and
    from v0.1.12 on a key present in two of them makes the merge raise (and rewrite the files), so
    such shapes are not tuned into the default CSV again (aiter-formats.md §5.1). One round trip.
    """
    job, variant = ctx.job, ctx.variant
    env = {**(job.facts.env or {}), **ctx.target.container.env}
    if env.get(variant.config_env):
        riders.drop(ctx, "tuned_keys")
        return shapes  # an explicit table: AITER does not merge model_configs
    res = riders.call(ctx, "tuned_keys", _model_config_keys(variant, job.remote.aiter_root, job.facts.cu_num,
                                                           job.facts.gfx))
    where: dict[tuple, str] = {}
    for path, keys in (res.get("files") or {}).items():
        for key in keys:
            where.setdefault(tuple(str(norm_key_value(v)) for v in key), Path(path).name)
    if not where:
        return shapes
    keep, clash = [], {}
    for s in shapes:
        name = where.get(tuple(str(norm_key_value(s.get(c))) for c in variant.key_columns))
        if name is None:
            keep.append(s)
        else:
            clash[name] = clash.get(name, 0) + 1
    if clash:
        files = ", ".join(f"{n} ({c})" for n, c in sorted(clash.items()))
        if ctx.profile.merge_rejects_duplicates:
            job.note(f"{sum(clash.values())} shape(s) already have rows in aiter/configs/model_configs/ "
                     f"({files}); not tuned again: AITER {job.facts.version} raises on duplicate keys "
                     "across the tables it merges")
            return keep
        job.note(f"{sum(clash.values())} shape(s) also have rows in aiter/configs/model_configs/ ({files}); "
                 "AITER keeps the lowest-us row when it merges them")
    return shapes


def plan_time(ctx: Ctx, shapes: list[dict], described: list[str], missed: dict) -> list[dict]:
    """The plan's estimated tuning time; with --budget, the most-missed shapes that fit it (P-07).
    ``missed``: exact key -> times the log missed it."""
    variant, job = ctx.variant, ctx.job
    info = job.step_state("shapes").info
    gpus = len(job.facts.tune_gpus or []) or 1
    rate, source = budget.seconds_per_shape(ctx.workspace, variant.name, variant.family, job.facts.gfx)
    if job.request.budget:
        limit = budget.parse_duration(job.request.budget)
        shapes, left = budget.within(shapes, limit, gpus, rate)
        if left:
            msg = (f"--budget {job.request.budget}: the {len(shapes)} most-missed shape(s) fit, "
                   f"{len(left)} left for another job (least missed last)")
            job.note(msg)
            described.append(msg)
    if missed:
        info["misses"] = [missed.get(budget.exact_key(s), 0) for s in shapes]
    est = budget.estimate(shapes, gpus, rate)
    info["estimate_s"] = round(est, 1)
    described.append(f"estimated tuning time: {budget.fmt_duration(est)} for {len(shapes)} shape(s) on "
                     f"{gpus} GPU(s) ({source})")
    return shapes


def run(ctx: Ctx) -> None:
    variant = ctx.variant
    shapes, described = collect(ctx)
    missed = dict(zip(map(budget.exact_key, shapes), ctx.job.step_state("shapes").info.get("misses") or []))
    shapes = drop_tuned_in_model_configs(ctx, shapes)
    if shapes:
        shapes = plan_time(ctx, shapes, described, missed)
    if not shapes:
        raise JobError(f"no {variant.name} shapes to tune",
                       hint="the logs had no untuned shapes of this variant; check --variant, or give "
                            "--nk N,K / --shapes-csv FILE")
    missing = [c for c in variant.key_columns if any(c not in s for s in shapes)]
    if missing:
        raise JobError(f"shapes lack column(s) {', '.join(missing)} that {variant.name} needs on AITER "
                       f"{ctx.job.facts.version}",
                       hint="give them in --shapes-csv (AITER untuned CSV format)")
    ctx.job.shapes = shapes
    ctx.job.step_state("shapes").info["sources"] = described
    ctx.ui.show_shapes(variant, shapes, described, ctx.job.step_state("shapes").info.get("misses"),
                       full_list=_write_full_list(ctx, variant, shapes))
    if not ctx.settings.yes and ctx.settings.interactive and not ctx.ui.confirm(
            f"Tune these {len(shapes)} {variant.name} shapes on {ctx.job.node}/{ctx.job.container}?"):
        ctx.job.state = Status.CANCELLED
        ctx.job.error = "cancelled at the shape confirmation"
        return
    # the node copy is written by prepare's first round trip, from job.shapes (issue 9: round trips)
    ctx.job.remote.untuned_csv = f"{ctx.job.remote.job_dir}/{Path(variant.untuned_csv).name}"
