"""The CLI's root: the click group, the injectable environment, the one error-to-exit-code mapping."""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading

import click
from rich.text import Text
from rich_click import RichGroup

from .. import __version__
from ..context import Settings
from ..errors import ExitCode, TuneRemoteError
from ..inventory import resolve_inventory_path
from ..state import JobState, Status, Workspace, check_job_id, resolve_workspace
from ..ui import Ui

EXIT_CODES_HELP = """Exit codes:
  0   success
  1   the job failed (or was cancelled / lost)
  2   usage or inventory error (nothing ran remotely, or only the look that
      found the input wrong, e.g. a --log path not in the container)
  3   cannot connect or authenticate, or host key refused
  75  connection lost and not re-established; the job goes on on the node,
      `tune-remote resume JOB` continues it
  130 interrupted (Ctrl-C); the job goes on on the node
"""


EXAMPLE_MARK = "# tune-remote EXAMPLE inventory"


class Env:
    """Injectable environment (HTTPie style): tests run the whole CLI in-process."""

    last: "Env | None" = None      # the one this process's command uses (main's error hints read it)

    def __init__(self, inventory: str | None, workspace: str | None, quiet: bool, as_json: bool = False,
                 store: str | None = None):
        Env.last = self
        self.store_url = store     # --store (issue 39, cli/store.py): None = $TUNE_REMOTE_STORE or the default
        self.inventory_path = resolve_inventory_path(inventory)
        self.workspace = Workspace(resolve_workspace(workspace))
        self.quiet = quiet
        self.json = as_json        # --json: one JSON document on stdout, whatever stdout is

    def ui(self) -> Ui:
        return Ui(quiet=self.quiet)

    def wants_json(self) -> bool:
        """JSON on stdout: asked for, or stdout is not a terminal (what scripts parse today)."""
        return getattr(self, "json", False) or not sys.stdout.isatty()


def _global(ctx: click.Context, param: click.Parameter, value) -> None:
    """A global option given after the command's name: it changes the group's Env."""
    if value is None or value is False:
        return
    env = ctx.find_object(Env)
    if param.name == "inventory":
        env.inventory_path = resolve_inventory_path(value)
    elif param.name == "workspace":
        env.workspace = Workspace(resolve_workspace(value))
    elif param.name == "quiet":
        env.quiet = True
    elif param.name == "store":
        env.store_url = value
        if value or os.environ.get("TUNE_REMOTE_STORE"):   # an explicit store: opened now (exit 3 when
            from ..store.live import check                  # unreachable); else SQLAlchemy loads at the
            check(value)                                    # first save of a job that writes the default one
    else:
        env.json = True


INVENTORY_HELP, INVENTORY_DEFAULT = "the inventory file", "$TUNE_REMOTE_INVENTORY, else ./inventory.yaml"
WORKSPACE_HELP, WORKSPACE_DEFAULT = "job directories", "$TUNE_REMOTE_WORKSPACE, else ./tune-workspace"
QUIET_HELP = "print only results and errors"
JSON_HELP = "print one JSON document on stdout (what a pipe gets anyway)"
STORE_HELP = "the team's store: sqlite:///FILE, postgresql://USER@HOST/DB, or none (docs/store.md)"
STORE_DEFAULT = "$TUNE_REMOTE_STORE, else ~/.local/share/tune-remote/store.sqlite"


def _global_options() -> list[click.Option]:
    kw = dict(expose_value=False, callback=_global)
    return [click.Option(["--inventory"], metavar="FILE", help=INVENTORY_HELP, show_default=INVENTORY_DEFAULT, **kw),
            click.Option(["--workspace"], metavar="DIR", help=WORKSPACE_HELP, show_default=WORKSPACE_DEFAULT, **kw),
            click.Option(["-q", "--quiet"], is_flag=True, help=QUIET_HELP, **kw),
            click.Option(["--json"], is_flag=True, help=JSON_HELP, **kw),
            click.Option(["--store"], metavar="URL", help=STORE_HELP, show_default=STORE_DEFAULT, **kw)]


