"""Commands on a started job: status, logs, cancel, fetch. The work is ``campaign/jobops.py`` (one target or a
campaign's many); here: the options, one call, what is printed."""
from __future__ import annotations

import json
import sys

import click

from ..errors import UsageError
from .base import ACCEPT_NEW_HOST_KEY, JOB_ARG, Env, cli, resolve_job
from .pick import reach

NODE_OPTION = click.option("--node", "nodes", multiple=True, metavar="NODE",
                           help="only the targets on this node (repeatable; a campaign's targets)")


@cli.command()
@click.argument("job_id", metavar="[JOB]", required=False)
@click.option("--json", "as_json", is_flag=True, help="print a JSON list of jobs")
@NODE_OPTION
@click.pass_obj
def status(env: Env, job_id, as_json, nodes):
    """Show jobs (from the workspace; a running job is checked against its node)."""
    from ..campaign import jobops
    from .views import console, status_lines, status_words
    jobs, rows = jobops.status(reach(env), resolve_job(env, job_id) if job_id else None, nodes)
    if as_json or env.json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo(f"no jobs in {env.workspace.root}")
    elif sys.stdout.isatty():          # a table; piped: the lines scripts read today
        status_words(env, jobs, rows)(console())
    else:
        status_lines(rows)


@cli.command()
@JOB_ARG
@click.option("--step", "step", default="tune", metavar="STEP",
              help="baseline|tune|after (also bench_before|tuning|bench_after) or pipeline")
@click.option("--follow", "-f", is_flag=True, help="keep printing new lines until the job ends")
@NODE_OPTION
@click.option("--variant", default=None, help="a campaign: only the target jobs of this variant")
@click.pass_obj
def logs(env: Env, job_id, step, follow, nodes, variant):
    """Print a step's log (the local copy; --follow polls the node). A campaign: every target job's log,
    each under a '==> node/container variant: step <==' line; --node/--variant choose which."""
    from .views import as_document
    job_id = resolve_job(env, job_id)
    if follow and getattr(env, "json", False):
        raise UsageError("--follow prints lines as they come, not one JSON document", hint="leave out --json")
    from ..campaign import jobops
    with as_document(env, lambda text: {"job_id": job_id, "step": step, "log": text}):
        jobops.logs(reach(env), job_id, step, follow, nodes, variant, click.echo)


@cli.command()
@JOB_ARG
@click.option("--grace", type=click.FloatRange(0), default=10.0, show_default=True,
              help="seconds between SIGTERM and SIGKILL")
@NODE_OPTION
@click.pass_obj
def cancel(env: Env, job_id, grace, nodes):
    """Stop a job's whole process tree in the container (TERM, grace, KILL). A campaign: every target, or
    only those on --node (the others go on)."""
    from .views import as_document
    job_id = resolve_job(env, job_id)
    from ..campaign import jobops
    with as_document(env, lambda text: {"job_id": job_id, "state": env.workspace.load(job_id).state,
                                        "said": text.strip()}):
        jobops.cancel(reach(env), job_id, grace, nodes, click.echo)


@cli.command()
@JOB_ARG
@click.option("--dest", type=click.Path(file_okay=False), default=None, show_default="the job's directory", help="where the files go")
@ACCEPT_NEW_HOST_KEY
@NODE_OPTION
@click.pass_obj
def fetch(env: Env, job_id, dest, accept_new_host_key, nodes):
    """Bring logs, CSVs and reports home (sha256-verified; unchanged files are skipped). A campaign: every
    target job (or those on --node) into its own directory under <job>/targets/ (or DEST/<target job>)."""
    from .views import emit, fetch_words
    job_id = resolve_job(env, job_id)
    from ..campaign import jobops
    doc = jobops.fetch(reach(env), job_id, dest, nodes, accept_new_host_key)
    emit(env, doc, fetch_words(job_id, doc.get("targets") or [doc], "targets" in doc))
