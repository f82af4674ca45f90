"""What ``run``, ``resume`` and ``demo`` do, below the CLI: the options checked (checks.py), the typed request made
(``JobRequest.of_run``), the job made and carried through the lifecycle (lifecycle.py): several targets as a
campaign, one as a campaign of one (the one-node source, single.py: the job of old, its own directory, no
campaign job over it). Each returns the job for the caller to print (None: a dry run's plan, shown through
the console); nothing here prints."""
from __future__ import annotations

import time
from typing import Callable

from ..context import Settings, Target
from ..errors import JobError, UsageError
from ..inventory import load_inventory, resolve_inventory_path
from ..records import DEMO_KEYS, JobRequest
from ..state import TERMINAL, JobState, Status, Workspace, check_job_id, new_job_id
from ..variants import VARIANTS, get_variant
from . import checks
from .console import Console


def run(workspace: Workspace, inventory_path: str, settings: Settings, console: Console, *, node, container,
        variant, dry_run, slurm, slurm_nodes, job_id, detach, **options) -> JobState | None:
    """``tune-remote run``: ``options`` are run's flags of the request (checks.request_options)."""
    from ..preconnect import Preconnect, claim
    logs, profiles = options["logs"], options["profiles"]
    checks.required_inputs(variant, node, slurm, logs or profiles, options["shapes_csv"], options["nk"],
                           options["model"])
    nodes, variants = list(node), checks.variant_names(variant)
    checks.padded_m_applies(variants, options.get("padded_m"))
    inv = load_inventory(inventory_path)
    slurm_nodes = checks.where(nodes, slurm, slurm_nodes, dry_run, detach)
    campaign = bool(slurm) or checks.several(inv, nodes, variants) or dry_run   # a dry run: a campaign's plan
    pre = None
    try:
        if campaign:
            checks.campaign_inputs(inv, nodes, container, variants, logs, options["shapes_csv"], options["nk"], slurm)
            checks.local_logs(logs)     # --variant auto reads them before connecting (campaign/plan.py)
            for v in variants:
                if v != "auto":
                    checks.local_inputs(v, logs, options["shapes_csv"], options["nk"], options["model"],
                                        options["m_preset"])
            if profiles:
                raise UsageError("--profile applies to one node and one variant (not a campaign yet)",
                                 hint="run one job per node with --profile, or give the campaign --log")
        else:
            get_variant(variants[0])
            node_spec, ctr = checks.one_container(inv, nodes[0], container)
            container = ctr.name
            # connect and start the node helper while the inputs are checked and the job is made (preconnect.py)
            pre = (claim(inventory_path, node_spec, ctr, settings.accept_new_host_key)
                   or Preconnect(node_spec, ctr, settings.accept_new_host_key))
            checks.local_inputs(variants[0], logs or profiles, options["shapes_csv"], options["nk"],
                                options["model"], options["m_preset"], check_logs=logs)
            checks.local_profiles(variants[0], profiles)
        request = JobRequest.of_run(**checks.request_options(variants, detach=detach, **options))
        claimed = None
        if not job_id:
            job_id = new_job_id("-".join(variants), (slurm or "-".join(nodes)) if campaign else nodes[0])
            if not dry_run:
                job_id = claimed = workspace.claim(job_id)
        job_id = check_job_id(job_id)
        if workspace.exists(job_id):
            raise UsageError(f"job {job_id} already exists in {workspace.root}",
                             hint=f"use `tune-remote resume {job_id}` or choose another --job-id")
        with workspace.keeping(claimed):
            if campaign:
                kind, source = (("slurm", {"cluster": slurm, "nodes": slurm_nodes, "dry_run": dry_run}) if slurm
                                else ("inventory", {}))
                job = start_campaign(workspace, lambda: inv, settings, console, job_id, nodes, container,
                                     variants, request, kind, source, dry_run)
                return None if dry_run else job
            job = JobState(job_id=job_id, node=nodes[0], container=container, variant=variants[0],
                           created=time.time(), request=request)
            from ..engine import load_steps
            load_steps()                  # the first steps' modules, while the node starts the helper
            target, pre = pre.target(), None
            return one(workspace, job, target, settings, console.ui, inventory=lambda: inv)
    except BaseException:
        if pre is not None:
            pre.abandon()
        raise


def one(workspace: Workspace, job: JobState, target: Target, settings: Settings, ui, owner: str | None = None,
        announce: bool = True, inventory: Callable | None = None) -> JobState:
    """A job of one target (run, demo, watch) on ``target`` (connected early by preconnect.py, the demo's, a
    watch's): a campaign of one, through the lifecycle."""
    from . import lifecycle
    inventory = inventory or (lambda: load_inventory(resolve_inventory_path(None)))   # never read: the target is given
    lifecycle.carry(workspace, job, inventory, settings, Console(ui=ui, show=ui.event), target=target,
                    owner=owner or ("resume" if job.rev else "run"), announce=announce)
    return job


def start_campaign(workspace: Workspace, inventory: Callable, settings: Settings, console: Console, job_id: str,
                   nodes, container, variants, request, kind: str, options: dict, dry_run: bool) -> JobState:
    from . import lifecycle
    job = lifecycle.new_job(job_id, nodes, container, variants, request)
    lifecycle.start(workspace, job, kind, options, inventory, settings, console, dry_run)
    return job


