"""Talking to one container, with or without a job: ``NodeLink`` (the node's host transport, the container's,
the helper channel and the host helper) and ``NodeSession`` (a link, the settings and the UI: ``call`` and
``call_batch`` retried with back-off across a lost connection, reconnecting between attempts; ``discover``
and the facts it settles). A job's ``Ctx`` (context.py) is a job plus a session; audit, recheck, the
campaign plan and ``shapes --node`` use a session alone."""

from __future__ import annotations

import collections
import os
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from .errors import ConnectionLost, ConnectError, HostKeyError
from .inventory import ContainerSpec, NodeSpec
from .records import Facts
from .remote.transport import PathSilent, Transport, TransportError
from .variants import (AiterProfile, KernelVariant, format_version, get_variant, is_dev_build, parse_version,
                       profile_for, profile_from_facts)

if TYPE_CHECKING:   # the annotations only: NodeLink imports it when it is made (lazy imports)
    from .remote.detached import NodeHelper

FREE_GPU_BUSY_PCT = 10          # a GPU busier than this (%) is not free (discover's busy_threshold)
VISIBLE_ENV = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class Settings:
    poll_s: float = field(default_factory=lambda: _env_float("TUNE_REMOTE_POLL_S", 2.0))
    reconnect_s: float = field(default_factory=lambda: _env_float("TUNE_REMOTE_RECONNECT_S", 60.0))
    # how long errors while *watching* a running job (a crashed helper, garbage, a slow answer) are retried
    # before the watcher gives up; never a verdict on the job (errors.ObserverError)
    observe_s: float = field(default_factory=lambda: _env_float("TUNE_REMOTE_OBSERVE_S", 300.0))
    accept_new_host_key: bool = False
    yes: bool = False
    interactive: bool = False


class NodeLink:
    """The node (host transport) and the container in it: ``ctr`` as the runner supplies it (a Slurm step's
    docker exec, the demo's local directory, ``kubectl exec``), else docker exec over the host transport.
    (``context.Target`` is this class: the name the runners and older code use.)"""

    def __init__(self, node: NodeSpec, container: ContainerSpec, *, accept_new_host_key: bool = False,
                 host: Transport | None = None, ctr: Transport | None = None):
        self.node = node
        self.container = container
        from .remote.detached import NodeHelper
        self.host = host = host if host is not None else node_transport(node, accept_new_host_key)
        self.ctr: Transport = ctr if ctr is not None else docker_exec(host, node, container)
        self.helper = NodeHelper(self.ctr, python=container.python)
        self._host_helper: NodeHelper | None = None
        self.release: Callable[["NodeLink"], None] | None = None   # a runner's: close() gives it back, open
        self._mark: dict = self.counters()

    @property
    def host_helper(self) -> NodeHelper:
        if self._host_helper is None:
            from .remote.detached import NodeHelper
            self._host_helper = NodeHelper(self.host)
        return self._host_helper

    def connect(self) -> None:
        self.host.connect()

    def round_trips(self) -> int:
        """SSH channels opened + requests over persistent helper channels (one network round trip each)."""
        helpers = self.helper.round_trips + (self._host_helper.round_trips if self._host_helper else 0)
        return self.host.round_trips + helpers

    def counters(self) -> dict:
        """Round trips and helper ops so far (``mark``: from here on, for the job that uses it next)."""
        ops, batched = collections.Counter(self.helper.ops), collections.Counter(self.helper.batched)
        if self._host_helper is not None:
            ops.update({f"host:{k}": v for k, v in self._host_helper.ops.items()})
        return {"round_trips": self.round_trips(), "helper_ops": ops, "helper_ops_batched": batched,
                "helper_requests": self.helper.calls + (self._host_helper.calls if self._host_helper else 0),
                "helpers_started": self.helper.helpers_started}

    def mark(self) -> None:
        self._mark = self.counters()

    def since_mark(self) -> dict:
        now, then = self.counters(), self._mark
        return {k: (dict(+(now[k] - then[k])) if isinstance(now[k], collections.Counter) else now[k] - then[k])
                for k in now}

    def close(self) -> None:
        """Back to the runner that lent it (its helper channel stays open for the next job on this
        container), else the helpers' channels, then the host transport (a pooled one stays open)."""
        if self.release is not None:
            self.release(self)
            return
        self.shut()

    def reset(self, exc: BaseException | None = None) -> None:
        """Between two attempts of a failed call: new helper channels; a connection of its own is closed
        (the next attempt reconnects), a shared one only when the path went silent (its other users lose
        their channels then, as they would anyway), not when one command's channel failed."""
        self._close_helpers()
        if not self.host.shared:
            if isinstance(exc, PathSilent):
                self.host.path_silent()     # the user's master is left, never closed (remote/openssh.py)
            self.host.close()
        elif isinstance(exc, PathSilent):
            self.host.drop()

    def shut(self) -> None:
        self._close_helpers()
        self.host.close()

    def _close_helpers(self) -> None:
        self.helper.close()
        if self._host_helper is not None:
            self._host_helper.close()


def docker_exec(host: Transport, node: NodeSpec, container: ContainerSpec) -> Transport:
    """The container's transport on an inventory (or Slurm) node: ``docker exec`` over the host's."""
    from .remote.docker import DockerExecTransport
    return DockerExecTransport(host, container.name, node.docker, container.user)


def node_transport(node: NodeSpec, accept_new_host_key: bool = False) -> Transport:
    """The host transport of an inventory node: local, or SSH (one connection, opened on first use)."""
    if node.local:
        from .remote.local import LocalTransport
        return LocalTransport(label=node.name)
    from .remote.openssh import ssh_transport
    from .remote.sshtarget import SshTarget
    return ssh_transport(SshTarget(node.host, node.port, node.user, node.identity_file, node.ssh_config),
                         accept_new_host_key=accept_new_host_key)


