"""Discover: one helper round trip answers where aiter is, which version, which GPUs are free."""

from __future__ import annotations

from ..context import Ctx, owner
from ..errors import JobError, UsageError
from ..session import settle_facts
from ..variants import get_variant
from .capabilities import HELP_TIMEOUT_S, probe, probe_template
from .fhmoe_input import refuse_node
from .prepare import hip_devices
from .shapes import model_config_keys_template

GFX_GPUS = {"gfx950": "an MI355X/MI350X", "gfx942": "an MI300X/MI325X"}


def wrong_gfx_hint(variant) -> str:
    """Where a variant whose kernels exist for some GPUs only can be tuned (it said MI355X for every one)."""
    gfxs = sorted(variant.requires_gfx)
    return (f"its kernels are built for {'/'.join(gfxs)} only; tune it on "
            + " or ".join(GFX_GPUS.get(g, f"a {g} node") for g in gfxs))


def _chosen_gpus(ctx: Ctx, facts: dict, gpus) -> list[int]:
    """--gpus are physical ids (rocm-smi's numbering, as discover prints them): each must be a GPU this
    container's HIP runtime can see, else nothing runs."""
    want = [int(g) for g in gpus]
    mapping = facts.get("gpu_map")
    known = facts.get("gpus") or {}
    bad = [g for g in want if (mapping is not None and str(g) not in mapping)
           or (mapping is None and facts.get("gpu_count") is not None and not 0 <= g < facts["gpu_count"])]
    if bad:
        visible = sorted(int(p) for p in mapping) if mapping is not None else list(range(facts.get("gpu_count") or 0))
        why = "; ".join(f"GPU {g}: {', '.join((known.get(str(g)) or {}).get('busy') or ['no such GPU'])}"
                        for g in bad)
        raise UsageError(f"--gpus {','.join(map(str, want))}: not usable in {ctx.job.container} ({why})",
                         hint=f"this container can use GPUs {','.join(map(str, visible)) or 'none'} "
                              "(rocm-smi numbering)")
    reserved = facts.get("reserved_gpus") or {}
    for g in want:                      # another running job owns it (node-side reservation)
        if str(g) in reserved:
            free = [p for p in facts.get("free_gpus") or [] if p not in want]
            raise JobError(f"job {reserved[str(g)]} is already running on GPU {g} in {ctx.job.container}",
                           hint=(f"use --gpus {','.join(map(str, free))}, " if free else "")
                           + f"or wait for it / `tune-remote cancel {reserved[str(g)]}`")
    return want


def run(ctx: Ctx) -> None:
    req = ctx.job.request
    session = ctx.session
    facts = session.call("discover", session.discover_request(
        gpus=True, lock={"variant": ctx.job.variant, "job_id": ctx.job.job_id, "owner": owner(ctx),
                         "after_jobs": (req.get("chain_after") or {}).get("job_ids") or []},
        riders={"probe": probe_template(ctx), "tuned_keys": model_config_keys_template(ctx)}),
        timeout=HELP_TIMEOUT_S + 120)
    if not facts.get("aiter_root"):
        raise JobError(f"no aiter installation found in container {ctx.job.container}",
                       hint="set aiter_path for this container in inventory.yaml, or install amd-aiter")
    ctx.job.facts = facts = settle_facts(facts)       # refuses versions older than we support
    profile = session.profile
    variant = get_variant(ctx.job.variant).resolve(profile)
    gfx = facts.gfx
    refuse_node(variant, facts)      # FHMoE: gfx950 with 256 CUs, or nothing runs (exit 2)
    if variant.requires_gfx and gfx not in variant.requires_gfx:
        raise JobError(
            f"{variant.name} needs {'/'.join(sorted(variant.requires_gfx))}, but this GPU is {gfx}",
            hint=wrong_gfx_hint(variant),
        )
    problems = [str(p) for p in facts.problems or []]
    for p in problems:                      # shown and kept in the report, never dropped (C-13)
        ctx.ui.event(f"warning: {p}")
        ctx.job.note(f"discover on {ctx.job.node}/{ctx.job.container}: {p}")
    gpus = req.gpus
    if gpus:
        free = _chosen_gpus(ctx, facts, gpus)
    else:
        free = [int(g) for g in facts.free_gpus or []]
    if not free and not gpus and facts.free_gpus is None:   # unknown is not busy
        raise JobError(f"cannot tell which GPUs are free on {ctx.job.node}: "
                       + ("; ".join(problems) or "no GPU use reading"),
                       hint="pass --gpus 0,1 to choose the GPUs yourself")
    if not free:
        busy = "; ".join(f"GPU {p}: {', '.join(g.get('busy') or [])}" for p, g in (facts.gpus or {}).items())
        raise JobError(f"no free GPU on {ctx.job.node} for {ctx.job.container}" + (f" ({busy})" if busy else ""),
                       hint="wait for the GPUs to go idle, or pass --gpus 0,1 to use given GPUs anyway")
    ctx.job.facts.tune_gpus = free
    ctx.job.facts.tune_hip = hip_devices(facts, free)
    root = facts.aiter_root
    ctx.job.remote.update({
        "aiter_root": root,
        "meta_root": facts.meta_root or root,
        "logs_dir": facts.workdir or f"{root}/tune_logs",     # never site-packages
        "job_dir": f"{facts.workdir or f'{root}/tune_logs'}/.tune-remote/{ctx.job.job_id}",
    })
    profile = probe(ctx, variant)
    if profile.moe_blockscale_bypass != "none" and variant.family == "moe":
        rule = "every" if profile.moe_blockscale_bypass == "all" else "token*topk <= 128"
        ctx.job.note(f"AITER {ctx.job.facts.version} ignores tuned fp8 block-scale MoE rows for {rule} "
                     "shapes at runtime (aiter-formats.md §3.3); those shapes are tuned but show no gain")
    ctx.ui.event(f"aiter {facts.pip_name} {ctx.job.facts.version} ({facts.install_mode}, "
                 f"profile {profile.name}) at {root}; {gfx} cu_num={facts.cu_num}, "
                 + "".join(f"partition {m}, " for m in sorted(set((facts.partitions or {}).values())))
                 + f"GPUs free: {','.join(map(str, free))}"
                 + (f" (HIP devices {','.join(map(str, ctx.job.facts.tune_hip))} in this container)"
                    if ctx.job.facts.tune_hip != free else ""))