def resume(workspace: Workspace, inventory_path: str, job_id: str, settings: Settings, console: Console, *,
           relaunch: bool, retry: bool, nodes=()) -> JobState:
    """``tune-remote resume``: re-attach (``relaunch``: a lost job launched again; ``retry``: a laptop step that
    failed after the node's pipeline succeeded run again; ``nodes``: a campaign's targets on them only)."""
    from .driver import check_nodes
    check_nodes(workspace.load(job_id), workspace, nodes)   # no such job/node: say so first
    workspace.own(job_id, "resume")                 # a second driver exits 1 naming the first
    job = workspace.load(job_id)                    # what the last driver left, read under the lock
    campaign = job.is_campaign
    if job.state == Status.LOST and not campaign:
        if not relaunch:
            raise JobError(f"job {job_id} was lost: {job.error or 'its process on the node is gone'}",
                           hint=f"`tune-remote resume {job_id} --relaunch` launches it again (rows already "
                                "tuned are kept, only the other shapes are tuned)")
        from ..steps.remote import prepare_relaunch
        from ..workflow import STEPS
        job.state, job.error = Status.RUNNING, None
        for name in STEPS[STEPS.index("remote"):]:
            job.step_state(name).status = Status.PENDING
        prepare_relaunch(job)
    elif relaunch:
        raise UsageError(f"job {job_id} is {job.state}, not lost: nothing to relaunch",
                         hint=f"`tune-remote resume {job_id}` re-attaches to a running job")
    if retry:
        retry_failed(job)
    if job.state in TERMINAL:
        return job
    job.request.detach = False      # a detached job: this resume drives it to the end
    from . import lifecycle
    lifecycle.carry(workspace, job, lambda: load_inventory(inventory_path), settings, console, only=tuple(nodes),
                    owner="resume", announce=True)
    return job


def retry_failed(job: JobState) -> None:
    """R-01: hours of tuning are not thrown away for a laptop-side failure after the node finished."""
    from ..workflow import STEPS
    if job.state != Status.FAILED or job.is_campaign:
        raise UsageError(f"job {job.job_id} is {job.state}, not a failed single job: nothing to retry",
                         hint=f"`tune-remote resume {job.job_id}` carries a running job on")
    failed = [n for n in STEPS if job.step_state(n).status == Status.FAILED]
    step = failed[0] if failed else job.step
    if step not in STEPS or STEPS.index(step) <= STEPS.index("remote") or job.step_state("remote").status != Status.DONE:
        raise JobError(f"job {job.job_id} failed at {step}, before its node pipeline succeeded: a retry would "
                       "not help", hint="start a new run")
    job.state, job.error = Status.RUNNING, None
    for name in STEPS[STEPS.index(step):]:
        job.step_state(name).status = Status.PENDING
    job.note(f"{step} retried after it failed on the laptop (resume --retry)")


def demo_variant(variant: str) -> str:
    """The variant the demo can run (a simulated server log has its shapes, AITER ships its benchmark)."""
    from ..sim.logs import expected_shapes, log_specs
    logged = [v for v in VARIANTS if any(expected_shapes(log.name).get(v) for log in log_specs())]
    variant = get_variant(variant).name
    if get_variant(variant).bench is None or variant not in logged:   # the comparison runs its op_test on
        raise UsageError(f"the demo cannot run {variant}: " + (  # the shapes of a simulated server log
            "AITER ships no benchmark (op_test) for it" if get_variant(variant).bench is None
            else "no simulated server log has its shapes (tune it on a test-bed node: run --nk N,K)"),
            hint="demo one of: " + ", ".join(v for v in logged if VARIANTS[v].bench is not None))
    return variant


def demo(workspace: Workspace, console: Console, variant: str, profile: str, repeats: int, noise: float,
         nodes: int = 1, noise_model: str = "uniform", noise_seed: int = 0, max_repeats: int | None = None,
         aa: bool = False) -> JobState:
    """``tune-remote demo``: the whole pipeline against simulated nodes on this machine (one: a single job;
    several: a campaign over them, the demo's target source)."""
    from ..demo import demo_nodes, demo_target, prepare_demo, serve_cmd
    variant = demo_variant(variant)
    settings = Settings(yes=True, poll_s=0.2)
    sim = dict(profile=profile, variant=variant, noise_pct=noise, noise_model=noise_model, noise_seed=noise_seed,
               **({"aa": True} if aa else {}))
    more = {"max_repeats": max_repeats} if max_repeats and max_repeats > repeats else {}
    if nodes > 1:
        job_id = workspace.claim(new_job_id(variant, f"demo{nodes}"))
        dirs, log_path = demo_nodes(workspace.root / ".demo-nodes" / job_id, nodes, **sim)
        request = JobRequest.of_run(DEMO_KEYS[:-1], logs=[log_path], demo_nodes=dirs, repeats=repeats, **more)
        from ..inventory import Inventory
        return start_campaign(workspace, lambda: Inventory(path="(demo)", nodes={}), settings, console, job_id,
                              list(dirs), "simulated", [variant], request, "demo", {}, False)
    job_id = workspace.claim(new_job_id(variant, "demo"))
    demo_dir, log_path = prepare_demo(workspace.root / ".demo-nodes" / job_id, **sim)
    request = JobRequest.of_run(DEMO_KEYS, logs=[log_path], demo_dir=str(demo_dir), repeats=repeats,
                                serve_cmd=serve_cmd(variant), **more)
    job = JobState(job_id=job_id, node="demo", container="simulated", variant=variant, created=time.time(),
                   request=request)
    return one(workspace, job, demo_target(str(demo_dir)), settings, console.ui)
