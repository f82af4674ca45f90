"""``tune-remote watch``: a long-lived loop (or one cycle, ``--once``) that tunes new misses as they appear in
the servers' logs and rechecks a target after an upgrade. The work and the loop are ``orchestrator/watch/``;
here: the options, the targets, what each cycle says, the exit code."""
from __future__ import annotations

import json

import click

from ..errors import ExitCode, UsageError
from ..variants import VARIANTS, get_variant
from .base import ACCEPT_NEW_HOST_KEY, Env, cli


@cli.command("watch")
@click.option("--node", "nodes", multiple=True, metavar="NODE",
              help="(required) node name, a group of the inventory, or all (repeatable)")
@click.option("--container", default=None, show_default="the node's one container", help="container on the node(s)")
@click.option("--log", "logs", multiple=True, metavar="PATH",
              help="(required) server log inside the container (repeatable); read from where the last cycle stopped")
@click.option("--variant", default="auto", show_default=True, metavar="V|LIST|auto",
              help="the variant(s) to tune: one of " + ", ".join(VARIANTS) + "; a comma-separated list; or auto "
                   "(every variant the logs miss)")
@click.option("--min-misses", type=click.IntRange(1), default=1, show_default=True, metavar="K",
              help="tune a shape once the logs missed it K times in all")
@click.option("--interval", type=click.FloatRange(1), default=600, show_default=True, metavar="S",
              help="seconds between cycles (until SIGINT/SIGTERM)")
@click.option("--once", is_flag=True, help="one cycle, then exit: 0 when every job it started succeeded or none "
                                           "was needed, 1 when a job failed")
@click.option("--promote", "promote_mode", type=click.Choice(["proven", "none"]), default="proven",
              show_default=True, help="rows merged into the live table after each job")
@click.option("--name", default=None, show_default="from the nodes and containers",
              help="the watch's name: its state is <workspace>/watch/NAME/")
@click.option("--budget", default=None, metavar="DURATION",
              help="per cycle: tune only the most-missed shapes whose estimated tuning time fits, e.g. 2h")
@click.option("--retune", is_flag=True, help="tune a shape seen again even when an earlier cycle tuned it")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True, help="benchmark runs per arm")
@click.option("--serve-cmd", default=None, metavar="CMD",
              help="every job's serving check, as run's --serve-cmd: before tuning and after promotion, judged; a "
                   "promotion that made serving proven slower is rolled back")
@click.option("--serve-repeats", type=click.IntRange(1), default=3, show_default=True, metavar="N",
              help="with --serve-cmd: its runs before and after")
@click.option("--profile", "profiles", multiple=True, metavar="PATH",
              help="a profiler trace or a directory the servers write traces into, inside the container (repeatable): "
                   "each cycle reads it with the logs and tunes the shapes with the largest share of GPU time first")
@ACCEPT_NEW_HOST_KEY
@click.pass_obj
def watch(env: Env, nodes, container, logs, variant, min_misses, interval, once, promote_mode, name, budget,
          retune, repeats, accept_new_host_key, profiles=(), serve_cmd=None, serve_repeats=3):
    """Tune new misses as they appear in the servers' logs; recheck a target after an upgrade. Never prompts.

    Each cycle reads only the new bytes of each log (a rotated log from its start), counts the misses, and
    launches ordinary jobs (one campaign for several targets) for the most-missed shapes no earlier cycle
    tuned. State: <workspace>/watch/NAME/offsets.json and ledger.jsonl."""
    from ..inventory import load_inventory
    from ..watch.store import WatchStore, check_name, default_name
    if not nodes or not logs:
        raise UsageError("watch needs " + "; ".join(w for w, given in (("--node NODE", nodes), ("--log PATH", logs))
                                                    if not given),
                         hint="e.g. tune-remote watch --node NODE --log /var/log/vllm/server.log --once")
    variants = _variants(variant)
    for path in logs:
        if path.startswith(("node:", "local:")) or not path.startswith("/"):
            raise UsageError(f"--log {path!r}: watch reads logs inside the container, by absolute path",
                             hint="give the path as the container sees it, e.g. /var/log/vllm/server.log")
    for path in profiles:
        if path.startswith(("node:", "local:")) or not path.startswith("/"):
            raise UsageError(f"--profile {path!r}: watch reads profiles inside the container, by absolute path",
                             hint="give the trace file or the directory the servers write traces into, e.g. "
                                  "/var/log/vllm/profiles")
    if budget is not None:
        from ..outcome.budget import parse_duration
        parse_duration(budget)
    inv = load_inventory(env.inventory_path)
    from ..campaign import InventorySource
    refs = InventorySource(inv, list(nodes), container).targets()
    name = check_name(name) if name else default_name([r.node for r in refs], [r.container for r in refs])
    from ..watch.loop import inventory_target
    targets = [inventory_target(inv, r.node, r.container, accept_new_host_key) for r in refs]
    store = WatchStore(env.workspace.root, name)
    store.lock()
    run_watch(env, store, targets, list(logs), variants, min_misses, retune, promote_mode, budget, repeats,
              interval, once, lambda: inv, accept_new_host_key, profiles=list(profiles), serve_cmd=serve_cmd,
              serve_repeats=serve_repeats)


