"""Drives a job through the workflow: asks workflow.next_step, runs it, saves state after every step."""

from __future__ import annotations

import importlib
import threading
import time

from .context import Ctx
from .errors import ConnectionLost, ObserverError, TuneRemoteError
from .state import Status
from .workflow import next_step

# a step's module is imported when the step first runs, so a job starts talking to its node before pandas and
# jinja2 (~0.4 s) are loaded; warm.warm_up() loads them while the pipeline runs (steps/remote.py)

_IMPORTING = threading.Lock()   # a campaign's sub-jobs start steps in several threads: one imports at a time


def _steps_module(module: str):
    with _IMPORTING:
        return importlib.import_module(f"{__package__}.steps.{module}")


def load_steps(names: tuple = ("discover", "shapes", "prepare", "remote")) -> None:
    """Import the first steps' modules now (the CLI does it while it waits for the node: preconnect.py)."""
    for name in names:
        _steps_module(name)


def step_func(name: str):
    """Each step of workflow.STEPS is the module of its name under steps/, entered by its run(ctx)."""
    return _steps_module(name).run


def drive(job, workspace, target, settings, ui, owner: str | None = None, announce: bool = False) -> str:
    """The one way a job is carried on its target (run, resume, demo, watch, a campaign's runner, the Slurm node
    driver): connected first (a refused connection leaves no half-made job behind); ``owner``: this process
    takes the job (one driver per job, R-05) and saves it before its first step (``announce``: says where its
    state is); the target is closed (given back to its runner) whatever happens. Returns the job state."""
    ctx = Ctx(job=job, workspace=workspace, target=target, settings=settings, ui=ui)
    try:
        target.connect()
        if owner:
            workspace.own(job.job_id, owner)
            workspace.save(job)
        if announce:
            ui.event(f"job {job.job_id} ({job.variant} on {job.node}/{job.container}); "
                     f"state in {workspace.job_dir(job.job_id)}")
        return run_job(ctx)
    finally:
        target.close()


def run_job(ctx: Ctx) -> str:
    """Carry the job as far as it goes. Returns the job state ('running' when detached)."""
    job = ctx.job
    # one save per step: the one that marks it running also writes the step before it done (nothing but
    # next_step, no I/O, lies between them), and the one after the loop the last step; a job's first save
    # is its first step's (or, with nothing left to run, the final one)
    try:
        while (name := next_step(job)) is not None:
            st = job.step_state(name)
            before = (job.step, st.status, st.started)
            job.step = name
            if st.status != Status.RUNNING:
                st.status, st.started = Status.RUNNING, time.time()
            ctx.save()
            if job.state != Status.RUNNING:     # `cancel` said so since the last save (this one read it): the
                job.step, st.status, st.started = before    # step does not start, as when next_step saw it
                ctx.save()
                break
            ctx.ui.step(name)
            try:
                step_func(name)(ctx)
            except (ConnectionLost, ObserverError):
                ctx.save()   # the node carries on; `resume` picks up from here (never a verdict on the job)
                raise
            except TuneRemoteError as exc:
                st.status, st.finished = Status.FAILED, time.time()
                if job.state == Status.RUNNING:
                    job.state = Status.FAILED
                job.error = exc.one_line()
                ctx.save()
                _best_effort_fetch(ctx, name)
                raise
            except Exception as exc:     # a bug: the job says so instead of staying "running" for ever,
                why = f"internal error in step {name}: {type(exc).__name__}: {exc}"[:500]
                if name == "remote":     # but a pipeline that may run on the node stays re-attachable
                    job.note(why + " (the node's pipeline goes on: `tune-remote resume` re-attaches)")
                    ctx.save()
                    raise
                st.status, st.finished = Status.FAILED, time.time()
                if job.state == Status.RUNNING:
                    job.state = Status.FAILED
                job.error = why
                ctx.save()
                raise
            if job.state != Status.RUNNING:       # cancelled at confirmation / on the node
                st.status = Status.FAILED
                ctx.save()
                break
            if name == "remote" and job.request.detach and job.step_state("remote").info.get(
                    "state", Status.RUNNING) == Status.RUNNING:
                ctx.save()
                return Status.RUNNING
            st.status, st.finished = Status.DONE, time.time()   # saved with the next step's start (above)
        if job.state == Status.RUNNING:
            job.state = Status.SUCCEEDED
            job.step = "done"
        ctx.save()
        return job.state
    finally:
        _record_stats(ctx)
        ctx.ui.stop()


def _record_stats(ctx: Ctx) -> None:
    """Round trips of this process (SSH channels opened) and helper ops, for `benchmarks/`."""
    # since the job took the target (a campaign's runner lends one target to its container's jobs in turn);
    # helper_ops_batched: of helper_ops, those that rode in a batch request (one round trip for several)
    ctx.job.remote.setdefault("stats", []).append(ctx.target.since_mark())
    try:
        ctx.save()
    except OSError:
        pass


def _best_effort_fetch(ctx: Ctx, failed_step: str) -> None:
    """After a failure, bring home whatever logs exist, so the user can see why. Never raises."""
    if failed_step in ("discover", "shapes") or not ctx.job.remote.logs:
        return
    try:
        fetch = _steps_module("fetch")
        fetch.pull(ctx, fetch.wanted_files(ctx, ctx.job_dir))
        ctx.save()
    except Exception:  # the real error is already being reported
        pass
