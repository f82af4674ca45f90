"""argv -> commands. The only broad except of the code base: every error becomes one line + an ExitCode."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import click

from . import __version__
from .context import Ctx, Settings, Target
from .errors import ExitCode, JobError, TuneRemoteError, UsageError
from .inventory import load_inventory, resolve_inventory_path
from .state import TERMINAL, JobState, Workspace, check_job_id, new_job_id, resolve_workspace
from .ui import Ui
from .variants import VARIANTS, get_variant
from .workflow import LOG_STEP_NAMES, REMOTE_STEPS

EXIT_CODES_HELP = """\b
Exit codes:
  0   success
  1   the job failed (or was cancelled / lost)
  2   usage or inventory error (nothing ran remotely)
  3   cannot connect or authenticate, or host key refused
  75  connection lost and not re-established; the job goes on on the node,
      `tune-remote resume JOB` continues it
  130 interrupted (Ctrl-C); the job goes on on the node
"""


class Env:
    """Injectable environment (HTTPie style): tests run the whole CLI in-process."""

    def __init__(self, inventory: str | None, workspace: str | None, quiet: bool):
        self.inventory_path = resolve_inventory_path(inventory)
        self.workspace = Workspace(resolve_workspace(workspace))
        self.quiet = quiet

    def ui(self) -> Ui:
        return Ui(quiet=self.quiet)


@click.group(epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--inventory", metavar="FILE", help="inventory.yaml (else $TUNE_REMOTE_INVENTORY, else ./inventory.yaml)")
@click.option("--workspace", metavar="DIR", help="job directories (else $TUNE_REMOTE_WORKSPACE, else ./tune-workspace)")
@click.option("-q", "--quiet", is_flag=True, help="print only results and errors")
@click.version_option(__version__, prog_name="tune-remote")
@click.pass_context
def cli(ctx: click.Context, inventory, workspace, quiet):
    """Tune AITER CK GEMM / fused-MoE kernels on remote ROCm nodes, from your laptop."""
    ctx.obj = Env(inventory, workspace, quiet)


def _settings(yes: bool, accept_new: bool) -> Settings:
    return Settings(yes=yes, accept_new_host_key=accept_new, interactive=sys.stdin.isatty() and sys.stderr.isatty())


def _target_for(env: Env, job: JobState, accept_new: bool) -> Target:
    if job.request.get("demo_dir"):
        from .demo import demo_target
        return demo_target(job.request["demo_dir"])
    inv = load_inventory(env.inventory_path)
    node = inv.node(job.node)
    return Target(node, node.container(job.container), accept_new_host_key=accept_new)


def _finish(job: JobState, env: Env) -> None:
    out = {"job_id": job.job_id, "state": job.state, "dir": str(env.workspace.job_dir(job.job_id))}
    if job.error:
        out["error"] = job.error
    if not env.quiet:
        click.echo(json.dumps(out) if not sys.stdout.isatty() else
                   f"job {job.job_id}: {job.state} -> {out['dir']}" + (f" ({job.error})" if job.error else ""))
    if job.state not in ("succeeded", "running"):
        raise SystemExit(ExitCode.JOB_FAILED)


def _validate_local_inputs(variant_name: str, logs, shapes_csv, nk) -> None:
    from .steps.shapes import parse_nk, split_log_sources
    variant = get_variant(variant_name)
    for path in split_log_sources(list(logs))["local"]:
        if not Path(path).is_file():
            raise UsageError(f"log file {path} not found on this machine",
                             hint="local:PATH reads this machine; PATH alone is read inside the container")
    if shapes_csv:
        if not Path(shapes_csv).is_file():
            raise UsageError(f"--shapes-csv {shapes_csv} not found")
        from .parsing.csvtools import read_shapes_csv
        try:
            read_shapes_csv(shapes_csv, variant.name)
        except ValueError as exc:
            raise UsageError(f"--shapes-csv {shapes_csv}: {exc}",
                             hint=f"columns for {variant.name}: {','.join(variant.untuned_columns)}") from None
    parse_nk(list(nk))
    if not (logs or shapes_csv or nk):
        raise UsageError("no shape source given",
                         hint="pass --log PATH (server log), --shapes-csv FILE or --nk N,K")


@cli.command()
@click.option("--node", required=True, help="node name from the inventory")
@click.option("--container", required=True, help="container name on that node (from the inventory)")
@click.option("--variant", required=True, metavar="VARIANT", help="one of: " + ", ".join(VARIANTS))
@click.option("--log", "logs", multiple=True, metavar="PATH",
              help="server log inside the container; node:PATH on the node's host; local:PATH here (repeatable)")
@click.option("--shapes-csv", type=click.Path(dir_okay=False), help="shapes in AITER's untuned CSV format")
@click.option("--nk", multiple=True, metavar="N,K", help="an (N,K) pair to sweep M over (repeatable)")
@click.option("--m-preset", default=None, metavar="PRESET",
              help="M (token) values: pow2 (default for GEMM), cudagraph, logged, or a list like 1,8,64")
@click.option("--gpus", default=None, metavar="LIST", help="GPUs to tune on (default: the free ones)")
@click.option("--batch", type=click.IntRange(1), default=None, help="tuner --batch (default: one shape per GPU)")
@click.option("--timeout", type=click.IntRange(1), default=None, help="tuner --timeout per task, seconds (default 600)")
@click.option("--job-id", default=None, help="choose the job id (default: <time>-<node>-<variant>)")
@click.option("--yes", "-y", is_flag=True, help="never prompt")
@click.option("--detach", is_flag=True, help="return once the remote work is running; `resume` finishes it")
@click.option("--accept-new-host-key", is_flag=True, help="trust an unknown host key and add it to known_hosts")
@click.pass_obj
def run(env: Env, node, container, variant, logs, shapes_csv, nk, m_preset, gpus, batch, timeout, job_id,
        yes, detach, accept_new_host_key):
    """Discover, mine shapes, benchmark, tune (detached on the node), re-benchmark, compare, report, fetch."""
    get_variant(variant)
    inv = load_inventory(env.inventory_path)
    node_spec = inv.node(node)
    ctr = node_spec.container(container)
    _validate_local_inputs(variant, logs, shapes_csv, nk)
    gpu_list = _parse_gpus(gpus)
    job_id = check_job_id(job_id) if job_id else new_job_id(variant, node)
    if env.workspace.exists(job_id):
        raise UsageError(f"job {job_id} already exists in {env.workspace.root}",
                         hint=f"use `tune-remote resume {job_id}` or choose another --job-id")
    request = {"logs": list(logs), "shapes_csv": os.path.abspath(shapes_csv) if shapes_csv else None,
               "nk": list(nk), "m_preset": m_preset, "gpus": gpu_list, "batch": batch, "timeout": timeout,
               "detach": detach}
    job = JobState(job_id=job_id, node=node, container=container, variant=variant, created=time.time(),
                   request=request)
    target = Target(node_spec, ctr, accept_new_host_key=accept_new_host_key)
    _drive(env, job, target, _settings(yes, accept_new_host_key))


def _parse_gpus(gpus: str | None):
    if not gpus:
        return None
    try:
        out = [int(g) for g in gpus.split(",") if g.strip()]
    except ValueError:
        raise UsageError(f"--gpus {gpus!r} is not a list of GPU indices", hint="e.g. --gpus 0,1,2,3") from None
    if not out or any(g < 0 for g in out):
        raise UsageError(f"--gpus {gpus!r} is not a list of GPU indices", hint="e.g. --gpus 0,1,2,3")
    return out


def _drive(env: Env, job: JobState, target: Target, settings: Settings) -> None:
    from .engine import run_job  # the steps import pandas and jinja2: only commands that run a job pay
    ui = env.ui()
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=settings, ui=ui)
    target.connect()  # before the job is saved: a refused connection leaves no half-made job behind
    env.workspace.save(job)
    ui.event(f"job {job.job_id} ({job.variant} on {job.node}/{job.container}); "
             f"state in {env.workspace.job_dir(job.job_id)}")
    try:
        run_job(ctx)
    finally:
        target.close()
    _finish(job, env)


@cli.command()
@click.argument("job_id")
@click.option("--yes", "-y", is_flag=True, help="never prompt")
@click.option("--accept-new-host-key", is_flag=True)
@click.pass_obj
def resume(env: Env, job_id, yes, accept_new_host_key):
    """Re-attach to a job after a disconnect or a killed laptop process and carry it to the end."""
    job = env.workspace.load(check_job_id(job_id))
    if job.state in TERMINAL:
        _finish(job, env)
        return
    job.request["detach"] = False
    _drive(env, job, _target_for(env, job, accept_new_host_key), _settings(yes, accept_new_host_key))


def _status_row(job: JobState) -> dict:
    row = {"job_id": job.job_id, "state": job.state, "step": job.step, "node": job.node,
           "container": job.container, "variant": job.variant,
           "created": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job.created))}
    tail = job.step_state("remote").info.get("tail") or {}
    if tail.get("progress"):
        row["progress"] = tail["progress"]
    if job.error:
        row["error"] = job.error
    return row


@cli.command()
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="print a JSON list of jobs")
@click.pass_obj
def status(env: Env, job_id, as_json):
    """Show jobs (from the workspace; a running job is checked against its node)."""
    jobs = [env.workspace.load(check_job_id(job_id))] if job_id else env.workspace.jobs()
    if job_id and jobs[0].state == "running" and jobs[0].remote.get("run_dir"):
        _refresh(env, jobs[0])
    rows = [_status_row(j) for j in jobs]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no jobs in {env.workspace.root}")
        return
    for r in rows:
        prog = r.get("progress") or {}
        extra = f" {prog.get('done')}/{prog.get('total')} batches" if prog.get("total") else ""
        click.echo(f"{r['job_id']}  {r['state']:<9} {r['step']:<8}{extra}  {r['node']}/{r['container']}  "
                   f"{r['variant']}" + (f"  ({r['error']})" if r.get("error") else ""))


def _refresh(env: Env, job: JobState) -> None:
    """One poll of the node: turns a vanished process into 'lost'. Connection problems leave the cache."""
    from .steps import remote as remote_step
    settings = Settings(reconnect_s=0)
    try:
        target = _target_for(env, job, False)
    except TuneRemoteError:
        return
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=settings, ui=Ui(quiet=True))
    try:
        run = remote_step.poll_once(ctx)
        if run["state"] == "lost":
            job.state = "lost"
            job.error = "the job's process on the node is gone without an exit status"
        elif run["state"] == "cancelled":
            job.state = "cancelled"
        env.workspace.save(job)
    except TuneRemoteError:
        pass
    finally:
        target.close()


@cli.command()
@click.argument("job_id")
@click.option("--step", "step", default="tune", metavar="STEP",
              help="baseline|tune|after (also bench_before|tuning|bench_after) or pipeline")
@click.option("--follow", "-f", is_flag=True, help="keep printing new lines until the job ends")
@click.pass_obj
def logs(env: Env, job_id, step, follow):
    """Print a step's log (the local copy; --follow polls the node)."""
    job = env.workspace.load(check_job_id(job_id))
    names = {v: k for k, v in LOG_STEP_NAMES.items()}
    step = names.get(step, step)
    if step not in (*REMOTE_STEPS, "pipeline"):
        raise UsageError(f"unknown step {step!r}", hint="choose baseline, tune, after or pipeline")
    node_path = job.remote.get("pipeline_log") if step == "pipeline" else (job.remote.get("logs") or {}).get(step)
    if not node_path:
        raise UsageError(f"job {job_id} has no {step} log yet", hint=f"tune-remote status {job_id}")
    local = env.workspace.job_dir(job.job_id) / "logs" / Path(node_path).name
    if step == "pipeline":
        local = env.workspace.job_dir(job.job_id) / "pipeline.log"
    if job.state not in TERMINAL and job.remote.get("run_dir"):
        _refresh_log(env, job, step, node_path, local)
    printed = 0
    if local.is_file():
        data = local.read_bytes()
        sys.stdout.buffer.write(data)
        printed = len(data)
    if not follow or job.state in TERMINAL:
        sys.stdout.flush()
        return
    target = _target_for(env, job, False)
    settings = Settings()
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=settings, ui=Ui(quiet=True))
    from .steps import remote as remote_step
    try:
        while True:
            run = remote_step.poll_once(ctx)
            env.workspace.save(job)
            if local.is_file() and local.stat().st_size > printed:
                with open(local, "rb") as fh:
                    fh.seek(printed)
                    data = fh.read()
                sys.stdout.buffer.write(data)
                sys.stdout.flush()
                printed += len(data)
            if run["state"] not in ("running", "starting") and not run["more"]:
                break
            if not run["more"]:
                time.sleep(settings.poll_s)
    finally:
        target.close()


