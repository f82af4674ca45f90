"""The CLI's root: the click group, the injectable environment, the one error-to-exit-code mapping."""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading

import click

from .. import __version__
from ..context import Settings, Target
from ..errors import ExitCode, TuneRemoteError
from ..inventory import load_inventory, resolve_inventory_path
from ..state import JobState, Status, Workspace, resolve_workspace
from ..ui import Ui

EXIT_CODES_HELP = """\b
Exit codes:
  0   success
  1   the job failed (or was cancelled / lost)
  2   usage or inventory error (nothing ran remotely, or only the look that
      found the input wrong, e.g. a --log path not in the container)
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
    if job.request.demo_dir:
        from ..demo import demo_target
        return demo_target(job.request.demo_dir)
    inv = load_inventory(env.inventory_path)
    node = inv.node(job.node)
    return Target(node, node.container(job.container), accept_new_host_key=accept_new)


def _finish(job: JobState, env: Env) -> None:
    out = {"job_id": job.job_id, "state": job.state, "dir": str(env.workspace.job_dir(job.job_id))}
    if job.error:
        out["error"] = job.error
    click.echo(json.dumps(out) if not sys.stdout.isatty() else      # the result: printed with -q too
               f"job {job.job_id}: {job.state} -> {out['dir']}" + (f" ({job.error})" if job.error else ""))
    if job.state not in (Status.SUCCEEDED, Status.RUNNING):
        raise SystemExit(ExitCode.JOB_FAILED)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: maps every error to one line and an exit code."""
    # SIGPIPE stays ignored (Python's default): a write to an ssh client that went away or to a reset socket
    # is an error its transport handles, never the silent end of this process (it was SIG_DFL: a job's
    # driver died when the user's OpenSSH master ended mid-write); stdout closed by `| head`: click's main
    # catches that EPIPE and exits 1 quietly
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


def console_main() -> None:
    """The ``tune-remote`` executable (and ``python -m orchestrator``): ``main()``, then leave without the
    interpreter's teardown. Freeing the modules a job loads (pandas, numpy, jinja2, paramiko) takes ~0.3 s
    on a 2-core machine after the work is done (issue 9). The exit handlers still run (logging, paramiko's
    transport threads, weakref finalizers) and both streams are flushed; a non-daemon thread still at work
    gets the normal exit, which waits for it. In-process callers (tests) use ``main()``."""
    rc = main()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(rc)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe or stream: what the normal exit would drop as well
            pass
    os._exit(rc)
