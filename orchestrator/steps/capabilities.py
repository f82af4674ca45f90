"""Capability probing (review C-20): decide AITER behaviour from what the node shows, version as fallback.

One helper round trip (op ``probe``) after discover reads the variant's tuned-CSV header, runs the tune
script's ``--help``, scans the op_test's arguments and looks for op_tests/tuning_tests; the answers go
to ``facts["probes"]`` and ``aiter_profiles.profile_from_facts`` turns them into the profile. The
report lists what was probed and what was assumed.
"""

from __future__ import annotations

from ..aiter_profiles import AiterProfile, format_version, profile_from_facts
from ..context import Ctx
from ..errors import JobError
from ..variants import KernelVariant, get_variant
from . import tuneargs

HELP_TIMEOUT_S = 180  # real tune scripts import torch + aiter before argparse answers --help


def probe(ctx: Ctx, variant: KernelVariant) -> AiterProfile:
    facts, remote = ctx.job.facts, ctx.job.remote
    root, meta = remote["aiter_root"], remote.get("meta_root") or remote["aiter_root"]
    env = {**(facts.get("env") or {}), **ctx.target.container.env}
    configured = (env.get(variant.config_env) or "").split(":")[0]
    tuned = configured or f"{root}/{variant.tuned_csv}"
    if tuned and not tuned.startswith("/"):
        tuned = f"{root}/{tuned}"
    req = {
        "aiter_root": root, "meta_root": meta, "python": ctx.target.container.python,
        "tuned_csv": tuned,
        "tune_script": f"{meta}/{variant.tune_script.format(gfx=facts.get('gfx') or 'gfx942')}",
        "op_test": f"{root}/{variant.bench.script}" if variant.bench else None,
        "fmoe_csv": f"{root}/{get_variant('moe_2stages').tuned_csv}" if variant.family == "moe" else None,
        "help_timeout": HELP_TIMEOUT_S,
    }
    answer = ctx.call("probe", req, timeout=HELP_TIMEOUT_S + 60)
    answer.pop("ok", None)
    problem = answer.pop("tuner_help_problem", None)
    facts["probes"] = {k: v for k, v in answer.items() if v is not None}
    if problem:
        ctx.job.note(f"could not read the tuner's --help ({problem}); its flags are assumed from the version")
    if variant.since and answer.get("tune_script_exists") is False:
        raise JobError(
            f"{variant.name} needs AITER >= {format_version(variant.since)}: its tuner {variant.tune_script} "
            f"is not on this node (AITER {facts.get('version')})",
            hint="upgrade amd-aiter in the container, or choose a container with a newer AITER")
    script = variant.tune_script.format(gfx=facts.get('gfx') or 'gfx942')
    args = list(ctx.job.request.get("tune_args") or [])
    tuneargs.validate(args, answer.get("tuner_help"), script, problem)
    note = tuneargs.splitk_note(args, answer.get("tuner_help"), variant.name)
    if note:
        ctx.job.note(note)
        ctx.ui.event(note)
    profile = profile_from_facts(facts)
    facts["profile"] = profile.name
    facts["probed"] = list(profile.probed)
    facts["assumed"] = list(profile.assumed)
    return profile
