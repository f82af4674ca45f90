"""Discover: one helper round trip answers where aiter is, which version, which GPUs are free."""

from __future__ import annotations

from ..context import Ctx
from ..errors import JobError
from ..variants import format_version, get_variant, is_dev_build, parse_version, profile_for
from .capabilities import probe
from .remote import owner

FREE_GPU_BUSY_PCT = 10


def run(ctx: Ctx) -> None:
    req = ctx.job.request
    facts = ctx.call("discover", {"aiter_path": ctx.target.container.aiter_path,
                                  "busy_threshold": FREE_GPU_BUSY_PCT,
                                  "lock": {"variant": ctx.job.variant, "job_id": ctx.job.job_id,
                                           "owner": owner(ctx)}})
    facts.pop("ok", None)
    if not facts.get("aiter_root"):
        raise JobError(f"no aiter installation found in container {ctx.job.container}",
                       hint="set aiter_path for this container in inventory.yaml, or install amd-aiter")
    raw = facts.get("version") or facts.get("git_describe")
    dev = is_dev_build(raw)
    version = parse_version(facts.get("version")) or parse_version(facts.get("git_describe"))
    profile = profile_for(version, dev_build=dev)  # refuses versions older than we support
    ctx.job.facts = facts
    ctx.job.facts["version_raw"] = raw
    ctx.job.facts["version"] = raw if dev else (format_version(version) if version else facts.get("version"))
    ctx.job.facts["profile"] = profile.name
    variant = get_variant(ctx.job.variant).resolve(profile)
    gfx = facts.get("gfx")
    if variant.requires_gfx and gfx not in variant.requires_gfx:
        raise JobError(
            f"{variant.name} needs {'/'.join(sorted(variant.requires_gfx))}, but this GPU is {gfx}",
            hint="AITER's a4w4 tuner prints 'tuning is not supported in this chip'; tune it on an MI355X/MI350X",
        )
    problems = [str(p) for p in facts.get("problems") or []]
    for p in problems:                      # shown and kept in the report, never dropped (C-13)
        ctx.ui.event(f"warning: {p}")
        ctx.job.note(f"discover on {ctx.job.node}/{ctx.job.container}: {p}")
    gpus = req.get("gpus")
    if gpus:
        free = [int(g) for g in gpus]
    else:
        free = [int(g) for g in facts.get("free_gpus") or []]
    if not free and not gpus and facts.get("free_gpus") is None:   # unknown is not busy
        raise JobError(f"cannot tell which GPUs are free on {ctx.job.node}: "
                       + ("; ".join(problems) or "no GPU use reading"),
                       hint="pass --gpus 0,1 to choose the GPUs yourself")
    if not free:
        raise JobError(f"no free GPU on {ctx.job.node} (rocm-smi shows every GPU busy)",
                       hint="wait for the GPUs to go idle, or pass --gpus 0,1 to use given GPUs anyway")
    ctx.job.facts["tune_gpus"] = free
    root = facts["aiter_root"]
    ctx.job.remote.update({
        "aiter_root": root,
        "meta_root": facts.get("meta_root") or root,
        "logs_dir": f"{root}/tune_logs",
        "job_dir": f"{root}/tune_logs/.tune-remote/{ctx.job.job_id}",
    })
    profile = probe(ctx, variant)
    if profile.moe_blockscale_bypass != "none" and variant.family == "moe":
        rule = "every" if profile.moe_blockscale_bypass == "all" else "token*topk <= 128"
        ctx.job.note(f"AITER {ctx.job.facts['version']} ignores tuned fp8 block-scale MoE rows for {rule} "
                     "shapes at runtime (aiter-formats.md §3.3); those shapes are tuned but show no gain")
    ctx.ui.event(f"aiter {facts.get('pip_name')} {ctx.job.facts['version']} ({facts.get('install_mode')}, "
                 f"profile {profile.name}) at {root}; {gfx} cu_num={facts.get('cu_num')}, "
                 f"GPUs free: {','.join(map(str, free))}")
