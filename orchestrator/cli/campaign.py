"""CLI glue for campaigns (several targets and/or variants in one job, or targets from a scheduler): cancel and
status of a saved one through ``campaign/lifecycle.py``, whatever its targets' source (run and resume:
``campaign/runs.py``)."""
from __future__ import annotations

import click

from ..errors import JobError
from ..state import JobState
from .base import Env


def _inventory(env: Env):
    """The inventory, read when a source asks for it (the demo's never does)."""
    from ..inventory import load_inventory
    return lambda: load_inventory(env.inventory_path)


def cancel_campaign(env: Env, job: JobState, grace: float, nodes=()) -> None:
    """Cancel every target, or only those on `nodes` (the others go on; the job ends when they do)."""
    from ..campaign import lifecycle
    res = lifecycle.cancel(env.workspace, job, _inventory(env), env.ui(), grace, tuple(nodes))
    sig, killed = res["signalled"], res["killed"]
    for line in res["tables"]:
        click.echo("tune-remote: the tuned table of " + line.replace("[tune-remote] table: ", ""), err=True)
    what = f"job {job.job_id}" + (f" on {', '.join(nodes)}" if nodes else "")
    if res["finished"]:
        click.echo(f"{len(res['finished'])} target(s) had already ended on their own: "
                   f"{'; '.join(res['finished'])}; `tune-remote resume {job.job_id}` collects their results")
    if res["remaining"]:
        raise JobError(f"{what}: {len(res['remaining'])} process(es) survived SIGKILL (node:pid "
                       f"{', '.join(res['remaining'])}; stuck in the kernel, e.g. a hung GPU)",
                       hint="check them with `ps -o pid,stat,wchan -p PID` in the container; they end with the "
                            "GPU reset or a container restart")
    if res["finished"]:       # the job goes on until a resume collects them: say what was cancelled
        click.echo(f"{what}: {res['cancelled']} target(s) cancelled ({sig} process(es) signalled, {killed} killed)")
    else:
        click.echo(f"{what} cancelled ({sig} process(es) signalled, {killed} killed)")


def status_campaign(env: Env, job: JobState) -> dict:
    """A campaign's ``targets`` rows for ``status``, and what its source adds (a scheduler's own view)."""
    from ..campaign import lifecycle
    return lifecycle.status(env.workspace, job, _inventory(env), env.ui())