def _refresh_log(env: Env, job: JobState, step: str, node_path: str, local: Path) -> None:
    """Bring the local copy of a running (or detached) job's log up to date from the node; on a
    connection problem say so and show the local copy. state.json is not saved here (a `run` or
    `resume` may own the job right now); the polls' write-at-offset keeps the copies consistent."""
    from .steps import fetch as fetch_step
    from .steps import remote as remote_step
    try:
        target = _target_for(env, job, False)
    except TuneRemoteError:
        return
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=Settings(reconnect_s=0),
              ui=Ui(quiet=True))
    try:
        if step == "pipeline":   # through the poll, which also records the sub-step markers
            while remote_step.poll_once(ctx)["more"]:
                pass
        else:
            fetch_step.pull(ctx, {node_path: local}, record=False)
    except TuneRemoteError as exc:
        click.echo(f"tune-remote: warning: showing the local copy, the node did not answer: {exc.one_line()}",
                   err=True)
    finally:
        target.close()


@cli.command()
@click.argument("job_id")
@click.option("--grace", type=click.FloatRange(0), default=10.0, show_default=True,
              help="seconds between SIGTERM and SIGKILL")
@click.pass_obj
def cancel(env: Env, job_id, grace):
    """Stop a job's whole process tree in the container (TERM, grace, KILL)."""
    job = env.workspace.load(check_job_id(job_id))
    if job.state in TERMINAL:
        click.echo(f"job {job_id} is already {job.state}")
        return
    if not job.remote.get("run_dir"):
        job.state, job.error = "cancelled", "cancelled before anything ran on the node"
        env.workspace.save(job)
        click.echo(f"job {job_id} cancelled")
        return
    target = _target_for(env, job, False)
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=Settings(), ui=env.ui())
    try:
        res = ctx.call("cancel", {"run_dir": job.remote["run_dir"], "grace_s": grace})
    finally:
        target.close()
    job.state, job.error = "cancelled", "cancelled by the user"
    env.workspace.save(job)
    click.echo(f"job {job_id} cancelled ({len(res.get('signalled') or [])} process(es) signalled, "
               f"{len(res.get('killed') or [])} killed)")


