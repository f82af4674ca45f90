"""What a command prints: one JSON document where stdout is not a terminal or with --json (what scripts parse),
words and tables on a terminal (issue 27); and `tune-remote report JOB [--open]`."""
from __future__ import annotations

import io
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import click

from ..state import JobState
from .base import JOB_ARG, Env, cli, resolve_job


def console():
    from rich.console import Console
    return Console(file=sys.stdout, highlight=False)


def emit(env: Env, data, words: Callable) -> None:
    """``data`` as JSON (a pipe, or --json), else ``words(console)``."""
    if env.wants_json():
        click.echo(json.dumps(data, indent=2))
    else:
        words(console())


@contextmanager
def as_document(env: Env, doc: Callable[[str], dict]):
    """--json for a command that prints lines: what it would print is collected and becomes one JSON document
    (``doc(text)``) on stdout once it succeeded."""
    if not getattr(env, "json", False):
        yield
        return
    buf = io.BytesIO()
    wrapper = io.TextIOWrapper(buf, encoding="utf-8", write_through=True)
    old, sys.stdout = sys.stdout, wrapper
    try:
        yield
    finally:
        sys.stdout = old
        wrapper.flush()
        wrapper.detach()          # buf stays open when the wrapper goes
    click.echo(json.dumps(doc(buf.getvalue().decode("utf-8", "replace")), indent=2))


def table(*columns: str, title: str | None = None, no_wrap: tuple = ()):
    from rich.table import Table
    t = Table(title=title, title_justify="left", header_style="bold", box=None, padding=(0, 1), pad_edge=False)
    for c in columns:
        t.add_column(c, no_wrap=c in no_wrap, overflow="fold" if c not in no_wrap else "ellipsis")
    return t


def short(path) -> str:
    """A path as the user would type it: relative to here when it is below here."""
    if not path:
        return "-"
    p = os.path.abspath(str(path))
    rel = os.path.relpath(p)
    return rel if not rel.startswith("..") else p


def result_words(job: JobState) -> str:
    """A job's outcome in a few words: its verdicts and what was promoted."""
    sm = job.step_state("compare").info.get("summary") or {}
    if not sm:
        return "-"
    promoted = len((job.remote.get("promotion") or {}).get("promoted") or [])
    return (f"{sm.get('improved', 0)} faster, {sm.get('regressed', 0)} slower /{sm.get('shapes', 0)}"
            + (f", {promoted} promoted" if promoted else ""))


def report_path(env: Env, job: JobState, ext: str = "md") -> Path | None:
    p = env.workspace.job_dir(job.job_id) / f"report.{ext}"
    return p if p.is_file() else None


# -- promote / rollback / export / fetch on a terminal ----------------------------------------------------
def promote_words(job_id: str, s: dict) -> Callable:
    def words(c) -> None:
        if s.get("already") or not s.get("promoted_now"):
            c.print(f"job {job_id}: nothing new to promote; {s.get('promoted', 0)} row(s) already in {s.get('live')}")
        else:
            c.print(f"job {job_id}: promoted {s['promoted_now']} row(s) into {s.get('live')} "
                    f"({s.get('promoted', 0)} in all, {s.get('promotions', 0)} promotion(s))")
        if s.get("engaged"):
            c.print(f"  engaged at runtime: {s['engaged']} shape(s)")
        if s.get("skipped_duplicates"):
            c.print(f"  skipped {len(s['skipped_duplicates'])} duplicate row(s)")
        if s.get("backup"):
            c.print(f"  backup: {s['backup']}")
        if s.get("promotions"):
            c.print(f"  undo: tune-remote rollback {job_id}  (restores {s.get('rollback_restores')})")
    return words


def rollback_words(job_id: str, s: dict) -> Callable:
    def words(c) -> None:
        if s.get("already"):
            c.print(f"job {job_id}: already rolled back; {s.get('live')} is as it was")
            return
        c.print(f"job {job_id}: rolled back {s.get('live')}: {s.get('restored')}")
        if s.get("restored_from"):
            c.print(f"  restored from: {s['restored_from']}")
        if s.get("modules"):
            c.print(f"  JIT modules: {s['modules']}")
    return words


