"""A campaign: one job id over many targets and variants.

The campaign job (``<ws>/<job>/state.json``, a ``JobState`` whose node/container/variant are comma-joined)
owns sub-jobs, one per (target, variant), kept as ordinary single-target jobs in ``<ws>/<job>/targets/``.
Each target runs its sub-jobs one after another in its own thread (its variants share the node's GPUs);
targets run in parallel. A target that fails does not stop the others; the job fails naming it.
"""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..context import Settings
from ..errors import ExitCode, JobError, TuneRemoteError, UsageError
from ..parsing.untuned import write_untuned_csv
from ..state import TERMINAL, JobState, Status, Workspace, atomic_write
from ..outcome.budget import parse_duration, seconds_per_shape, within
from ..variants import get_variant
from . import plan as planning
from .chain import carry, chain_after
from .targets import Runner, TargetRef


def is_campaign(job: JobState) -> bool:
    return job.is_campaign


def job_nodes(job: JobState, workspace: Workspace) -> list[str]:
    """The nodes a job runs on (a campaign: its targets' nodes, in order)."""
    if not job.is_campaign:
        return [job.node]
    return list(dict.fromkeys(s.node for s in sub_jobs(job, workspace))) or job.node.split(",")


def check_nodes(job: JobState, workspace: Workspace, nodes) -> None:
    """Every --node must be one of the job's nodes: one line, exit 2, nothing done."""
    have = job_nodes(job, workspace)
    unknown = [n for n in nodes if n not in have]
    if unknown:
        raise UsageError(f"job {job.job_id} has no target on node {unknown[0]!r}",
                         hint="its nodes: " + ", ".join(have))


def sub_workspace(workspace: Workspace, job: JobState) -> Workspace:
    """Where a campaign's sub-jobs live: ``<ws>/<job>/targets/`` (merge.py's, without its imports: pandas)."""
    from .merge import sub_workspace as of
    return of(workspace, job)


def sub_job_id(job_id: str, ref: TargetRef, variant: str) -> str:
    sid = f"{job_id}.{ref.node}.{ref.container}.{variant}"
    if len(sid) <= 81:
        return sid
    return f"{job_id[:48]}.{hashlib.sha1(sid.encode()).hexdigest()[:10]}.{variant}"[:81]


def make_plan(job: JobState, runner: Runner, refs: list[TargetRef], variants: list[str], settings: Settings,
              ui, workspace: Workspace | None = None) -> dict:
    probes = planning.probe(runner, refs, settings, job.request.gpus,
                            planning.considered(variants, job.request.get("logs")))
    reachable = [p for p in probes if not p.error]
    unreachable = [f"{p.ref.label}: {p.error}" for p in probes if p.error]
    if not reachable:
        err = JobError("no target could be used: " + "; ".join(unreachable),
                       hint="check the nodes with `ssh NODE docker ps`, or choose others with --node")
        codes = {p.exc.exit_code if p.exc is not None else err.exit_code for p in probes}
        if codes == {ExitCode.CONNECT}:
            err.exit_code = ExitCode.CONNECT     # none could be connected to (as for a single target); never 75:
        raise err                                # there is no job yet for a `resume`
    for p in reachable:
        ui.event(f"{p.ref.label}: aiter {p.facts.get('version')} ({p.facts.get('profile')}), "
                 f"{p.facts.get('gfx')} cu_num={p.facts.get('cu_num')}, GPUs free: "
                 f"{','.join(map(str, p.gpus))}")
    auto = list(variants) == ["auto"]
    if not auto:
        planning.refuse_untunable(reachable, list(variants))
        planning.refuse_tune_args(reachable, list(variants), job.request.get("tune_args"))
    mined: list[str] = []
    found = planning.mine(runner, reachable[0], job.request, variants, settings, notes=mined)
    out = {"variants": {}, "excluded": [], "unreachable": unreachable,
           "facts": {p.ref.label: p.facts for p in reachable}, "repeats": job.request.get("repeats")}
    if mined:
        out["notes"] = mined
    for variant, shapes in found.items():
        if not shapes:
            out["excluded"].append(f"{variant}: no untuned shapes found")
            continue
        groups, excluded = planning.group(reachable, variant)
        if not groups and auto:      # --variant auto picks only what the chosen targets can tune: one line
            out["excluded"].append(f"{variant} left out by --variant auto ({len(shapes)} shape(s) in the logs): "
                                   + "; ".join(excluded or unreachable))
            continue
        out["excluded"].extend(excluded)
        if not groups:
            raise UsageError(f"no target can tune {variant}: " + "; ".join(excluded or unreachable),
                             hint="choose nodes whose GPUs run it (a4w4 needs gfx950)")
        out["variants"][variant] = {}
        v = get_variant(variant)
        rate, source = seconds_per_shape(workspace, variant, v.family, None)
        out.setdefault("rates", {})[variant] = [rate, source]
        for kind, members in groups.items():
            weights = {p.ref: max(1, len(p.gpus)) for p in members}
            rows = shapes
            if job.request.budget:     # the kind's GPUs together: the most-missed shapes that fit
                rows, left = within(shapes, parse_duration(job.request.budget), sum(weights.values()), rate)
                if left:
                    out.setdefault("budget", []).append(
                        f"--budget {job.request.budget}: {variant} on {'/'.join(map(str, kind))}: the "
                        f"{len(rows)} most-missed shape(s) fit, {len(left)} left for another job")
            shards = planning.shard(rows, weights)
            out.setdefault("gpus", {}).update({ref.label: n for ref, n in weights.items()})
            out["variants"][variant]["/".join(map(str, kind))] = {
                ref.label: rows for ref, rows in shards.items()}
    if auto:      # the variants --variant auto tunes, on the targets that would tune them
        planning.refuse_tune_args(reachable, list(out["variants"]), job.request.get("tune_args"))
    if not out["variants"]:
        raise UsageError("no shapes to tune for " + ", ".join(found) + "".join(
            f"; {x}" for x in out["excluded"] if auto) + "".join(   # and why the logs' shapes were left out
            f"; {n}" for n in mined if "cannot be tuned by this AITER" in n), hint="check --variant and the logs")
    return out


