"""Commands on a finished job's outcome: promote (its rows into the live table later), rollback, export; what
each does, for one target or a campaign's, is campaign/later.py's."""
from __future__ import annotations

import sys

import click

from ..errors import ExitCode, UsageError
from .base import ACCEPT_NEW_HOST_KEY, JOB_ARG, Env, cli, resolve_job
from .views import emit, export_words, promote_words, rollback_words, targets_words
from .control import NODE_OPTION


def _reach(env: Env, accept_new_host_key: bool = False):
    from .pick import reach
    return reach(env, accept_new_host_key)


def _said(env: Env, what: str, payload: dict, several: bool, words) -> None:
    """The command's document; a campaign's: one row per target, and a target that failed is exit 1."""
    if several:
        from ..campaign.later import check_targets
        emit(env, payload, targets_words(payload["job_id"], what, payload["targets"]))
        check_targets(what, payload)
    else:
        emit(env, payload, words(payload["job_id"], {k: v for k, v in payload.items() if k != "job_id"}))


@cli.command()
@JOB_ARG
@click.option("--rows", type=click.Choice(["proven", "all"]), default="proven", show_default=True,
              help="proven: rows whose verdict is improved; all: every tuned row (asks first when some are "
                   "proven slower)")
@click.option("--yes", "-y", is_flag=True, help="never prompt (--rows all promotes rows proven slower too)")
@ACCEPT_NEW_HOST_KEY
@NODE_OPTION
@click.pass_obj
def promote(env: Env, job_id, rows, yes, accept_new_host_key, nodes):
    """Merge a finished job's rows into the live table (after a backup); the rows of --rows not promoted yet
    (e.g. --rows all after the proven rows); repeating it changes nothing. A campaign: every succeeded target
    (or those on --node), then each target's rows onto the other targets of its GPU kind."""
    from ..campaign import later
    job = later.finished(env.workspace, resolve_job(env, job_id), "promotion", nodes)
    reach = _reach(env, accept_new_host_key)
    if rows == "all" and not yes:
        _ask_for_slower(job.job_id, later.slower_not_promoted(reach, job, nodes))
    _said(env, "promote", *later.promote(reach, job, rows, nodes), promote_words)


def _ask_for_slower(job_id: str, slower: int) -> None:
    """`promote --rows all` with rows proven slower (not promoted yet): a question on a terminal; elsewhere
    one line, exit 2, unless --yes."""
    if not slower:
        return
    what = f"{slower} row(s) of job {job_id} are proven slower than what they replace"
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(f"{what}; --rows all would promote them",
                         hint="add --yes to promote them anyway, or promote only the proven rows (--rows proven)")
    if not click.confirm(f"{what}. Promote them too?", default=False, err=True):
        click.echo("nothing promoted", err=True)
        raise SystemExit(ExitCode.JOB_FAILED)


@cli.command()
@JOB_ARG
@ACCEPT_NEW_HOST_KEY
@NODE_OPTION
@click.pass_obj
def rollback(env: Env, job_id, accept_new_host_key, nodes):
    """Restore the live table the job changed (byte for byte, as before its first promotion) and the live JIT
    module. A campaign: on every target (or those on --node), its own rows and those spread onto it."""
    from ..campaign import later
    job = later.finished(env.workspace, resolve_job(env, job_id), "rollback", nodes)
    _said(env, "rollback", *later.rollback(_reach(env, accept_new_host_key), job, nodes), rollback_words)


@cli.command("export")
@JOB_ARG
@click.option("--model-config", "model_config", required=True, metavar="NAME",
              help="model name: writes <NAME>_<tuned base name>.csv, a file for aiter/configs/model_configs/")
@click.option("--dest", type=click.Path(file_okay=False), default=None,
              show_default="<job dir>/export", help="the directory it is written to")
@NODE_OPTION
@click.pass_obj
def export_cmd(env: Env, job_id, model_config, dest, nodes):
    """Write the job's proven rows as an AITER model_configs CSV + a Markdown summary (offline). A campaign:
    one file per variant with the proven rows of every target (or those on --node)."""
    from ..campaign import later
    job_id = resolve_job(env, job_id)
    payload, several = later.export(_reach(env), job_id, model_config, dest, nodes)
    emit(env, payload, export_words(job_id, payload["variants"] if several else
                                    {k: v for k, v in payload.items() if k != "job_id"}, several))
