"""Capability probing (review C-20): decide AITER behaviour from what the node shows, version as fallback.

The probe (nodeside/probe.py) reads the variant's tuned-CSV header, runs the tune script's ``--help``,
scans the op_test's arguments and looks for op_tests/tuning_tests; the answers go to ``facts["probes"]``
and ``aiter_profiles.profile_from_facts`` turns them into the profile. The report lists what was probed
and what was assumed. It rides along with ``discover`` (``probe_template``, steps/riders.py).
"""

from __future__ import annotations

from ..aiter_profiles import AiterProfile, format_version, help_flags, settle_profile
from ..context import Ctx
from ..errors import ExitCode, JobError
from ..variants import KernelVariant, get_variant, parse_version
from . import moetuners, riders, tuneargs

HELP_TIMEOUT_S = 180  # real tune scripts import torch + aiter before argparse answers --help


def _request(ctx: Ctx, variant: KernelVariant, root: str, meta: str, gfx: str, tuned: str) -> dict:
    return _request_with(ctx.target.container.python, variant, root, meta, gfx, tuned)


def _request_with(python: str, variant: KernelVariant, root: str, meta: str, gfx: str, tuned: str) -> dict:
    """The probe's request for the container's ``python`` (no job needed: a campaign's plan sends it too)."""
    return {
        "aiter_root": root, "meta_root": meta, "python": python,
        "tuned_csv": tuned,
        "tune_script": f"{meta}/{variant.tune_script.replace('{gfx}', gfx)}",
        # run_config: the benchmark is the tuner (its --help is probed above), not an op_test to read
        "op_test": f"{root}/{variant.bench.script}" if variant.bench and variant.bench.style != "run_config" else None,
        "fmoe_csv": f"{root}/{variant.tuned_csv}" if variant.family == "moe" else None,
        "help_timeout": HELP_TIMEOUT_S,
        "aiter_core": f"{root}/aiter/jit/core.py",      # its merge's duplicate-key rule is probed (issue 36)
        # fused-MoE facts (issue 36): the tuner's objective from its source, the runtime's token tiers
        **({"moe_tuner_src": True, "moe_runtime": f"{root}/aiter/fused_moe.py"} if variant.family == "moe" else {}),
    }


def probe_template(ctx: Ctx) -> dict:
    """The probe as ``discover`` runs it: the newest AITER's paths, ``{root}``/``{meta}``/``{gfx}`` filled in on
    the node, the table named by ``config_env`` there when the job's environment sets it."""
    return template_for(ctx.job.variant, ctx.target.container.python)


def template_for(variant_name: str, python: str) -> dict:
    """``probe_template`` without a job: a campaign's plan sends one per variant (campaign/capable.py)."""
    variant = get_variant(variant_name)
    return {**_request_with(python, variant, "{root}", "{meta}", "{gfx}", f"{{root}}/{variant.tuned_csv}"),
            "config_env": variant.config_env}


def probes_of(answer: dict) -> tuple[dict, str | None, str | None]:
    """A probe answer as ``facts["probes"]`` keeps it, and why the tuner's --help and the merge rule could not
    be read (None when they could)."""
    answer = {k: v for k, v in answer.items() if k != "ok"}
    problem, merge_problem = answer.pop("tuner_help_problem", None), answer.pop("merge_rule_problem", None)
    return {k: v for k, v in answer.items() if v is not None}, problem, merge_problem


def probe(ctx: Ctx, variant: KernelVariant) -> AiterProfile:
    facts, remote = ctx.job.facts, ctx.job.remote
    root, meta = remote.aiter_root, remote.meta_root or remote.aiter_root
    env = {**(facts.env or {}), **ctx.target.container.env}
    configured = (env.get(variant.config_env) or "").split(":")[0]
    tuned = configured or f"{root}/{variant.tuned_csv}"
    if tuned and not tuned.startswith("/"):
        tuned = f"{root}/{tuned}"
    req = _request(ctx, variant, root, meta, facts.gfx or "gfx942", tuned)
    answer = riders.call(ctx, "probe", req, timeout=HELP_TIMEOUT_S + 60)
    facts.probes, problem, merge_problem = probes_of(answer)
    if problem:
        ctx.job.note(f"could not read the tuner's --help ({problem}); its flags are assumed from the version")
    if merge_problem:
        ctx.job.note(f"could not tell the node's duplicate-key merge rule ({merge_problem}); it is assumed from "
                     "the version")
    if answer.get("tune_script_exists") is False:     # refused before anything runs: exit 2 (issue 36)
        have = parse_version(facts.version)
        need = f"needs AITER >= {format_version(variant.since)}" if variant.since and (
            have is None or have < variant.since) else "cannot be tuned there (a trimmed or wheel install?)"
        err = JobError(
            f"{ctx.job.node}: {variant.name} {need}: its tuner {variant.tune_script} "
            f"is not on this node (AITER {facts.version})",
            hint="upgrade amd-aiter in the container, or choose a container with a newer AITER")
        err.exit_code = ExitCode.USAGE
        raise err
    script = variant.tune_script.format(gfx=facts.gfx or 'gfx942')
    refuse_tuner_without(ctx, variant, answer.get("tuner_help"), script, problem)
    args = list(ctx.job.request.tune_args or [])
    tuneargs.validate(args, answer.get("tuner_help"), script, problem)
    tuneargs.refuse_values(args, variant.refused_tune_args, variant.name)
    tuneargs.refuse_splitk(args, variant)
    moetuners.check_help(moetuners.mode_of(ctx.job.request), answer.get("tuner_help"), script)
    note = tuneargs.splitk_note(args, answer.get("tuner_help"), variant.name)
    if note:
        ctx.job.note(note)
        ctx.ui.event(note)
    check_gpu_kinds(ctx)
    return settle_profile(facts)


