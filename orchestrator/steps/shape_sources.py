"""Where a job's shapes come from: the server's logs (mined on the node, streamed there), --shapes-csv,
--model and --nk with their M sweeps; the runtime's buckets applied (shape_rules.py), the most-missed first."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..context import Ctx
from ..errors import UsageError
from ..records import JobRequest, NodePaths
from ..session import NodeSession
from ..outcome import budget
from ..parsing.untuned import read_shapes_csv
from ..parsing.sources import split_log_sources  # noqa: F401  (re-exported: cli/, campaign/ import it here)
from ..shapelib import shapelog
from ..shapelib.shaperules import logs_once, miss_weights
from .shape_rules import dedupe, dp_shared_contract, moe_tiers, runtime_lookups, snap


class ShapeSearch:
    """What finding one variant's shapes reads and writes: the request, the node session (its facts: the probes
    a log shows are settled into them), where AITER lives there (``remote``: the table a log names is kept
    there), where notes and the shapes step's info go. The shapes step's is its job's (``of_ctx``); a campaign
    plan's is a target's session, no job (campaign/plan.py ``mine``)."""

    def __init__(self, session: NodeSession, request: JobRequest, variant: str, remote: NodePaths,
                 note: Callable[[str], None], info: Callable[[], dict]):
        self.session, self.request, self.variant_name, self.remote = session, request, variant, remote
        self.note, self._info = note, info

    @classmethod
    def of_ctx(cls, ctx: Ctx) -> "ShapeSearch":
        return cls(ctx.session, ctx.job.request, ctx.job.variant, ctx.job.remote, ctx.job.note,
                   lambda: ctx.job.step_state("shapes").info)

    @property
    def info(self) -> dict:
        return self._info()

    @property
    def facts(self):
        return self.session.facts

    @property
    def variant(self):
        return self.session.variant(self.variant_name)

    @property
    def ui(self):
        return self.session.ui

    def call(self, op: str, request: dict | None = None, **kw) -> dict:
        return self.session.call(op, request, **kw)

    def tuned_csv(self, variant) -> str:
        """The table AITER reads at runtime for ``variant`` (prepare.tuned_csv_path's)."""
        from .prepare import runtime_table
        return runtime_table(variant, self.remote, lambda: {**(self.facts.env or {}),
                                                            **self.session.target.container.env}, self.note)


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
        return dedupe(shapes)
    if family == "moe":
        return shapelog.expand_m(shapes, "pow2", tokens=shapelog.m_sweep(preset))
    return shapelog.expand_m(shapes, preset)


def probe_moe_tuple(facts: dict, forms: list[bool]) -> None:
    """The MoE tuple form seen in the log (leading 'gfx…' or a cu_num) is a probe, not a version guess."""
    from ..aiter_profiles import settle_profile
    facts.setdefault("probes", {})["moe_tuple_gfx"] = max(set(forms), key=forms.count)
    settle_profile(facts)


def reprobe_header(ctx: ShapeSearch, table: str) -> None:
    """--table-from-log: the capability probe read the header of the env/default table; the job tunes
    another one, whose header decides the gfx column (one round trip)."""
    from ..aiter_profiles import settle_profile
    header = ctx.call("probe", {"tuned_csv": table}).get("tuned_header")
    probes = ctx.facts.setdefault("probes", {})
    if header:
        probes["tuned_header"] = header
    else:
        probes.pop("tuned_header", None)     # a table not written yet: the version decides
    settle_profile(ctx.facts)


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


def _order(shape: dict, columns: tuple[str, ...]) -> dict:
    return {c: shape[c] for c in columns if c in shape}


def once_per_process(facts, variant) -> bool:
    """The node's AITER logs this variant's miss once per shape per process (probed in the runtime file that
    prints it, the registry's ``miss_source``: shaperules.logs_once, issue 36); not probed: False (a line per
    lookup, the old weighting)."""
    probes = (facts.get("probes") if isinstance(facts, dict) else getattr(facts, "probes", None)) or {}
    return logs_once(probes, variant.miss_source)


def _drop_unsupported(ctx: ShapeSearch, got: list[dict], refused: list[dict], name: str) -> list[dict]:
    """Leave out the shapes AITER's own online tuner found no config for ('Fmoe tuning not support for
    (...)', aiter#3202): this AITER cannot tune them, so the tuner would only burn its time on them."""
    kept, msg = leave_out_refused(got, refused, name)
    if msg:
        ctx.note(msg)
        ctx.ui.event(msg)
    return kept


def leave_out_refused(got: list[dict], refused: list[dict], name: str) -> tuple[list[dict], str | None]:
    """(``got`` without the shapes AITER's online tuner refused, the line that names them or None): the one rule
    of the shapes step and of ``tune-remote shapes``."""
    if not refused:
        return got, None
    ids = {budget.exact_key(s) for s in refused}
    kept = [s for s in got if budget.exact_key(s) not in ids]
    shown = "; ".join(", ".join(f"{k} {v}" for k, v in s.items() if k in ("token", "model_dim", "inter_dim",
                                                                           "expert", "topk", "q_type"))
                      for s in refused[:3])
    more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
    if any((s.get("_meta") or {}).get("contract") for s in refused):   # FHMoE's raise (shapelib/shapefhmoe.py)
        return kept, (f"{len(refused)} {name} shape(s) cannot be tuned by this AITER: the runtime raised for a "
                      f"DSV4 I384 token shape, and tune_fhmoe.py tunes the HY4 MXFP8 contract only; not tuned: {shown}{more}")
    return kept, (f"{len(refused)} {name} shape(s) cannot be tuned by this AITER: its online tuner found no config "
                  f"for them ('Fmoe tuning not support' in the log, aiter#3202); not tuned: {shown}{more}")


def collect(ctx: Ctx) -> tuple[list[dict], list[str]]:
    """The shapes step's shapes and where they came from (``find``, for the job)."""
    return find(ShapeSearch.of_ctx(ctx))


def find(ctx: ShapeSearch) -> tuple[list[dict], list[str]]:
    """A variant's shapes from the request's sources, the most missed (or the largest time share) first, and a
    line per source."""
    req, variant = ctx.request, ctx.variant
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
            parsed = shapelog.parse_files(paths, variant.name, keep_meta=True)
            res = parsed.to_json()
            res["missing"] = []
            res["workers"] = parsed.workers_dict()
        else:
            res = ctx.call("shapes", {"logs": paths, "variant": variant.name, "meta": True},
                           host=(where == "node"), timeout=3600)
        if res.get("missing"):
            raise UsageError(f"log file not found on the {where}: {res['missing'][0]}",
                           hint="paths without a prefix are inside the container; use node:PATH for the "
                                "node's host and local:PATH for this machine")
        for w in res.get("warnings") or []:
            ctx.note(w)
        got = []
        counts = miss_weights(res, variant.name, once_per_process(ctx.facts, variant))
        for i, shape in enumerate((res.get("shapes") or {}).get(variant.name, [])):
            meta = shape.get("_meta") or {}
            looked_up.append((shape, counts[i]))
            consulted_file = meta.get("file")
            if variant.family == "moe" and ("gfx" in meta or "cu_num" in meta):
                tuple_gfx.append("gfx" in meta)   # the [fused_moe] tuple's form, read from the log (C-20)
            if consulted_file:
                consulted[consulted_file] = consulted.get(consulted_file, 0) + 1
            got.append({k: v for k, v in shape.items() if k != "_meta"})
        got = _drop_unsupported(ctx, got, (res.get("unsupported") or {}).get(variant.name) or [], variant.name)
        if variant.log_gate_env and not ((res.get("misses") or {}).get(variant.name)
                                         or (res.get("hits") or {}).get(variant.name)):
            # e.g. A6W6 prints its lookups only with AITER_LOG_TUNED_CONFIG=1 (aiter-after-v0.1.20.md §3)
            msg = (f"the {where} log(s) have no {variant.name} lookup lines: AITER prints them only with "
                   f"{variant.log_gate_env}=1 in the server's environment; restart the server with it, "
                   "or give the shapes with --nk / --shapes-csv")
            ctx.note(msg)
            ctx.ui.event(msg)
        described.append(f"{len(paths)} {where} log(s): {len(got)} untuned {variant.name} shapes "
                         f"({res.get('lines', 0)} lines)")
        found.extend(got)
    if looked_up and once_per_process(ctx.facts, variant):
        ctx.note(f"this AITER logs a {variant.name} miss once per shape per process (read in its "
                 f"{variant.miss_source}): a logged shape's weight is the processes that logged it, not its lines")
    if tuple_gfx:
        probe_moe_tuple(ctx.facts, tuple_gfx)
    servers = list(getattr(ctx.facts, "servers", None) or [])
    if req.serve_cmd:   # and the server --serve-cmd starts, read from its line and the container's environment
        from ..serving import serve_cmd_server
        started = serve_cmd_server(req.serve_cmd, {**(ctx.facts.env or {}), **ctx.session.target.container.env})
        servers += [started] if started else []
    if servers:     # a server here that would never read what this job tunes is named (issue 36)
        from .servers import server_notes
        for msg in server_notes(servers, variant.family, variant.config_env, ctx.tuned_csv(variant),
                                ctx.remote.aiter_root):
            ctx.note(msg)
            ctx.ui.event(msg)
    if consulted:
        chosen, msg = consulted_table(consulted, ctx.tuned_csv(variant), ctx.remote.aiter_root,
                                      variant.config_env, bool(req.table_from_log))
        if chosen:
            ctx.remote.table_from_log = chosen
            reprobe_header(ctx, chosen)
        if msg:
            ctx.note(msg)
            ctx.ui.event(msg)
    # GEMM: sweep M per (N,K) (powers of two by default); MoE: the (already padded) logged tokens
    preset = req.m_preset or ("logged" if variant.family in ("moe", "fhmoe") else "pow2")   # fhmoe: its buckets
    shapes = expand(found, variant.family, preset) if found else []
    if req.shapes_csv:
        rows = read_shapes_csv(req.shapes_csv, variant.name)
        described.append(f"--shapes-csv {Path(req.shapes_csv).name}: {len(rows)} shapes")
        shapes.extend(rows)
    if req.model:
        from ..parsing.modelshapes import shapes_from_model
        gemm_variant = variant.name if variant.family == "gemm" else None
        rows = shapes_from_model(req.model, int(req.tp or 1), m_preset=None,
                                 gfx=ctx.facts.gfx, gemm_variant=gemm_variant).get(variant.name, [])
        dim = "token" if variant.family == "moe" else "m"
        sweep = sweep_preset(preset)
        base = [{dim: 1, **r} for r in rows]  # the placeholder M/token is not kept
        shapes.extend(shapelog.expand_m(base, "pow2", keep_logged=False, tokens=shapelog.m_sweep(sweep))
                      if dim == "token" else shapelog.expand_m(base, sweep, keep_logged=False))
        described.append(f"--model (tp {req.tp or 1}, {ctx.facts.gfx}): "
                         f"{len(rows)} {variant.name} shape groups")
    if req.nk:
        if variant.family != "gemm":
            raise UsageError(f"--nk applies to dense GEMM variants, not {variant.name}",
                             hint="use --shapes-csv or --log for batched and MoE variants")
        bases = [{"n": n, "k": k, **variant.nk_defaults} for n, k in parse_nk(req.nk)]
        if "q_dtype_w" in variant.key_columns:
            for b in bases:
                b["q_dtype_w"] = req.q_dtype_w or "torch.int8"
        described.append(f"--nk: {len(bases)} (N,K) pairs")
        shapes.extend(expand(bases, "gemm", sweep_preset(preset)))
    shapes, notes = runtime_lookups(dedupe(shapes), variant.family, req.max_m, variant.max_m,
                                    padded=bool(req.padded_m) and variant.padded_m_lookup,
                                    dp_shared=dp_shared_contract(req), tiers=moe_tiers(ctx.session))
    for n in notes:
        ctx.note(n)
        ctx.ui.event(n)
    shapes = [_order(s, variant.key_columns) for s in shapes]
    shares = profile_shares(ctx, described) if req.profiles else None
    if shares is not None:
        known = {budget.exact_key(s) for s in shapes}
        for key, (shape, _us, _share) in shares.items():
            if key not in known:
                shapes.append(shape)
    if looked_up or shares is not None:   # the most-missed first (P-07): a budget, a cancel or a failure leaves the rarest untuned
        pairs = [(_order(snap(sh, variant, req, moe_tiers(ctx.session)), variant.key_columns), n)
                 for sh, n in looked_up]
        exact, family = budget.miss_counts(pairs)
        time = {k: v[2] for k, v in shares.items()} if shares is not None else None
        shapes, missed = budget.rank(shapes, exact, family, time)
        info = ctx.info
        info["misses"] = missed
        if shares is not None:   # the largest share of GPU time first, then the most missed (issue 38)
            info["time_share"] = [time.get(budget.exact_key(s), 0.0) for s in shapes]
            info["gpu_us"] = [shares[budget.exact_key(s)][1] if budget.exact_key(s) in shares else 0.0
                              for s in shapes]

    return shapes, described


def profile_shares(ctx: ShapeSearch, described: list[str]) -> dict:
    """--profile (issue 38): {exact key: (shape, gpu_us, time_share)} of the job's variant, read where each
    profile lives (node:PATH on the host, PATH in the container: the helper streams it there; local:PATH here)."""
    from ..parsing.profile import raise_profile_error, ranked, split_profile_sources
    from ..shapelib import profread
    req, variant = ctx.request, ctx.variant
    out: dict = {}
    for where, paths in split_profile_sources(list(req.profiles or [])).items():
        if not paths:
            continue
        if where == "local":
            try:
                res = profread.read_profiles(paths, variant.name)
            except profread.ProfileError as exc:
                raise_profile_error(exc.error, exc.hint)
        else:
            res = ctx.call("profile", {"profiles": paths, "variant": variant.name}, host=(where == "node"),
                           timeout=3600)
            if res.get("profile_error"):
                raise_profile_error(f"{res['profile_error']} (on the {where})", res.get("profile_hint"))
        for w in res.get("warnings") or []:
            ctx.note(w)
        rows = ranked(res).get(variant.name, [])
        for r in rows:
            shape = _order(snap({c: x for c, x in r.items() if c not in ("gpu_us", "time_share", "calls")},
                                variant, req, moe_tiers(ctx.session)), variant.key_columns)
            key = budget.exact_key(shape)
            _, us, share = out.get(key, (shape, 0.0, 0.0))
            out[key] = (shape, us + r["gpu_us"], share + r["time_share"])
        described.append(f"{len(paths)} {where} profile(s): {len(rows)} {variant.name} shapes, "
                         f"{100 * sum(r['time_share'] for r in rows):.1f} % of the GPU time")
        out.setdefault("_total", (None, 0.0, 0.0))
        out["_total"] = (None, out["_total"][1] + float(res.get("total_gpu_us") or 0.0), 0.0)
    total = out.pop("_total", (None, 0.0, 0.0))[1]
    ctx.info["profile_total_gpu_us"] = round(total, 3)
    return out

