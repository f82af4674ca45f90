"""Campaign planning: probe every target, find the shapes once, group targets by GPU kind, shard by cost.

Pure where it can be (``group``, ``shard``, ``shape_cost``, ``plan_lines``); ``probe`` and ``mine`` ask
the nodes (one helper round trip per target, one mining pass). The probe is a single run's capability probe,
one per variant the plan considers (``considered``): each variant's shapes are found, and its plan lines say
what was probed, with the profile that variant's probe settles (``variant_facts``), as a single run of it would.
"""

from __future__ import annotations

import heapq
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import ConnectionLost, TuneRemoteError, UsageError
from ..session import FREE_GPU_BUSY_PCT, NodeSession, Settings
from ..ui import Ui
from ..variants import VARIANTS, get_variant
from .targets import Runner, TargetRef
from . import capable
from ..outcome.budget import shape_cost

@dataclass
class Probe:
    ref: TargetRef
    facts: dict = field(default_factory=dict)
    error: str | None = None
    exc: TuneRemoteError | None = None       # what made ``error``: a campaign no target answered ends with its code

    @property
    def kind(self) -> tuple:
        """Targets of one kind give the same kernel timings: same gfx, same CU count, same AITER profile."""
        return (self.facts.get("gfx"), self.facts.get("cu_num"), self.facts.get("profile"))

    @property
    def gpus(self) -> list[int]:
        return [int(g) for g in self.facts.get("free_gpus") or []]


def considered(variants: list[str], logs) -> list[str]:
    """The variants the plan probes: those named; ``--variant auto``: those local logs show, or (a log on a node
    or in a container, read only after discover) every variant (each tuner's --help is cached node-side)."""
    if list(variants) != ["auto"]:
        return list(variants)
    from ..steps.shape_sources import split_log_sources
    where = split_log_sources(list(logs or []))
    if where["local"] and not where["node"] and not where["container"]:
        return _variants_in_logs(None, list(logs))
    return list(VARIANTS)


def variant_facts(facts: dict, variant: str) -> dict:
    """A target's plan facts with ``variant``'s probe in ``probes``, settled (``settle_profile``: its profile's
    name, what was probed and assumed) as a single run of that variant has them."""
    from ..aiter_profiles import settle_profile
    out = _with_probe(facts, variant)
    settle_profile(out)
    return out


def _with_probe(facts: dict, variant: str) -> dict:
    return {**facts, "probes": dict((facts.get("variant_probes") or {}).get(variant) or {})}


def _probe_one(runner: Runner, ref: TargetRef, settings: Settings, gpus, variants=()) -> Probe:
    target = None
    try:
        target = runner.open(ref)
        target.connect()       # cannot connect / host key refused: said at once, not retried as a lost connection
        session = NodeSession(target, settings, Ui(quiet=True), node=ref.node)
        riders = {capable.RIDER: capable.rider(), **capable.probe_riders(variants, target.container.python)}
        facts = session.discover(session.discover_request(busy_threshold=FREE_GPU_BUSY_PCT, riders=riders),
                                 timeout=capable.probe_timeout(variants))
        if not facts.aiter_root:
            return Probe(ref, error=f"no aiter installation found in container {ref.container}")
        ridden = facts.pop("riders", None) or {}
        # what this target cannot tune (tuner or op_test missing): known before anything runs (issue 36)
        facts["cannot_tune"] = capable.missing(ridden.get(capable.RIDER), session.profile, facts.gfx)
        # each variant's profile: the node's, not the version's
        facts["variant_probes"], problems = capable.probed(ridden)
        for v, lacks in capable.older_tuners(facts["variant_probes"], session.profile).items():
            facts["cannot_tune"].setdefault(v, lacks)         # a tuner too old to run safely (help_requires)
        if problems:
            facts["variant_help_problems"] = problems
        facts = facts.to_dict()
        granted = runner.granted_gpus(ref)
        if granted:                           # what the scheduler granted is what is used
            facts["free_gpus"] = list(granted)
        elif gpus:
            facts["free_gpus"] = list(gpus)
        if not facts.get("free_gpus"):
            return Probe(ref, facts, error=f"no free GPU on {ref.node}")
        return Probe(ref, facts)
    except ConnectionLost as exc:      # its message names the target; its hint is no job's to resume
        return Probe(ref, error=exc.message, exc=exc)
    except TuneRemoteError as exc:
        return Probe(ref, error=exc.one_line(), exc=exc)
    finally:
        if target is not None:
            target.close()


