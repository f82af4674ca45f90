"""Where a campaign's targets come from: one registry of *target sources*, keyed by the kind saved in the job.

A campaign saves its source's kind in ``request.campaign.source`` (``inventory``, ``slurm``, ``demo``);
``run``, ``resume``, ``cancel``, ``status``, ``logs`` and ``fetch`` all reach its targets through
``open_source(kind, ...)``, never by asking which keys the request holds. A job saved before the kind was
(no ``source`` key) gets it from those keys once (``source_kind``); a single job (no campaign record) is a
campaign of one from the one-node source (single.py). Adding a source: one module with a
``TargetSource`` subclass, and one line in ``SOURCES`` (docs/internals.md, "The target-source seam").
"""

from __future__ import annotations

import importlib

from ..errors import JobError, UsageError
from ..state import JobState
from .targets import SourceEnv, TargetSource

# kind -> "module:class" (relative to this package), imported on first use
SOURCES = {
    "inventory": ".targets:InventorySource",
    "slurm": ".slurm:SlurmSource",
    "demo": ".demo:DemoSource",
    "single": ".single:SingleSource",
}


def source_kind(job: JobState) -> str:
    """The kind saved with the campaign; for a job saved before it was, derived from the request's keys; a
    single job's: ``single``, its one target."""
    if not job.is_campaign:
        return "single"
    camp = job.request.campaign
    if camp is not None and camp.source:
        return camp.source
    if job.request.demo_nodes:
        return "demo"
    return "slurm" if camp is not None and camp.slurm else "inventory"


def source_class(kind: str) -> type[TargetSource]:
    where = SOURCES.get(kind)
    if where is None:
        raise JobError(f"unknown target source {kind!r} in the job's state",
                       hint="this job was written by a newer tune-remote; known sources: " + ", ".join(SOURCES))
    module, name = where.split(":")
    return getattr(importlib.import_module(module, __package__), name)


def open_source(env: SourceEnv) -> TargetSource:
    """The saved campaign's source, looked up by its kind."""
    return source_class(source_kind(env.job)).from_job(env)


def begin(kind: str, env: SourceEnv, options: dict) -> list[str] | None:
    if kind not in SOURCES:
        raise UsageError(f"unknown target source {kind!r}", hint="one of: " + ", ".join(SOURCES))
    env.state.source = kind
    return source_class(kind).begin(env, options)