def targets_words(job_id: str, what: str, rows: list[dict]) -> Callable:
    """A campaign's promote / rollback: one row per target."""
    def words(c) -> None:
        t = table("target", "variant", "outcome", title=f"job {job_id}: {what}")
        for r in rows:
            if r.get("error"):
                out = f"[red]error[/]: {r['error']}"
            elif r.get("skipped"):
                out = f"skipped ({r['skipped']})"
            elif what == "promote":
                out = (f"{r.get('promoted_now', 0)} row(s) promoted now, {r.get('promoted', 0)} in all"
                       + (f"; {len(r['spread'])} spread line(s)" if r.get("spread") else ""))
            else:
                out = "already as it was" if r.get("already") else "rolled back " + ", then ".join(r.get("undone") or [])
            t.add_row(f"{r['node']}/{r['container']}", r["variant"], out)
        c.print(t)
    return words


def export_words(job_id: str, res: dict, campaign: bool) -> Callable:
    def words(c) -> None:
        for variant, r in (res.items() if campaign else [(None, res)]):
            dropped = {k: v for k, v in (r.get("dropped") or {}).items() if v}
            c.print(f"job {job_id}: exported {r.get('rows', 0)} proven row(s)" + (f" of {variant}" if variant else "")
                    + (" (left out: " + ", ".join(f"{v} {k}" for k, v in dropped.items()) + ")" if dropped else ""))
            c.print(f"  CSV for aiter/configs/model_configs/: {short(r.get('csv'))}")
            c.print(f"  summary for the pull request:       {short(r.get('summary'))}")
            guards = dict(r.get("guards") or {})        # upstream's level-0 guards, run on the node
            on = guards.pop("on", None)                 # a campaign's: the target they ran on
            for test, g in guards.items():
                c.print(f"  level-0 guard {test}: {g if test == 'error' else g.get('status')}"
                        + (f" (on {on})" if on else ""))
    return words


def fetch_words(job_id: str, rows: list[dict], campaign: bool) -> Callable:
    def words(c) -> None:
        for r in rows:
            files = r.get("files") or {}
            states = [str(v) for v in files.values()]
            counts = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states)) or "no files"
            where = f"{r['node']}/{r['container']} {r['variant']}: " if campaign else ""
            dest = {os.path.dirname(str(p)) for p in files}
            c.print(f"job {job_id}: {where}{counts}" + (f" ({r['note']})" if r.get("note") else "")
                    + (f" into {short(os.path.commonpath(list(dest)))}" if dest else ""))
    return words


# -- status ----------------------------------------------------------------------------------------------
def status_lines(rows: list[dict]) -> None:
    """Piped: one line per job (and one per campaign target, one of its Slurm jobs): what scripts read today."""
    for r in rows:
        prog = r.get("progress") or {}
        extra = f" {prog.get('done')}/{prog.get('total')} batches" if prog.get("total") else ""
        node = (f"  (node: {r['node_state']}; `tune-remote resume {r['job_id']}` collects it)"
                if r.get("node_state") else "")
        click.echo(f"{r['job_id']}  {r['state']:<9} {r['step']:<8}{extra}  {r['node']}/{r['container']}  "
                   f"{r['variant']}" + (f"  ({r['error']})" if r.get("error") else "") + node)
        for t in r.get("targets") or []:       # a campaign's targets (only those on --node NODE when given)
            waiting = " (node: waiting)" if t.get("node_state") == "waiting" else ""   # a chained variant
            click.echo(f"    {t['node']}/{t['container']}  {t['variant']}  {t['state']}{waiting}  {t.get('step') or ''}")
        if r.get("slurm"):
            click.echo("    slurm: " + ", ".join(f"{s['job']} {str(s['state']).lower()}" + (
                f" ({s['reason']})" if s.get("reason") else "") + (f" on {s['node']}" if s.get("node") else "")
                for s in r["slurm"]))


