"""The campaign seam: where targets come from (a *target source*) and how one target's work runs (a *runner*).

A target is one container on one node. ``InventorySource`` yields them from inventory.yaml (nodes, groups,
``all``); ``slurm.SlurmSource`` from a Slurm allocation, ``demo.DemoSource`` from simulated nodes; the
registry that finds a saved campaign's source by its kind is ``sources.py``. A runner carries one sub-job
(one variant's shard on one target) through the single-target workflow and can cancel it; every runner is
a ``PooledRunner`` (the engine every single-target job uses, targets lent and given back) that supplies only
how a target is reached (``_make``: the node's transport and the container's), so a campaign adds no second
code path for the work itself.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Protocol

from ..context import Ctx, Settings, Target, docker_exec, node_transport
from ..errors import UsageError
from ..inventory import Inventory
from ..records import Campaign
from ..remote.pool import HostPool, close_quietly
from ..state import JobState, Workspace
from ..ui import Ui


@dataclass(frozen=True)
class TargetRef:
    node: str
    container: str

    @property
    def label(self) -> str:
        return f"{self.node}/{self.container}"


class Runner(Protocol):
    def open(self, ref: TargetRef) -> Target: ...

    def close(self) -> None: ...    # the connections its targets shared (one per node: remote/pool.py)

    def keep_only(self, nodes: set[str]) -> None: ...   # the plan is made: let the other nodes go

    def run(self, sub: JobState, workspace: Workspace, settings: Settings, ui=None, owner: str | None = None,
            announce: bool = False) -> str: ...

    def cancel(self, sub: JobState, workspace: Workspace, grace_s: float) -> dict: ...

    def granted_gpus(self, ref: TargetRef) -> list[int] | None: ...   # a scheduler's grant, else None


@dataclass
class SourceEnv:
    """What a source may use: the campaign job (its ``request.campaign`` is the source's saved state), the
    inventory (read on first use), a way to save the job, the UI, the host-key policy, and the target the
    command made already (a single job's: single.py)."""
    job: JobState
    inventory: Callable[[], Inventory]
    save: Callable[[], None]
    ui: object = None
    accept_new_host_key: bool = False
    target: Target | None = None

    @property
    def state(self) -> Campaign:
        return self.job.request.campaign


class TargetSource:
    """A campaign's targets and how they are reached. Only ``targets`` and ``runner`` are required; the rest
    are no-ops for a source that holds nothing between the plan and the end (the inventory's nodes)."""

    kind = ""
    # targets() acquires something (Slurm submits jobs): the job is saved before, so a resume after a lost
    # answer acquires nothing twice
    acquires = False
    # set when the targets are cancelled as one (not per node), with the sentence that says why
    cancelled_whole: str | None = None

    @classmethod
    def from_job(cls, env: SourceEnv) -> "TargetSource":
        """The source of a saved campaign (run, resume, cancel, status)."""
        raise NotImplementedError

    @classmethod
    def begin(cls, env: SourceEnv, options: dict) -> list[str] | None:
        """A new campaign: save what the source needs in ``env.state`` (before anything remote). Returns the
        dry-run plan's lines when the source cannot make the real plan without acquiring targets (Slurm
        submits jobs for that), else None."""
        return None

    def targets(self) -> list[TargetRef]:
        raise NotImplementedError

    def started(self, patience_s: float) -> bool:
        """Ask for the targets; True when they can take work within ``patience_s`` (``run --detach``: a
        scheduler's queue may say not yet, and the plan waits for the next ``resume``)."""
        return True

    def runner(self, accept_new_host_key: bool = False) -> Runner:
        raise NotImplementedError

    def pending_plan(self, job: JobState) -> dict | str:
        """``run --detach`` and the targets are not started yet: the plan made now (``driver.make_plan``'s
        form, its sub-jobs carried without the laptop once the targets start: ``ship``), or why it cannot be."""
        return "the plan needs the targets running"

    def ship(self, job: JobState, workspace: Workspace, plan: dict, lines: list[str]) -> None:
        """Create ``pending_plan``'s sub-jobs and hand them to whatever carries them on the targets."""

    def adopt(self, job: JobState, workspace: Workspace, wait_s: float = 0.0) -> bool:
        """Bring home the sub-job states the targets' own drivers wrote (``wait_s``: for those still launching).
        True when something changed."""
        return False

    def release(self, keep: set | None = None) -> None:
        """Give back what the source holds: all of it (the campaign is over), or all but the nodes in ``keep``
        (the plan is made)."""

    def cancel(self, grace_s: float) -> tuple[int, int] | None:
        """End the targets' processes the source's own way and return (signalled, killed); None: the runner
        cancels each target (``driver.cancel``)."""
        return None

    def ended_by_cancel(self, exc: BaseException, running: bool) -> bool:
        """``exc`` stopped the campaign because ``tune-remote cancel`` ended its targets under it."""
        return False

    @classmethod
    def status(cls, env: SourceEnv, targets: list[dict], live: bool) -> dict:
        """What ``status`` adds for the source (keys of the job's row; it may add to each target's row), as
        the source sees it now when ``live`` (a running job), else as last saved. {}: nothing to add."""
        return {}

    def close(self) -> None:
        """The source's own connections (not the runner's)."""


class InventorySource(TargetSource):
    """``--node`` values (node, group or ``all``, repeatable) x ``--container`` (optional when each node
    has exactly one container)."""

    kind = "inventory"

    @classmethod
    def from_job(cls, env: SourceEnv) -> "InventorySource":
        return cls(env.inventory(), env.state.nodes, env.state.container)

    def __init__(self, inventory: Inventory, node_args, container: str | None):
        self.inventory = inventory
        self.nodes = inventory.select(node_args)
        self.container = container

    def targets(self) -> list[TargetRef]:
        refs = []
        for node in self.nodes:
            if self.container:
                node.container(self.container)          # a clear error when a node lacks it
                refs.append(TargetRef(node.name, self.container))
            elif len(node.containers) == 1:
                refs.append(TargetRef(node.name, next(iter(node.containers))))
            elif not node.containers:
                raise UsageError(f"node {node.name!r} names no container (no tune_remote_containers in the "
                                 "Ansible inventory)", hint="add --container NAME")
            else:
                raise UsageError(f"node {node.name!r} has {len(node.containers)} containers; say which",
                                 hint="add --container NAME (one of: " + ", ".join(node.containers) + ")")
        return refs

    def runner(self, accept_new_host_key: bool = False) -> "InventoryRunner":
        return InventoryRunner(self.inventory, accept_new_host_key)


class PooledRunner:
    """Every target it opens on one node borrows the same connection, and a target closed by one job is
    lent to the next that opens its container (its helper channel open: no new helper), until ``close``.
    A subclass supplies ``_make(ref)``: the target with its host and container transports."""

    def __init__(self, accept_new_host_key: bool = False):
        self.accept_new = accept_new_host_key
        self.pool = HostPool()
        self._idle: dict[TargetRef, list[Target]] = {}
        self._lent: list[Target] = []
        self._lock = threading.Lock()

    def open(self, ref: TargetRef) -> Target:
        """An idle target of ``ref`` (used by one thread at a time), else a new one; ``close()`` gives it back."""
        with self._lock:
            idle = self._idle.get(ref)
            target = idle.pop() if idle else None
        if target is None:
            target = self._make(ref)
            target.release = lambda t: self._give_back(ref, t)
            with self._lock:
                self._lent.append(target)
        target.mark()       # its next job's round trips and helper ops start here
        return target

    def _make(self, ref: TargetRef) -> Target:
        raise NotImplementedError

    def _give_back(self, ref: TargetRef, target: Target) -> None:
        with self._lock:
            idle = self._idle.setdefault(ref, [])
            if not any(t is target for t in idle):      # closed twice: still lent once
                idle.append(target)

    def keep_only(self, nodes: set[str]) -> None:
        """The plan is made: the idle targets of the nodes it left out are shut (their helpers exit on EOF)
        and their connections closed, not held for the hours the campaign runs."""
        with self._lock:
            drop = [t for ref, ts in self._idle.items() if ref.node not in nodes for t in ts]
            self._idle = {ref: ts for ref, ts in self._idle.items() if ref.node in nodes}
            self._lent = [t for t in self._lent if not any(t is d for d in drop)]
        close_quietly(drop, "shut")
        self.pool.close_unused()

    def close(self) -> None:
        """Every target's helper channels (the helpers exit on EOF), then the connections."""
        with self._lock:
            targets, self._lent, self._idle = self._lent, [], {}
        close_quietly(targets, "shut")
        self.pool.close()

    ui_for = None     # the campaign's live view sets this: sub-job -> its Ui (one line per target)

    def granted_gpus(self, ref: TargetRef) -> list[int] | None:
        """The GPUs a scheduler granted on the target's node (used as they are), else None (probed free)."""
        return None

    def run(self, sub: JobState, workspace: Workspace, settings: Settings, ui=None, owner: str | None = None,
            announce: bool = False) -> str:
        """``sub`` carried on its target (``engine.drive``): with ``ui`` (a single job's, the command's), else its
        row of the live view, else quiet; ``owner``/``announce``: a single job's, which its drive owns."""
        from ..engine import drive
        target = self.open(TargetRef(sub.node, sub.container))
        if ui is None:
            ui = self.ui_for(sub) if self.ui_for else Ui(quiet=True)
        return drive(sub, workspace, target, settings, ui, owner=owner, announce=announce)

    def cancel(self, sub: JobState, workspace: Workspace, grace_s: float) -> dict:
        target = self.open(TargetRef(sub.node, sub.container))
        ctx = Ctx(job=sub, workspace=workspace, target=target, settings=Settings(), ui=Ui(quiet=True))
        from ..steps.remote import cancel
        try:
            return cancel(ctx, grace_s)
        finally:
            target.close()


class InventoryRunner(PooledRunner):
    """An inventory node's container: SSH (or local) to the node, ``docker exec`` into the container."""

    def __init__(self, inventory: Inventory, accept_new_host_key: bool = False):
        super().__init__(accept_new_host_key)
        self.inventory = inventory

    def _make(self, ref: TargetRef) -> Target:
        node = self.inventory.node(ref.node)
        host = self.pool.borrow(node.name, lambda: node_transport(node, self.accept_new))
        container = node.container(ref.container)
        return Target(node, container, host=host, ctr=docker_exec(host, node, container))