@cli.command()
@click.argument("job_id")
@click.option("--dest", type=click.Path(file_okay=False), default=None, help="default: the job's directory")
@click.option("--accept-new-host-key", is_flag=True)
@click.pass_obj
def fetch(env: Env, job_id, dest, accept_new_host_key):
    """Bring logs, CSVs and reports home (sha256-verified; unchanged files are skipped)."""
    from .steps import fetch as fetch_step
    job = env.workspace.load(check_job_id(job_id))
    if not job.remote.get("job_dir"):
        raise JobError(f"job {job_id} produced nothing on the node yet", hint=f"tune-remote status {job_id}")
    target = _target_for(env, job, accept_new_host_key)
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=Settings(), ui=env.ui())
    try:
        outcome = fetch_step.run(ctx, Path(dest) if dest else None)
    finally:
        target.close()
    env.workspace.save(job)
    click.echo(json.dumps({"job_id": job_id, "files": outcome}, indent=2))


@cli.command()
@click.option("--variant", default="a8w8_blockscale", show_default=True, help="variant to demo")
@click.option("--profile", type=click.Choice(["current", "legacy"]), default="current", show_default=True)
@click.pass_obj
def demo(env: Env, variant, profile):
    """The whole pipeline against a local simulated node: no GPU, no SSH, no docker."""
    from .demo import demo_target, prepare_demo
    get_variant(variant)
    job_id = new_job_id(variant, "demo")
    demo_dir, log_path = prepare_demo(env.workspace.root / ".demo-nodes" / job_id, profile=profile, variant=variant)
    job = JobState(job_id=job_id, node="demo", container="simulated", variant=variant, created=time.time(),
                   request={"logs": [log_path], "demo_dir": str(demo_dir), "detach": False,
                            "m_preset": None, "nk": [], "shapes_csv": None, "gpus": None,
                            "batch": None, "timeout": None})
    _drive(env, job, demo_target(str(demo_dir)), Settings(yes=True, poll_s=0.2))
    jd = env.workspace.job_dir(job_id)
    if not env.quiet:
        click.echo(f"report: {jd / 'report.md'}\n        {jd / 'report.html'}\ncomparison: {jd / 'comparison.csv'}")