def probe(runner: Runner, refs: list[TargetRef], settings: Settings, gpus=None, variants=()) -> list[Probe]:
    """Discover every target at once (one thread, one connection and one round trip each), each of
    ``variants`` probed there."""
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(refs)))) as pool:
        return list(pool.map(lambda r: _probe_one(runner, r, settings, gpus, variants), refs))


def mine(runner: Runner, probe_: Probe, request: dict, variants: list[str], settings: Settings,
         notes: list | None = None) -> dict[str, list]:
    """Shapes per variant, found once (logs in a container/node are read on the first reachable target;
    ``local:PATH`` on this machine). ``variants == ["auto"]``: every variant the logs show. What the mining
    noted (shapes left out and why, log warnings) is added to ``notes``."""
    from ..records import Facts, JobRequest, NodePaths
    from ..steps.shape_sources import ShapeSearch, find
    target = runner.open(probe_.ref)
    session = NodeSession(target, settings, Ui(quiet=True), node=probe_.ref.node,
                          facts=Facts.from_dict(dict(probe_.facts)))
    remote = NodePaths()
    root = probe_.facts.get("aiter_root")
    if root:   # what discover records for a job: the shapes step compares the table a log names with it (C-12)
        remote.aiter_root, remote.meta_root = root, probe_.facts.get("meta_root") or root
    request, noted, info = JobRequest.from_dict(dict(request)), [], {}
    try:
        if variants == ["auto"]:
            variants = _variants_in_logs(session, request.get("logs") or [])
            if not variants:
                raise UsageError("--variant auto: the logs show no untuned shapes of any variant",
                                 hint="check the --log paths, or name the variants: --variant a8w8_blockscale,moe_2stages")
        out = {}
        for v in variants:       # its shapes (the MoE token buckets: the probed tiers) under its own probe
            session.facts = Facts.from_dict(variant_facts(probe_.facts, v))
            out[v], _described = find(ShapeSearch(session, request, v, remote,
                                                  lambda n: noted.append(n) if n not in noted else None,
                                                  lambda: info))
        if notes is not None:
            notes.extend(n for n in noted if n not in notes)
        return out
    finally:
        target.close()


def _variants_in_logs(session: NodeSession, logs: list[str]) -> list[str]:
    from ..shapelib import shapelog
    from ..steps.shape_sources import split_log_sources
    seen: set[str] = set()
    for where, paths in split_log_sources(logs).items():
        if not paths:
            continue
        if where == "local":
            shapes = shapelog.parse_files(paths, None).shapes
        else:
            shapes = session.call("shapes", {"logs": paths, "variant": None}, host=(where == "node"),
                                  timeout=3600).get("shapes") or {}
        seen.update(v for v, rows in shapes.items() if rows and v in VARIANTS)
    return [v for v in VARIANTS if v in seen]


def shard(shapes: list[dict], weights: dict[TargetRef, int]) -> dict[TargetRef, list[dict]]:
    """Longest-processing-time-first: each shape (costliest first) goes to the target that would finish
    it first, a target's speed being its number of GPUs. Deterministic for equal inputs."""
    out: dict[TargetRef, list[dict]] = {ref: [] for ref in weights}
    if not weights:
        return out
    heap = [(0.0, i, ref) for i, ref in enumerate(weights)]
    heapq.heapify(heap)
    for s in sorted(shapes, key=shape_cost, reverse=True):
        load, i, ref = heapq.heappop(heap)
        out[ref].append(s)
        heapq.heappush(heap, (load + shape_cost(s) / max(1, weights[ref]), i, ref))
    return out


