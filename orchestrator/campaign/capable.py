"""What each chosen target can tune, and how its AITER behaves, known at plan time (capability probing, issue 36).

``discover`` takes one more rider, ``paths_exist``: every variant's tuner (under the meta root) and op_test
(under the aiter root), for each form its versions have. The plan then resolves each variant for the target's
AITER profile and reads what is missing there: ``--variant auto`` leaves such a variant out on that target
(and says why, on stderr and in the report); a variant named on the command line is refused before anything runs.
"""
from __future__ import annotations

import dataclasses

from ..steps import capabilities
from ..variants import VARIANTS, KernelVariant, get_variant

RIDER = "paths_exist"
PROBE = "probe@"      # + a variant: the capability probe a single run of it sends (nodeside/probe.py run_riders)


def _needs(v: KernelVariant) -> list[tuple[str, str]]:
    """(path template, what it is) the variant needs on a node: its tuner and its op_test."""
    out = [("{meta}/" + v.tune_script, f"{v.tune_script} (its tuner)")]
    if v.bench and v.bench.style != "run_config":      # run_config: the benchmark is the tuner itself
        out.append(("{root}/" + v.bench.script, f"{v.bench.script} (its op_test)"))
    return out


def path_templates() -> list[str]:
    """Every path any variant needs in any of its versions' forms (``{root}``/``{meta}``/``{gfx}`` unfilled)."""
    out = set()
    for v in VARIANTS.values():
        for form in (v, *(dataclasses.replace(v, **changes) for _, _, changes in v.overrides)):
            out.update(t for t, _ in _needs(form))
    return sorted(out)


def rider() -> dict:
    return {"paths": path_templates()}


def missing(ridden: dict | None, profile, gfx: str | None) -> dict[str, str]:
    """{variant: what it lacks on the node} from discover's ``paths_exist`` rider record (``{"request",
    "answer"}``); a path the node did not answer for counts as present (an older helper: the version decides)."""
    if not ridden:
        return {}
    sent = path_templates()
    got = (ridden.get("answer") or {}).get("exists") or []
    present = dict(zip(sent, got)) if len(got) == len(sent) else {}
    out = {}
    for name in VARIANTS:
        v = get_variant(name).resolve(profile)
        lacks = [what.replace("{gfx}", gfx or "gfx942") for t, what in _needs(v) if present.get(t) is False]
        if lacks:
            out[name] = " and ".join(lacks)
    return out


def probe_riders(variants, python: str) -> dict:
    """One ``probe@<variant>`` rider per variant the plan considers: the probe a single run of it sends
    (steps/capabilities.py ``template_for``), all answered in the one discover round trip."""
    return {PROBE + v: capabilities.template_for(v, python) for v in variants}


def probe_timeout(variants) -> float:
    """discover's wait: each distinct tuner's --help may run once (HELP_TIMEOUT_S; cached node-side after); one
    tuner's: a single run's wait (steps/discover.py), never less."""
    return capabilities.HELP_TIMEOUT_S * max(1, len({get_variant(v).tune_script for v in variants})) + 120


def probed(ridden: dict) -> tuple[dict[str, dict], dict[str, str]]:
    """({variant: its probes as a single run keeps them in ``facts["probes"]``}, {variant: why its tuner's --help
    did not answer}) from discover's riders (what ``probes_of`` sets apart: the plan's --tune-arg check says it,
    as a single run does, steps/tuneargs.validate); a variant the node did not answer for (an older helper) is
    absent from both: its profile comes from the version."""
    probes, problems = {}, {}
    for name, rec in ridden.items():
        if name.startswith(PROBE) and isinstance(rec, dict) and isinstance(rec.get("answer"), dict):
            v = name[len(PROBE):]
            probes[v], problem, _merge = capabilities.probes_of(rec["answer"])
            if problem:
                problems[v] = problem
    return probes, problems


def older_tuners(variant_probes: dict, profile) -> dict[str, str]:
    """{variant: what its tuner lacks} where the probed tuner --help lists none of a ``help_requires`` entry's
    flags (an older tuner of that file that would do harm: steps/capabilities.refuse_tuner_without refuses
    the same in a single run), read in the plan's probes; a --help that did not answer decides nothing."""
    out = {}
    for name, probes in (variant_probes or {}).items():
        v = get_variant(name).resolve(profile)
        lacks = capabilities.tuner_lacks(v, (probes or {}).get("tuner_help"))
        if lacks:
            out[name] = " and ".join(f"{' or '.join(flags)} in its tuner's --help ({why})" for flags, why in lacks)
    return out


def refusal(label: str, version, variant: str, lacks: str) -> str:
    """The one line a named variant a target cannot tune is refused with."""
    return f"{label}: {variant} cannot be tuned there: its AITER {version or 'unknown'} has no {lacks}"


def check_tune_args(label: str, facts: dict, variant: str, tune_args: list[str]) -> None:
    """A campaign's --tune-arg against this target's probed tuner --help for ``variant``: what a single run's
    capability probe refuses (steps/capabilities.probe), refused here with the target and the variant named.
    A target whose helper sent no probe for it (older helper) is left to its job's own check."""
    from ..aiter_profiles import profile_from_facts
    from ..errors import UsageError
    from ..steps import tuneargs
    probes = (facts.get("variant_probes") or {}).get(variant)
    if not tune_args or probes is None:
        return
    v = get_variant(variant).resolve(profile_from_facts({**facts, "probes": dict(probes)}))
    script = v.tune_script.format(gfx=facts.get("gfx") or "gfx942")
    try:
        tuneargs.validate(list(tune_args), probes.get("tuner_help"), script,
                          (facts.get("variant_help_problems") or {}).get(variant))
        tuneargs.refuse_values(list(tune_args), v.refused_tune_args, v.name)
        tuneargs.refuse_splitk(list(tune_args), v)
    except UsageError as exc:
        raise UsageError(f"{label}: {variant}: {exc.message}", hint=exc.hint) from None