@cli.command()
@click.argument("logs", nargs=-1)
@click.option("--variant", default=None, help="only this variant")
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False), help="write one variant's untuned CSV")
@click.option("--json", "as_json", is_flag=True, help="print {variant: [shape, ...]}")
@click.option("--model", type=click.Path(dir_okay=False, exists=True), help="a model's config.json")
@click.option("--tp", type=click.IntRange(1), default=1, show_default=True, help="tensor-parallel size")
@click.option("--m-preset", default=None, help="with --csv: sweep M (pow2, cudagraph, logged, list)")
def shapes(logs, variant, csv_out, as_json, model, tp, m_preset):
    """Offline: untuned shapes from server logs (or from a model config), as JSON or AITER CSV."""
    from .parsing.csvtools import write_untuned_csv
    from .remote.helpers import shapelog
    if variant and variant != "bf16":  # bf16 (a16w16) shapes are mined, not tuned, by tune-remote
        get_variant(variant)
    if not logs and not model:
        raise UsageError("give log files or --model config.json", hint="tune-remote shapes server.log --json")
    found: dict[str, list[dict]] = {}
    warnings: list[str] = []
    if logs:
        for path in logs:
            if not Path(path).is_file():
                raise UsageError(f"log file {path} not found")
        res = shapelog.parse_files(list(logs), variant)
        found = {k: v for k, v in res.shapes.items()}
        warnings = list(res.warnings)
    if model:
        from .parsing.modelshapes import shapes_from_model
        try:
            cfg = json.loads(Path(model).read_text())
        except ValueError as exc:
            raise UsageError(f"{model} is not valid JSON: {exc}") from None
        for v, rows in shapes_from_model(cfg, tp).items():
            if variant is None or v == variant:
                found.setdefault(v, []).extend(rows)
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if csv_out:
        chosen = variant or (next(iter(found)) if len(found) == 1 else None)
        if chosen is None:
            raise UsageError("--csv writes one variant's CSV", hint="add --variant V")
        rows = found.get(chosen, [])
        if m_preset:
            from .steps.shapes import expand
            rows = expand(rows, get_variant(chosen).family, m_preset)
        Path(csv_out).write_text(write_untuned_csv(rows, chosen))
    if as_json or not csv_out:
        click.echo(json.dumps(found, indent=None if as_json else 2))