def _variants(text: str) -> list[str] | None:
    names = [v.strip() for v in (text or "").split(",") if v.strip()]
    if not names or names == ["auto"]:
        return None
    if "auto" in names:
        raise UsageError("--variant auto cannot be combined with named variants", hint="use auto, or list the variants")
    for v in names:
        get_variant(v)
    return names


def run_watch(env: Env, store, targets, logs, variants, min_misses, retune, promote, budget, repeats, interval,
              once, inventory, accept_new: bool = False, cycles: int | None = None, between=None,
              profiles: list | None = None, serve_cmd: str | None = None, serve_repeats: int = 3) -> None:
    """``watch/loop.py``'s cycles, each said here; stopped: say so, exit 0; ``once`` with a failed job: exit 1."""
    from ..watch.cycle import WatchConfig
    from ..watch.launch import JobOptions
    from ..watch.loop import run
    config = WatchConfig(logs, variants, min_misses, retune, list(profiles or []))
    end = run(env.workspace, env.ui(), store, targets, config, JobOptions(promote, budget, repeats, serve_cmd, serve_repeats),
              interval, once, inventory, lambda res: _say(env, store, res), accept_new, cycles, between)
    if end.stopped:
        click.echo(f"tune-remote: watch {store.name} stopped; a job it started goes on on the node and the next "
                   f"`tune-remote watch --name {store.name}` re-attaches it", err=True)
        raise SystemExit(ExitCode.OK)
    if once and end.failed:
        raise SystemExit(ExitCode.JOB_FAILED)


def _say(env: Env, store, res) -> None:
    out = {"watch": store.name, "cycle": res.cycle, "bytes": res.bytes, "round_trips": res.round_trips,
           "seconds": res.seconds, "seen": res.new_shapes,
           "jobs": [{"job_id": o.job_id, "state": o.state, "promoted": o.promoted} for o in res.outcomes],
           "skipped": res.skipped}
    if env.wants_json():
        click.echo(json.dumps(out))
        return
    jobs = ", ".join(f"{j['job_id']} {j['state']}" for j in out["jobs"]) or "no job"
    click.echo(f"watch {store.name}: cycle {res.cycle}: {res.bytes} new byte(s) read in {res.round_trips} round "
               f"trip(s), {res.seconds:.2f}s; {jobs}" + (f"; skipped: {'; '.join(res.skipped)}" if res.skipped else ""))


def demo_watch(env: Env, variant: str, profile: str, repeats: int, noise: float, *, noise_model: str = "uniform",
               noise_seed: int = 0) -> None:
    """``demo --watch``: two cycles of a watch over a simulated node whose server log grows between them (the
    second tunes only the new shape) and whose ROCm is upgraded meanwhile (the second records the upgrade and
    rechecks the node)."""
    from ..watch.loop import demo_node
    demo = demo_node(env.workspace, variant, profile, noise, noise_model, noise_seed)
    demo.store.lock()

    def grow(cycle: int) -> None:
        said = demo.grow()
        if not env.quiet:
            click.echo(said, err=True)

    run_watch(env, demo.store, [demo.target], [str(demo.log)], [variant], 1, False, "proven", None, repeats, 0,
              False, lambda: None, cycles=2, between=grow)
    if not env.quiet:
        click.echo(f"ledger: {demo.store.ledger_path}", err=True)