class Group(RichGroup):
    """The group's options are every command's too, so `tune-remote run --inventory X` works (a command's own
    option of the same name, e.g. `status --json`, stays its own)."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        have = {o for p in cmd.params for o in p.opts}
        cmd.params.extend(o for o in _global_options() if not set(o.opts) & have)
        super().add_command(cmd, name)


def _help_config():
    from .helptext import help_config
    return help_config()


ACCEPT_NEW_HOST_KEY = click.option("--accept-new-host-key", is_flag=True,
                                   help="trust a node's unknown host key and add it to known_hosts")


@click.group("tune-remote", cls=Group, epilog=Text(EXIT_CODES_HELP.rstrip()), invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"], "show_default": True,
                               "rich_help_config": _help_config()})
@click.option("--inventory", metavar="FILE", help=INVENTORY_HELP, show_default=INVENTORY_DEFAULT)
@click.option("--workspace", metavar="DIR", help=WORKSPACE_HELP, show_default=WORKSPACE_DEFAULT)
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.option("--store", metavar="URL", help=STORE_HELP, show_default=STORE_DEFAULT)
@click.version_option(__version__, prog_name="tune-remote")
@click.pass_context
def cli(ctx: click.Context, inventory, workspace, quiet, as_json, store):
    """Tune AITER CK GEMM / fused-MoE kernels on remote ROCm nodes, from your laptop.

    JOB: a job id, any unique prefix of one, or `last` (the newest job)."""
    ctx.obj = Env(inventory, workspace, quiet, as_json, store)
    if store or os.environ.get("TUNE_REMOTE_STORE"):     # an explicit store is opened before the command runs
        from ..store.live import check
        check(store)
    if ctx.invoked_subcommand is None:       # `tune-remote` alone: the help, not a usage error
        click.echo(ctx.get_help())
        ctx.exit(0)


JOB_ARG = click.argument("job_id", metavar="JOB")


def resolve_job(env: Env, text: str) -> str:
    """The job id a JOB argument names: the id itself, `last` (the newest job), or a unique prefix of an id.
    An ambiguous prefix: one line naming the candidates, exit 2. Ids stay as they are on disk."""
    from ..errors import UsageError
    ws = env.workspace
    if ws.exists(check_job_id(text)):
        return text
    ids = sorted(d.name for d in ws.root.iterdir() if (d / "state.json").is_file()) if ws.root.is_dir() else []
    if text == "last":
        if not ids:
            raise UsageError(f"no jobs in workspace {ws.root}",
                             hint="start one with `tune-remote run` or `tune-remote demo`")
        return max(ws.jobs(), key=lambda j: (j.created, j.job_id)).job_id
    hits = [i for i in ids if i.startswith(text)]
    if len(hits) > 1:
        raise UsageError(f"job {text!r} is ambiguous: " + ", ".join(hits[:8]) + (" ..." if len(hits) > 8 else ""),
                         hint="give more of the id")
    return hits[0] if hits else text     # none: load() says there is no such job


def run_settings(yes: bool, accept_new: bool) -> Settings:
    return Settings(yes=yes, accept_new_host_key=accept_new, interactive=sys.stdin.isatty() and sys.stderr.isatty())


def carried(env: Env, settings: Settings, carry) -> JobState | None:
    """``carry(console)`` (campaign/runs.py) with this terminal as its console (the plan on stderr, the
    confirmation asked unless --yes); the job's one result line at the end (none after a dry run's plan)."""
    from ..campaign.console import Console, Declined
    ui = env.ui()
    ask = settings.interactive and not settings.yes
    try:
        job = carry(Console(ui=ui, show=lambda text: click.echo(text, err=True), confirm=ui.confirm if ask else None))
    except Declined:
        raise SystemExit(1) from None
    if job is not None:
        finish_job(job, env)
    return job


def finish_job(job: JobState, env: Env) -> None:
    out = {"job_id": job.job_id, "state": job.state, "dir": str(env.workspace.job_dir(job.job_id))}
    if job.error:
        out["error"] = job.error
    click.echo(json.dumps(out) if env.wants_json() else      # the result: printed with -q too
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
        _example_hint(exc)
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


def _example_hint(exc: TuneRemoteError) -> None:
    """A node of the shipped example inventory.yaml cannot be reached: say that it is the example."""
    from ..errors import ConnectError
    if not isinstance(exc, ConnectError) or Env.last is None:
        return
    try:
        with open(Env.last.inventory_path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, ValueError):
        return
    host = exc.message.split("@", 1)[-1].split(":", 1)[0].split()[-1] if "@" in exc.message else None
    if text.startswith(EXAMPLE_MARK) and host and f"host: {host}" in text:
        exc.hint = (f"{Env.last.inventory_path} is the example inventory shipped with tune-remote: its hosts are "
                    "placeholders; put your own nodes in it, or pass --inventory FILE")


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