def settle_facts(answer: dict) -> Facts:
    """The one place discover's answer becomes facts (a job's, a recheck's, the campaign plan's, audit's): the
    version text as the user reads it (a dev build's kept as it is, its number being only a lower bound) and
    the AITER profile's name; refuses an AITER older than tune-remote supports (exit 2). A container without
    AITER (no ``aiter_root``) is the caller's to refuse, in its own words."""
    answer = {k: v for k, v in answer.items() if k != "ok"}
    raw = answer.get("version") or answer.get("git_describe")
    dev = is_dev_build(raw)
    version = parse_version(answer.get("version")) or parse_version(answer.get("git_describe"))
    profile = profile_for(version, dev_build=dev)
    facts = Facts.from_dict(answer)
    facts.version_raw = raw
    facts.version = raw if dev else (format_version(version) if version else facts.version)
    facts.profile = profile.name
    return facts


class NodeSession:
    """One container talked to: every helper op goes through ``call``/``call_batch`` (retried across transport
    failures for ``settings.reconnect_s``, the link reset between attempts: ops are idempotent). ``facts``:
    what ``discover`` settled (a job's ``Ctx`` keeps them in the job instead); ``profile``/``variant`` follow
    them. ``job_id``: the job whose calls these are (a lost connection then says how to resume it)."""

    def __init__(self, target: NodeLink | None, settings: Settings, ui, *,
                 sleep: Callable[[float], None] = time.sleep, node: str | None = None, job_id: str | None = None,
                 facts: Facts | None = None):
        self.target, self.settings, self.ui, self.sleep = target, settings, ui, sleep
        self.node, self.job_id = node, job_id
        self.facts = facts
        self._profile: tuple | None = None     # (facts, facts["probed"], profile)

    @property
    def label(self) -> str:
        """What a lost connection names: the job's node, else the link's node/container."""
        if self.node is not None:
            return self.node
        t = self.target
        return f"{t.node.name}/{t.container.name}" if t is not None else "the node"

    # ------------------------------------------------------------------------------------------- calls
    def call(self, op: str, request: dict | None = None, *, host: bool = False, timeout: float = 300) -> dict:
        """One helper round trip, retried with back-off across transport failures (ops are idempotent)."""
        helper = self.target.host_helper if host else self.target.helper
        return self._retrying(lambda: helper.call(op, request, timeout=timeout))

    def call_batch(self, calls: list[tuple[str, dict]], *, timeout: float = 300, soft_last: bool = False) -> list[dict]:
        """Several container ops in ONE round trip, in order (each may depend on the one before); retried
        like ``call``. The first failed op raises as its own ``call`` would (``soft_last``: not the last)."""
        return self._retrying(lambda: self.target.helper.call_batch(calls, timeout=timeout, soft_last=soft_last))

    def _retrying(self, attempt):
        deadline = time.monotonic() + self.settings.reconnect_s
        delay = 0.5
        while True:
            try:
                return attempt()
            except (TransportError, ConnectError) as exc:
                if isinstance(exc, HostKeyError):
                    raise
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._lost(exc) from exc
                wait = min(delay + random.uniform(0, delay / 4), remaining)  # use the whole window
                self.ui.event(f"connection problem ({exc.message}); retrying in {wait:.1f}s")
                self.sleep(wait)
                delay = min(delay * 2, 15.0)
                self.target.reset(exc)

    def _lost(self, exc) -> ConnectionLost:
        if self.job_id is not None:
            hint = f"the job goes on on the node; run `tune-remote resume {self.job_id}`"
        else:
            hint = ("nothing was left running there; run the command again once the node answers "
                    "(TUNE_REMOTE_RECONNECT_S: how long a lost connection is retried)")
        return ConnectionLost(f"connection to {self.label} lost and not re-established: {exc.message}",
                              hint=hint)

    # ------------------------------------------------------------------------------------------- facts
    def discover_request(self, *, gpus: bool = False, **extra) -> dict:
        """discover's request: the container's aiter_path; ``gpus``: also what picking free GPUs needs (the
        workdir, the busy threshold, the inventory's visible-device variables); ``extra`` as given (lock,
        riders)."""
        c = self.target.container
        req: dict = {"aiter_path": c.aiter_path}
        if gpus:
            req.update(workdir=c.workdir, busy_threshold=FREE_GPU_BUSY_PCT,
                       env={k: v for k, v in c.env.items() if k in VISIBLE_ENV})
        req.update(extra)
        return req

    def discover(self, request: dict | None = None, *, timeout: float = 300) -> Facts:
        """One discover round trip (``request``: ``discover_request``'s), its answer settled
        (``settle_facts``) and kept as ``facts``."""
        self.facts = settle_facts(self.call("discover", request or self.discover_request(), timeout=timeout))
        return self.facts

    @property
    def profile(self) -> AiterProfile:
        """Computed once per settling of the facts: ``settle_profile`` writes a new ``facts["probed"]`` list
        each time the probes change (and discover replaces the facts), which is what the cache is keyed on."""
        facts = self.facts
        cached = self._profile
        if cached is None or cached[0] is not facts or cached[1] is not facts.probed:
            cached = self._profile = (facts, facts.probed, profile_from_facts(facts))
        return cached[2]

    def variant(self, name: str) -> KernelVariant:
        """The registry's variant as this container's AITER has it."""
        return get_variant(name).resolve(self.profile)