def group(probes: list[Probe], variant: str) -> tuple[dict[tuple, list[Probe]], list[str]]:
    """Targets able to tune ``variant`` by kind; and why the others cannot (its GPU, or its AITER lacks the
    variant's tuner or op_test: ``facts["cannot_tune"]``)."""
    v = get_variant(variant)
    groups: dict[tuple, list[Probe]] = {}
    excluded = []
    for p in probes:
        if p.error:
            continue
        if v.requires_gfx and p.facts.get("gfx") not in v.requires_gfx:
            excluded.append(f"{p.ref.label}: {variant} needs {'/'.join(sorted(v.requires_gfx))}, "
                            f"this GPU is {p.facts.get('gfx')}")
            continue
        lacks = (p.facts.get("cannot_tune") or {}).get(variant)
        if lacks:
            excluded.append(capable.refusal(p.ref.label, p.facts.get("version"), variant, lacks))
            continue
        groups.setdefault(p.kind, []).append(p)
    return groups, excluded


def refuse_untunable(probes: list[Probe], variants: list[str]) -> None:
    """A variant named on the command line that a chosen target cannot tune: exit 2 before anything runs, one
    line naming the target, its AITER version and what is missing."""
    for v in variants:
        for p in probes:
            lacks = (p.facts.get("cannot_tune") or {}).get(v) if not p.error else None
            if lacks:
                raise UsageError(capable.refusal(p.ref.label, p.facts.get("version"), v, lacks),
                                 hint=f"leave {p.ref.node} out (--node), upgrade amd-aiter there, or use "
                                      "--variant auto, which tunes only what each target can")


def refuse_tune_args(probes: list[Probe], variants: list[str], tune_args) -> None:
    """The campaign's --tune-arg against every target that would tune each variant (its GPU and AITER can),
    read in that target's probed tuner --help: a flag its tuner lacks is exit 2 before any target job starts,
    one line naming the target, the variant and the flag (a single run refuses it the same way)."""
    if not tune_args:
        return
    for v in variants:
        groups, _excluded = group(probes, v)
        for members in groups.values():
            for p in members:
                capable.check_tune_args(p.ref.label, p.facts, v, list(tune_args))


def plan_lines(plan: dict) -> list[str]:
    from ..steps.bench import fixed_cost_line
    from ..outcome.budget import estimate, fmt_duration
    from ..variants import jit_modules
    lines = list(plan.get("budget", []))
    for variant, groups in plan["variants"].items():
        rate, source = (plan.get("rates") or {}).get(variant) or [None, ""]
        for kind, shards in groups.items():
            total = sum(len(s) for s in shards.values())
            lines.append(f"{variant} on {kind} ({len(shards)} target(s), {total} shapes):")
            for label, rows in shards.items():
                cost = sum(shape_cost(r) for r in rows)
                est = (f", est. tuning time {fmt_duration(estimate(rows, plan['gpus'][label], rate))} on "
                       f"{plan['gpus'][label]} GPU(s)" if rate and label in plan.get("gpus", {}) else "")
                lines.append(f"  {label}: {len(rows)} shapes (est. cost {cost:.1f}{est})")
                lines.append("    " + fixed_cost_line(get_variant(variant), rows, int(plan.get("repeats") or 3),
                                                     len(jit_modules(variant)) or 1))
                if label in (plan.get("facts") or {}):
                    lines.append("    " + profile_line(plan["facts"][label], variant))
        if rate:
            lines.append(f"  ({variant} tuning time per shape and GPU: {source})")
    for why in plan.get("excluded", []):
        lines.append(f"excluded: {why}")
    for note in plan.get("notes", []):
        lines.append(f"note: {note}")
    for p in plan.get("unreachable", []):
        lines.append(f"unreachable: {p}")
    return lines


def profile_line(facts: dict, variant: str) -> str:
    """What the target's AITER profile for ``variant`` was probed from and what the version stood for (a MoE
    variant: the token tiers its shapes were bucketed with)."""
    from ..aiter_profiles import profile_from_facts
    profile = profile_from_facts(_with_probe(facts, variant))
    assumed = [a.split(" (from ")[0] for a in profile.assumed]
    basis = profile.assumed[0].rpartition(" (from ")[2].rstrip(")") if profile.assumed else "the version"
    tiers = (f"MoE token tiers {'/'.join(map(str, profile.moe_padded_tiers))}; "
             if get_variant(variant).family == "moe" else "")
    return (f"{tiers}probed on the node: {'; '.join(profile.probed) or 'nothing'}; assumed from {basis}: "
            f"{', '.join(assumed) or 'nothing'}")
