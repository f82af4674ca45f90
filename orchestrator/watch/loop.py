"""The watch's loop: re-attach what a killed watch left, then cycles until SIGINT/SIGTERM (``once``: one;
``cycles``: that many, the demo's), and the demo's watch over a simulated node whose log grows and whose ROCm is
upgraded between its two cycles. The CLI (``cli/watchloop.py``) gives the options and prints what it is told."""
from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..context import Settings, Target
from ..errors import UsageError
from ..state import Workspace
from .cycle import CycleResult, Watch, WatchConfig, failed as any_failed
from .launch import JobOptions, Launcher
from .mine import WatchTarget
from .store import WatchStore


class Stopped(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C is (a job being driven stays ``running``, never failed by it): the watch ends
    after saying so (exit 0); the job goes on on the node."""


def _stop(signum, frame):
    raise Stopped()


@dataclass
class Ended:
    stopped: bool = False     # by SIGINT/SIGTERM: a job it started goes on on the node
    failed: bool = False      # a job it started (or re-attached) failed


def inventory_target(inv, node: str, container: str, accept_new: bool) -> WatchTarget:
    spec = inv.node(node)
    return WatchTarget(node, container, lambda: Target(spec, spec.container(container), accept_new_host_key=accept_new))


def run(workspace: Workspace, ui, store: WatchStore, targets: list[WatchTarget], config: WatchConfig,
        options: JobOptions, interval: float, once: bool, inventory: Callable, say: Callable[[CycleResult], None],
        accept_new: bool = False, cycles: int | None = None, between: Callable[[int], None] | None = None) -> Ended:
    """Cycles, each said with ``say(result)``; ``between(n)`` instead of the interval's wait after cycle n (the
    demo's growing log). SIGTERM ends it as Ctrl-C does; the store is unlocked afterwards whatever happened."""
    from .upgrade import recheck_target
    settings = Settings(yes=True, interactive=False, accept_new_host_key=accept_new)
    launcher = Launcher(workspace, settings, ui, inventory, options, store.dir, store.name)
    w = Watch(store, targets, config, launcher, ui,
              recheck=lambda wt: recheck_target(workspace, inventory, settings, ui, node=wt.node,
                                                container=wt.container))
    end = Ended()
    wake = threading.Event()
    old = signal.signal(signal.SIGTERM, _stop) if threading.current_thread() is threading.main_thread() else None
    try:
        left = 1 if once else cycles
        while True:
            end.failed = any_failed(w.reattach()) or end.failed    # what a killed watch (or a lost connection) left
            res = w.cycle()
            end.failed = end.failed or res.failed
            say(res)
            if left is not None:
                left -= 1
                if left <= 0:
                    break
            if between is not None:
                between(res.cycle)
            else:
                wake.wait(interval)
    except (KeyboardInterrupt, Stopped):
        end.stopped = True
    finally:
        w.close()
        store.unlock()
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    return end


DEMO_FIRST = [(72, 512, 7168), (72, 7168, 2048)]      # seen by the first cycle
DEMO_SECOND = [(72, 2112, 7168)]                       # appended before the second, with the first ones again
DEMO_ROCM = "7.1.0"                                    # and the node's ROCm upgraded meanwhile


@dataclass
class DemoNode:
    """The demo's simulated node for ``demo --watch``: its server log, its watch target and store, and ``grow``,
    which appends the second cycle's misses and upgrades ROCm (returns what to say about it)."""
    log: Path
    target: WatchTarget
    store: WatchStore
    grow: Callable[[], str]


def demo_node(workspace: Workspace, variant: str, profile: str, noise: float, noise_model: str,
              noise_seed: int) -> DemoNode:
    from ..demo import demo_target, prepare_demo
    from ..sim.growlog import append_misses, upgrade_rocm
    from ..sim.logs import VARIANT_FILES
    if variant not in VARIANT_FILES:
        raise UsageError(f"demo --watch writes GEMM miss lines; {variant} is not one of its variants",
                         hint="demo --watch one of: " + ", ".join(VARIANT_FILES))
    name = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    node_dir, _ = prepare_demo(workspace.root / ".demo-nodes" / name, profile=profile, variant=variant,
                               noise_pct=noise, noise_model=noise_model, noise_seed=noise_seed)
    log = node_dir / "server.log"
    append_misses(log, variant, DEMO_FIRST, times=2)
    target = WatchTarget("demo", "simulated", lambda: demo_target(str(node_dir)), demo_dir=str(node_dir))

    def grow() -> str:
        size = append_misses(log, variant, DEMO_FIRST + DEMO_SECOND, times=2)
        old = upgrade_rocm(node_dir, DEMO_ROCM)
        return (f"demo: {size} bytes of new miss lines appended to {log}; ROCm {old} -> {DEMO_ROCM} "
                "(an upgrade: the next cycle rechecks the node)")

    return DemoNode(log, target, WatchStore(workspace.root, name), grow)
