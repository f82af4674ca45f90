"""What each chosen target can tune, known at plan time (capability probing, issue 36).

``discover`` takes one more rider, ``paths_exist``: every variant's tuner (under the meta root) and op_test
(under the aiter root), for each form its versions have. The plan then resolves each variant for the target's
AITER profile and reads what is missing there: ``--variant auto`` leaves such a variant out on that target
(and says why, on stderr and in the report); a variant named on the command line is refused before anything runs.
"""
from __future__ import annotations

import dataclasses

from ..variants import VARIANTS, KernelVariant, get_variant

RIDER = "paths_exist"


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


def refusal(label: str, version, variant: str, lacks: str) -> str:
    """The one line a named variant a target cannot tune is refused with."""
    return f"{label}: {variant} cannot be tuned there: its AITER {version or 'unknown'} has no {lacks}"