@cli.group()
def csv():
    """Tuned-CSV tools: diff and merge (best valid row per key)."""


@csv.command("diff")
@click.argument("a", type=click.Path(dir_okay=False, exists=True))
@click.argument("b", type=click.Path(dir_okay=False, exists=True))
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False), help="write the diff as CSV")
def csv_diff(a, b, csv_out):
    """Per key: kernel, us and speedup of B against A (positive = B faster)."""
    from .parsing.csvtools import diff_tuned, read_tuned_csv
    df = diff_tuned(read_tuned_csv(a), read_tuned_csv(b))
    if csv_out:
        df.to_csv(csv_out, index=False)
    click.echo(df.to_string(index=False))


@csv.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="merged CSV to write")
def csv_merge(inputs, output):
    """Merge tuned CSVs keeping the best valid row per key (never us=-1; never duplicate keys)."""
    from .parsing.csvtools import merge_tuned_report, read_tuned_csv
    from .state import atomic_write
    df, report = merge_tuned_report([read_tuned_csv(p) for p in inputs])
    atomic_write(Path(output), df.to_csv(index=False).encode())
    click.echo(f"wrote {len(df)} rows to {output} (from {report['input_rows']}: {report['duplicates']} "
               f"duplicate(s) resolved, {report['invalid_us']} with invalid us and {report['err_too_high']} "
               "with errRatio over the bound dropped)")


def main(argv: list[str] | None = None) -> int:
    """Console entry point: maps every error to one line and an exit code."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL) if hasattr(signal, "SIGPIPE") else None
    try:
        cli.main(args=argv, prog_name="tune-remote", standalone_mode=False)
        return ExitCode.OK
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"tune-remote: error: {exc.format_message()}", err=True)
        return ExitCode.USAGE
    except click.exceptions.Abort:
        click.echo("tune-remote: aborted", err=True)
        return ExitCode.INTERRUPTED
    except TuneRemoteError as exc:
        click.echo(f"tune-remote: error: {exc.one_line()}", err=True)
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    except KeyboardInterrupt:
        click.echo("tune-remote: interrupted; a job already launched goes on on the node "
                   "(tune-remote resume JOB continues it)", err=True)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # the one broad except: a bug must still end in one line and a code
        if os.environ.get("TUNE_REMOTE_DEBUG"):
            raise
        click.echo(f"tune-remote: internal error: {type(exc).__name__}: {exc} "
                   "(hint: rerun with TUNE_REMOTE_DEBUG=1 for the traceback, and report it)", err=True)
        return ExitCode.JOB_FAILED


if __name__ == "__main__":
    sys.exit(main())
