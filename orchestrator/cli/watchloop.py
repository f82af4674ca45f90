"""``tune-remote watch``: a long-lived loop (or one cycle, ``--once``) that tunes new misses as they appear in
the servers' logs and rechecks a target after an upgrade. The work is ``orchestrator/watch/``; here: the
options, the targets, the signals, the exit code."""
from __future__ import annotations

import json
import signal
import threading

import click

from ..context import Settings, Target
from ..errors import ExitCode, UsageError
from ..variants import VARIANTS, get_variant
from .base import ACCEPT_NEW_HOST_KEY, Env, cli


class Stopped(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C is (a job being driven stays ``running``, never failed by it): the watch ends
    after saying so (exit 0); the job goes on on the node."""


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
@ACCEPT_NEW_HOST_KEY
@click.pass_obj
def watch(env: Env, nodes, container, logs, variant, min_misses, interval, once, promote_mode, name, budget,
          retune, repeats, accept_new_host_key):
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
    if budget is not None:
        from ..outcome.budget import parse_duration
        parse_duration(budget)
    inv = load_inventory(env.inventory_path)
    from ..campaign import InventorySource
    refs = InventorySource(inv, list(nodes), container).targets()
    name = check_name(name) if name else default_name([r.node for r in refs], [r.container for r in refs])
    targets = [_inventory_target(inv, r.node, r.container, accept_new_host_key) for r in refs]
    store = WatchStore(env.workspace.root, name)
    store.lock()
    run_watch(env, store, targets, list(logs), variants, min_misses, retune, promote_mode, budget, repeats,
              interval, once, lambda: inv, accept_new_host_key)


def _variants(text: str) -> list[str] | None:
    names = [v.strip() for v in (text or "").split(",") if v.strip()]
    if not names or names == ["auto"]:
        return None
    if "auto" in names:
        raise UsageError("--variant auto cannot be combined with named variants", hint="use auto, or list the variants")
    for v in names:
        get_variant(v)
    return names


def _inventory_target(inv, node: str, container: str, accept_new: bool):
    from ..watch.mine import WatchTarget
    spec = inv.node(node)
    return WatchTarget(node, container, lambda: Target(spec, spec.container(container), accept_new_host_key=accept_new))


def run_watch(env: Env, store, targets, logs, variants, min_misses, retune, promote, budget, repeats, interval,
              once, inventory, accept_new: bool = False, cycles: int | None = None, between=None) -> None:
    """Re-attach what a killed watch left, then cycles (``once``: one; ``cycles``: that many, the demo's;
    ``between(n)`` instead of the interval's wait after cycle n: the demo's growing log)."""
    from ..watch.cycle import Watch, WatchConfig, failed as any_failed
    from ..watch.launch import JobOptions, Launcher
    from ..watch.upgrade import recheck_target
    ui = env.ui()
    settings = Settings(yes=True, interactive=False, accept_new_host_key=accept_new)
    launcher = Launcher(env.workspace, settings, ui, inventory, JobOptions(promote, budget, repeats), store.dir, store.name)
    w = Watch(store, targets, WatchConfig(logs, variants, min_misses, retune), launcher, ui,
              recheck=lambda wt: recheck_target(env.workspace, inventory, settings, ui, node=wt.node,
                                                container=wt.container))
    failed = False
    wake = threading.Event()
    old = signal.signal(signal.SIGTERM, _stop) if threading.current_thread() is threading.main_thread() else None
    try:
        left = 1 if once else cycles
        while True:
            failed = any_failed(w.reattach()) or failed    # what a killed watch (or a lost connection) left
            res = w.cycle()
            failed = failed or res.failed
            _say(env, store, res)
            if left is not None:
                left -= 1
                if left <= 0:
                    break
            if between is not None:
                between(res.cycle)
            else:
                wake.wait(interval)
    except (KeyboardInterrupt, Stopped):
        click.echo(f"tune-remote: watch {store.name} stopped; a job it started goes on on the node and the next "
                   f"`tune-remote watch --name {store.name}` re-attaches it", err=True)
        raise SystemExit(ExitCode.OK) from None
    finally:
        w.close()
        store.unlock()
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    if once and failed:
        raise SystemExit(ExitCode.JOB_FAILED)


def _stop(signum, frame):
    raise Stopped()


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


DEMO_FIRST = [(72, 512, 7168), (72, 7168, 2048)]      # seen by the first cycle
DEMO_SECOND = [(72, 2112, 7168)]                       # appended before the second, with the first ones again
DEMO_ROCM = "7.1.0"                                    # and the node's ROCm upgraded meanwhile


def demo_watch(env: Env, variant: str, profile: str, repeats: int, noise: float, *, noise_model: str = "uniform",
               noise_seed: int = 0) -> None:
    """``demo --watch``: two cycles of a watch over a simulated node whose server log grows between them (the
    second tunes only the new shape) and whose ROCm is upgraded meanwhile (the second records the upgrade and
    rechecks the node)."""
    import time

    from ..demo import demo_target, prepare_demo
    from ..sim.growlog import append_misses, upgrade_rocm
    from ..sim.logs import VARIANT_FILES
    from ..watch.mine import WatchTarget
    from ..watch.store import WatchStore
    if variant not in VARIANT_FILES:
        raise UsageError(f"demo --watch writes GEMM miss lines; {variant} is not one of its variants",
                         hint="demo --watch one of: " + ", ".join(VARIANT_FILES))
    name = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    node_dir, _ = prepare_demo(env.workspace.root / ".demo-nodes" / name, profile=profile, variant=variant,
                               noise_pct=noise, noise_model=noise_model, noise_seed=noise_seed)
    log = node_dir / "server.log"
    append_misses(log, variant, DEMO_FIRST, times=2)
    target = WatchTarget("demo", "simulated", lambda: demo_target(str(node_dir)), demo_dir=str(node_dir))
    store = WatchStore(env.workspace.root, name)
    store.lock()

    def grow(cycle: int) -> None:
        size = append_misses(log, variant, DEMO_FIRST + DEMO_SECOND, times=2)
        old = upgrade_rocm(node_dir, DEMO_ROCM)
        if not env.quiet:
            click.echo(f"demo: {size} bytes of new miss lines appended to {log}; ROCm {old} -> {DEMO_ROCM} "
                       "(an upgrade: the next cycle rechecks the node)", err=True)

    run_watch(env, store, [target], [str(log)], [variant], 1, False, "proven", None, repeats, 0, False,
              lambda: None, cycles=2, between=grow)
    if not env.quiet:
        click.echo(f"ledger: {store.ledger_path}", err=True)