def create_sub_jobs(job: JobState, workspace: Workspace, plan: dict, name=None) -> list[JobState]:
    """One ordinary job per (target, variant) with a non-empty shard; its shapes come as --shapes-csv.
    ``name(ref, variant)``: the sub-job's id (default ``sub_job_id``; a Slurm shard's before its node is known)."""
    subs = []
    shards_dir = workspace.job_dir(job.job_id) / "shards"
    for variant, groups in plan["variants"].items():
        for shards in groups.values():
            for label, rows in shards.items():
                if not rows:
                    continue
                node, container = label.split("/", 1)
                ref = TargetRef(node, container)
                sid = name(ref, variant) if name else sub_job_id(job.job_id, ref, variant)
                csv_path = shards_dir / f"{sid}.csv"
                atomic_write(csv_path, write_untuned_csv(rows, variant).encode())
                request = job.request.shard(str(csv_path), plan["facts"][label].get("free_gpus"), job.job_id)
                subs.append(JobState(job_id=sid, node=node, container=container, variant=variant,
                                     created=time.time(), request=request))
    return subs


def planned(job: JobState) -> bool:
    """Its target jobs are made: a campaign's sub-jobs; a single job is its own one target job."""
    return not job.is_campaign or bool(job.request.campaign.sub_jobs)


