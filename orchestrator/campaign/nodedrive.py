"""The node driver of a Slurm campaign planned while its holders were pending (bundle.py; docs/internals.md,
"Slurm, pending"): started by the holder job once Slurm grants it, on the compute node, with the node's python3.

``python3 drive.zip DIR NODE CONTAINER DOCKER...``: DIR is the shard's directory on the shared filesystem
(``<home>/.tune-remote/slurm/<job>/<i>``), whose ``drive/`` holds the shard's sub-jobs (``order.json``, each
sub-job's ``state.json`` and its shapes CSV). Each sub-job is carried the way a detached campaign's is from the
laptop (``engine.drive``: discover, shapes, prepare, launch), through the same node helper, ops and locks, over
``docker exec`` on this node (no SSH, no srun: the holder runs inside the allocation), on the GPUs Slurm
granted; a target's later variants wait on the node for the run before them (``chain_after``). Each save is the
sub-job's state.json, written atomically in ``drive/``; the laptop's ``status``/``resume`` adopt it.

Stdlib only (and ``orchestrator``): nothing here may import a third-party module (tests/unit/test_bundle.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..context import Settings, Target
from .. import engine
from ..errors import TuneRemoteError
from ..inventory_model import ContainerSpec, NodeSpec
from ..state import Workspace
from ..ui import Ui
from .chain import CANCELLED, DONE, STOPPED, carry, chain_after


def granted_gpus(d: Path) -> list[int]:
    """What Slurm granted the holder (its ROCR_VISIBLE_DEVICES, as the holder wrote it)."""
    try:
        text = (d / "gpus").read_text()
    except OSError:
        return []
    return [int(g) for g in text.replace(",", " ").split() if g.isdigit()]


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} nodedrive: {text}", file=sys.stderr, flush=True)


def drive(d: Path, node: str, container: str, docker: tuple[str, ...]) -> int:
    """Carry the shard's sub-jobs up to their launch. 0: every one launched (or already over); 1: one could not
    be launched (the laptop's ``resume`` carries the rest); 143: ``cancel`` asked for the job."""
    ws = Workspace(d / "drive")
    order = json.loads((d / "drive" / "order.json").read_text())["subs"]
    gpus = granted_gpus(d)
    settings = Settings(yes=True, interactive=False, reconnect_s=0)

    def cancelled() -> bool:
        if (d / "cancel").exists():
            say("cancel asked for this job: nothing more is launched")
            return True
        return False

    def prepare(sub, chain: list) -> None:
        if not sub.remote.get("run_dir"):
            sub.node, sub.container = node, container
            sub.request["detach"] = True
            sub.request["shapes_csv"] = str(d / "drive" / "shards" / f"{sub.job_id}.csv")
            sub.request["gpus"] = gpus or None         # the grant, as the srun path's plan gives it
            if chain:
                sub.request["chain_after"] = chain_after(chain)
            ws.save(sub)

    def run(sub) -> None:
        sid = sub.job_id
        target = Target(NodeSpec(name=node, host=node, docker=docker, local=True), ContainerSpec(name=container))
        started = time.monotonic()
        say(f"{sid}: {sub.variant} on {node}/{container}, GPUs {gpus or 'as discovered'}")
        try:
            state = engine.drive(sub, ws, target, settings, Ui(quiet=True))
        except TuneRemoteError as exc:
            say(f"{sid}: {exc.one_line()}")
            state = ws.load(sid).state
        except Exception as exc:  # noqa: BLE001 - said in drive.log; the laptop carries the shard
            say(f"{sid}: internal error: {type(exc).__name__}: {exc}")
            state = ws.load(sid).state
        sub = ws.load(sid)
        say(f"{sid}: {state} after {time.monotonic() - started:.1f} s"
            + (f" (run dir {sub.remote.run_dir})" if sub.remote.get("run_dir") else ""))

    return {DONE: 0, STOPPED: 1, CANCELLED: 143}[carry(order, ws, prepare, run, True, cancelled)]


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print("usage: python3 drive.zip DIR NODE CONTAINER DOCKER...", file=sys.stderr)
        return 2
    say(f"python {sys.version.split()[0]}, pid {os.getpid()}")
    return drive(Path(argv[0]), argv[1], argv[2], tuple(argv[3:]))