# on a terminal: a table
def status_words(env: Env, jobs: list[JobState], rows: list[dict]) -> Callable:
    def words(c) -> None:
        wide = c.width >= 120        # narrower: the id names the node and the variant already
        cols = ("job", "state", "where", "variant", "result", "report") if wide else ("job", "state", "result", "report")
        t = table(*cols, no_wrap=("job", "report"))
        for job, r in zip(jobs, rows):
            prog = r.get("progress") or {}
            state = r["state"] + (f" (node: {r['node_state']})" if r.get("node_state") else "")
            if r["state"] not in ("succeeded", "cancelled"):     # where it is (or stopped)
                state += f": {r['step']}" + (f" {prog.get('done')}/{prog.get('total')}" if prog.get("total") else "")
            result = f"[red]{r['error']}[/]" if r.get("error") else result_words(job)
            where = [f"{r['node']}/{r['container']}", r["variant"]] if wide else []
            t.add_row(r["job_id"], state, *where, result, "report.md" if report_path(env, job) else "-")
            subs = _sub_jobs(env, job) if r.get("targets") else {}
            for tg in r.get("targets") or []:
                sub = subs.get((tg["node"], tg["container"], tg["variant"]))
                where = [f"{tg['node']}/{tg['container']}", tg["variant"]] if wide else []
                tstate = str(tg.get("state") or "") + (" (node: waiting)" if tg.get("node_state") == "waiting" else "")
                if tstate not in ("succeeded", "cancelled") and tg.get("step"):
                    tstate += f": {tg['step']}"
                t.add_row(f"  └ {tg['node']}/{tg['container']} {tg['variant']}" if not wide else f"  └ {tg['node']}",
                          tstate, *where, result_words(sub) if sub else "-", "")
        c.print(t)
        if len(jobs) == 1 and report_path(env, jobs[0]):
            c.print(f"report: {short(report_path(env, jobs[0]))}")
        elif any(report_path(env, j) for j in jobs):
            c.print(f"reports: {short(env.workspace.root)}/<job>/report.md (`tune-remote report JOB` names one, "
                    "--open shows it)")
        if any(r.get("node_state") for r in rows):
            c.print("a job whose node state differs: `tune-remote resume JOB` collects it")
    return words


def _sub_jobs(env: Env, job: JobState) -> dict:
    from ..campaign import driver
    return {(s.node, s.container, s.variant): s for s in driver.sub_jobs(job, env.workspace)}


# -- report ----------------------------------------------------------------------------------------------
@cli.command()
@JOB_ARG
@click.option("--open", "open_html", is_flag=True, help="open report.html in the browser")
@click.pass_obj
def report(env: Env, job_id, open_html):
    """Where a job's report is, and its result in one line (--open: show report.html)."""
    job_id = resolve_job(env, job_id)
    job = env.workspace.load(job_id)
    md, html = report_path(env, job), report_path(env, job, "html")
    if md is None:
        from ..errors import UsageError
        raise UsageError(f"job {job_id} has no report yet ({job.state}, step {job.step})",
                         hint=f"tune-remote status {job_id}" + ("" if job.state == "running" else
                                                                 f"; tune-remote fetch {job_id}"))
    headline = next((line.split("**Result:**", 1)[1].strip() for line in md.read_text().splitlines()
                     if line.startswith("**Result:**")), result_words(job))
    export = sorted((env.workspace.job_dir(job_id) / "export").glob("*.md"))
    data = {"job_id": job_id, "state": job.state, "result": headline, "report_md": str(md),
            "report_html": str(html) if html else None, "export_summary": str(export[0]) if export else None}
    if open_html and html:
        click.launch(str(html))

    def words(c) -> None:
        c.print(f"job {job_id}: {job.state}")
        c.print(f"  result: {headline}")
        c.print(f"  report: {short(md)}" + (f"\n          {short(html)}" if html else ""))
        if export:
            c.print(f"  export summary (for the PR): {short(export[0])}")
        elif job.state == "succeeded":
            c.print(f"  for the PR: tune-remote export {job_id} --model-config NAME")
    emit(env, data, words)