def drive(job: JobState, workspace: Workspace, runner: Runner, settings: Settings, ui, only: tuple = (),
          owner: str | None = None, announce: bool = False) -> str:
    """Run (or resume) every unfinished sub-job: targets in parallel, a target's variants in order.
    ``only``: the nodes to drive (resume --node); the others are left as they are, and the job-wide
    steps (moving a lost target's shapes, promotion across a GPU kind) wait for a resume of the whole job.
    A single job is its own target job, carried in this thread with the command's ``ui`` (``owner`` takes it
    once connected, ``announce`` says where its state is); what stops it stops the command."""
    if not job.is_campaign:
        return runner.run(job, workspace, settings, ui, owner=owner, announce=announce)
    subws = sub_workspace(workspace, job)
    ids = job.request.campaign.sub_jobs
    by_target: dict[str, list[str]] = {}
    for sid in ids:
        sub = subws.load(sid)
        if not only or sub.node in only:
            by_target.setdefault(f"{sub.node}/{sub.container}", []).append(sid)
    lock = threading.Lock()
    detach = bool(job.request.get("detach"))   # launch each target's next sub-job and return (resume finishes)
    from ..ui import TargetsView
    view = TargetsView(ui) if hasattr(ui, "stream") else None
    if view is not None:
        runner.ui_for = view.ui_for
    sub_settings = Settings(poll_s=settings.poll_s, reconnect_s=settings.reconnect_s,
                            accept_new_host_key=settings.accept_new_host_key, yes=True, interactive=False)

    def one_target(label: str, ids: list[str]) -> None:
        def prepare(sub: JobState, chain: list[JobState]) -> None:
            if bool(sub.request.get("detach")) != detach:
                sub.request["detach"] = detach
                subws.save(sub)
            if detach and chain and not sub.remote.get("run_dir"):
                sub.request["chain_after"] = chain_after(chain)
                if not (job.request.gpus or runner.granted_gpus(TargetRef(sub.node, sub.container))):
                    # chosen by the free rule: the run also waits, on the node, while they are in use
                    sub.request["chain_after"]["busy_threshold"] = planning.FREE_GPU_BUSY_PCT
                subws.save(sub)
            with lock:
                ui.event(f"{label}: {sub.variant} ({len(_shard_rows(sub))} shapes) started")

        def run(sub: JobState) -> None:
            sid = sub.job_id
            try:
                runner.run(sub, subws, sub_settings)
            except TuneRemoteError as exc:
                sub = subws.load(sid)
                if sub.state == Status.RUNNING and exc.exit_code != 75:
                    sub.state, sub.error = Status.FAILED, exc.one_line()
                    subws.save(sub)
            except Exception as exc:  # noqa: BLE001 - one target's bug must not stop the others
                sub = subws.load(sid)   # the engine said which step failed; a pipeline that may run on the
                if sub.state == Status.RUNNING and sub.step != "remote":   # node stays re-attachable (resume)
                    sub.state, sub.error = Status.FAILED, f"internal error: {type(exc).__name__}: {exc}"
                    subws.save(sub)
            sub = subws.load(sid)
            with lock:
                ui.event(f"{label}: {sub.variant} {sub.state}" + (f" ({sub.error})" if sub.error else ""))

        carry(ids, subws, prepare, run, detach)

    def run_targets(groups: dict[str, list[str]]) -> None:
        """Every target's sub-jobs, targets in parallel; the live view is closed when they are done."""
        try:
            with ThreadPoolExecutor(max_workers=max(1, len(groups))) as pool:
                list(pool.map(one_target, list(groups), list(groups.values())))
        finally:
            if view is not None:
                view.stop()

    run_targets(by_target)
    fill_kinds(job, workspace)
    if detach:
        runner.ui_for = None
        return finish(job, workspace)
    if only and any(s.state not in TERMINAL for s in sub_jobs(job, workspace)):
        return finish(job, workspace)
    from .reshard import reshard
    for _ in range(3):   # a lost target's untuned shapes go to the survivors of its kind (bounded)
        new = reshard(job, workspace, subws, runner, sub_jobs(job, workspace), ui)
        if not new:
            break
        groups: dict[str, list[str]] = {}
        for sub in new:
            groups.setdefault(f"{sub.node}/{sub.container}", []).append(sub.job_id)
        run_targets(groups)
    runner.ui_for = None
    from .spread import spread
    done = job.request.campaign.spread = job.request.campaign.spread or []
    if not done:   # once: a resumed campaign does not promote the same rows again
        done.extend(spread(job, subws, runner, sub_jobs(job, workspace), ui) or ["(nothing to spread)"])
        workspace.save(job)
    if job.request.campaign.remeasured is None:   # once, after the spread: `after` is what the kind serves
        from .remeasure import remeasure
        job.request.campaign.remeasured = remeasure(job, subws, runner, sub_jobs(job, workspace), ui)
        workspace.save(job)
    return finish(job, workspace)


def fill_kinds(job: JobState, workspace: Workspace) -> None:
    """A target planned before its node was known (a pending Slurm shard): its GPU kind as its discover found
    it, for the re-shard, the promotion across the kind and the report."""
    kinds = job.request.campaign.kinds
    if kinds is None:
        return
    unknown = []
    for s in sub_jobs(job, workspace):
        label = f"{s.node}/{s.container}"
        if label not in kinds and s.facts.get("gfx"):
            kinds[label] = "/".join(map(str, (s.facts.get("gfx"), s.facts.get("cu_num"), s.facts.get("profile"))))
        elif label not in kinds:
            unknown.append(label)
    if unknown and len(set(kinds.values())) == 1:     # never discovered (lost before): the partition's one kind
        kinds.update(dict.fromkeys(unknown, next(iter(kinds.values()))))


def _shard_rows(sub: JobState) -> list[str]:
    try:
        with open(sub.request.shapes_csv) as fh:
            return fh.read().splitlines()[1:]
    except OSError:
        return []