def refuse_tuner_without(ctx: Ctx, variant: KernelVariant, help_text: str | None, script: str,
                         why_no_help: str | None = None) -> None:
    """Refuse (exit 2, before anything runs) a node whose tuner --help lists none of a ``help_requires`` entry's
    flags: an older tuner of that file that would do harm (bmm_a8w8_mxscale_bpreshuffle: a shipped table
    written). A --help that did not answer decides nothing: the job is told it was not checked."""
    if not help_text:
        for flags, why in variant.help_requires:
            ctx.job.note(f"could not check that {script} has {' or '.join(flags)} ({why_no_help or 'no --help'}): "
                         f"without it {why}")
        return
    for flags, why in tuner_lacks(variant, help_text):
        err = JobError(f"{ctx.job.node}: {variant.name} is refused on AITER {ctx.job.facts.version}: its "
                       f"tuner {script} has none of {', '.join(flags)} (--help), so {why}",
                       hint="upgrade amd-aiter in the container to one whose tuner lists "
                            f"{' or '.join(flags)} in its --help")
        err.exit_code = ExitCode.USAGE
        raise err


def tuner_lacks(variant: KernelVariant, help_text: str | None) -> list[tuple[tuple[str, ...], str]]:
    """The ``help_requires`` entries (flags, why) none of whose flags the tuner's --help lists; none where the
    --help did not answer (nothing is decided without it)."""
    if not help_text:
        return []
    have = help_flags(help_text)
    return [(flags, why) for flags, why in variant.help_requires if not set(flags) & have]


def check_gpu_kinds(ctx: Ctx) -> None:
    """Refuse to tune on GPUs whose cu_num differs from the serving GPUs' (issue 12, P-09): AITER keys
    every row by (gfx, cu_num), so rows tuned on a CPX/DPX partition (or an MI308X, or an MI350P) are
    never read by a server on full GPUs, and the other way round (after-v0.1.20 §6, Hyperloom 1288)."""
    facts, req = ctx.job.facts, ctx.job.request
    cus = facts.gpu_cu_nums or []
    tune = [g for g in facts.tune_gpus or [] if 0 <= g < len(cus) and cus[g] is not None]
    if not cus or not tune:
        return
    tune_cu = sorted({cus[g] for g in tune})
    free = set(facts.free_gpus or [])
    # busy GPUs are the serving ones; unknown when rocm-smi gave no use figures
    serving = [i for i in range(len(cus)) if i not in free and i not in tune and cus[i] is not None] \
        if facts.free_gpus is not None else []
    serving_cu = sorted({cus[i] for i in serving})
    facts.tune_cu_nums = tune_cu
    if len(tune_cu) > 1:
        raise JobError(f"the GPUs chosen for tuning have different cu_num {tune_cu} (partition mode?)",
                       hint="pass --gpus with GPUs of one kind; AITER keys tuned rows by cu_num")
    if serving_cu and tune_cu[0] not in serving_cu:
        msg = (f"tuning GPUs {','.join(map(str, tune))} have cu_num {tune_cu[0]} but the busy (serving) GPUs "
               f"have cu_num {'/'.join(map(str, serving_cu))}: the rows would never be used by that server")
        if not req.force_cu_num:
            good = [i for i in range(len(cus)) if cus[i] in serving_cu and i in free]
            raise JobError(msg, hint=(f"use --gpus {','.join(map(str, good))}" if good else
                                      "tune on GPUs of the serving kind (same partition mode)")
                           + ", or pass --force-cu-num to tune anyway")
        ctx.job.note(msg + " (--force-cu-num)")