def sub_jobs(job: JobState, workspace: Workspace) -> list[JobState]:
    subws = sub_workspace(workspace, job)
    out = []
    for sid in job.request.campaign.sub_jobs or []:
        try:
            out.append(subws.load(sid))
        except TuneRemoteError:
            continue
    return out


def finish(job: JobState, workspace: Workspace) -> str:
    """Aggregate the sub-jobs into the campaign's state, comparison CSV(s) and report."""
    from .merge import write_outputs
    subs = sub_jobs(job, workspace)
    covered = covered_lost(job, subs)
    states = {s.state for s in subs if s.job_id not in covered}
    if Status.RUNNING in states:
        job.state, job.step = Status.RUNNING, "remote"
    elif subs and states == {Status.SUCCEEDED} and not job.request.campaign.unreachable:
        job.state, job.step, job.error = Status.SUCCEEDED, "done", None
    elif subs and states == {Status.SUCCEEDED}:   # every target tuned, but some could not be reached: the report says so
        job.state, job.step = Status.FAILED, "done"
        job.error = "unreachable: " + "; ".join(job.request.campaign.unreachable)
    else:
        bad = [f"{s.node}/{s.container} {s.variant}: {s.state}" + (f" ({s.error})" if s.error else "")
               for s in subs if s.state != Status.SUCCEEDED and s.job_id not in covered]
        job.state = Status.CANCELLED if states <= {Status.CANCELLED, Status.SUCCEEDED} and Status.CANCELLED in states else Status.FAILED
        job.step = "done"
        job.error = f"{len(bad)} of {len(subs)} target job(s) did not succeed: " + "; ".join(bad)
    if job.state != Status.RUNNING:
        write_outputs(job, workspace, subs)
    workspace.save(job)
    return job.state


def covered_lost(job: JobState, subs: list[JobState]) -> set[str]:
    """Lost sub-jobs whose untuned shapes the survivors of their kind tuned (the re-shard's sub-jobs all
    succeeded, or nothing was left to tune): the campaign was carried to its end without them."""
    done = job.request.campaign.resharded or {}
    state = {s.job_id: s.state for s in subs}
    return {s.job_id for s in subs if s.state == Status.LOST and done.get(s.job_id)
            and all(x.startswith("(") or state.get(x) == Status.SUCCEEDED for x in done[s.job_id])}


def targets_rows(job: JobState, workspace: Workspace) -> list[dict]:
    return [{"node": s.node, "container": s.container, "variant": s.variant, "state": s.state, "step": s.step}
            for s in sub_jobs(job, workspace)]


def cancel(job: JobState, workspace: Workspace, runner: Runner, grace_s: float,
           remote: bool = True, nodes: tuple = ()) -> dict:
    """``remote=False``: the processes were stopped another way (Slurm); only the states are written.
    ``nodes``: only the sub-jobs on them; the campaign stays running while others are. A target whose run
    had already ended on the node keeps its results: the campaign stays running for a ``resume`` to collect
    them. Returns the counts, the pids that survived SIGKILL, and the targets that had already finished."""
    out: dict = {"signalled": 0, "killed": 0, "remaining": [], "finished": [], "tables": [], "cancelled": 0}
    subws = sub_workspace(workspace, job)
    for sub in reversed(sub_jobs(job, workspace)):   # a chained variant before the run it waits for
        if sub.state in TERMINAL or (nodes and sub.node not in nodes):
            continue
        if remote and sub.remote.run_dir:
            res = runner.cancel(sub, subws, grace_s)
            out["signalled"] += len(res.get("signalled") or [])
            out["killed"] += len(res.get("killed") or [])
            out["remaining"] += [f"{sub.node}:{pid}" for pid in res.get("remaining") or []]
            if (res.get("table") or {}).get("line"):
                out["tables"].append(f"{sub.node}/{sub.container} {sub.variant}: {res['table']['line']}")
            if res.get("already_finished") and res.get("state") in (Status.SUCCEEDED, Status.FAILED):
                out["finished"].append(f"{sub.node}/{sub.container} {sub.variant} ({res['state']})")
                continue     # it ended on its own first: its results stay for the driver (or a resume)
        sub.state, sub.error = Status.CANCELLED, "cancelled by the user"
        subws.save(sub)
        out["cancelled"] += 1
    if any(s.state not in TERMINAL for s in sub_jobs(job, workspace)):
        return out                               # the other targets go on, or wait for a resume to collect
    job.state, job.error, job.step = Status.CANCELLED, "cancelled by the user", "done"
    workspace.save(job)
    return out
