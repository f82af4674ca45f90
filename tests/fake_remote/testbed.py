"""TestBed: one Docker engine + base image + node user, and the nodes created on top of them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path

from . import procs
from .node import Container, ContainerSpec, Node, destroy_recorded
from .provision import (
    LABEL, OWNER_LABEL, PREFIX, STATE_ROOT, EngineInfo, TestbedUnavailable, docker, engine_answers,
    ensure_base_image, ensure_engine, ensure_node_user, ensure_packages, ensure_privsep_dir, find_sshd,
    is_root, stop_engine_if_ours_and_unused,
)

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,40}$")


def node_name(name: str) -> str:
    """Every node (and so every container) name starts with the test-bed prefix."""
    name = name.lower()
    if not _NAME_RE.match(name):
        raise ValueError(f"invalid node name {name!r} (lower-case letters, digits, '-', '_', '.')")
    return name if name.startswith(PREFIX) else PREFIX + name


def sim_available() -> bool:
    try:
        from orchestrator.sim import SimSpec, install  # noqa: F401, PLC0415
        del SimSpec, install
    except ImportError:
        return False
    return True


class TestBed:
    """Provision once, then create nodes. ``owner`` labels everything (``pytest-<pid>``, ``up-<name>``)."""

    __test__ = False

    def __init__(self, owner: str | None = None, *, root: Path | None = None, keep_engine: bool | None = None):
        self.owner = owner or f"pytest-{os.getpid()}"
        self.root = Path(root) if root else STATE_ROOT / self.owner
        self.nodes: dict[str, Node] = {}
        self.engine: EngineInfo | None = None
        self.image: str | None = None
        self.user = None
        self.timings: dict[str, float] = {}
        self.keep_engine = (os.environ.get("TRTEST_KEEP_ENGINE", "") not in ("", "0")) if keep_engine is None \
            else keep_engine
        self._counter = 0

    # ---------------------------------------------------------------- provisioning
    def provision(self) -> "TestBed":
        t0 = time.monotonic()
        if os.environ.get("TRTEST_DISABLE", "") not in ("", "0"):
            raise TestbedUnavailable("disabled by TRTEST_DISABLE")
        ensure_packages()
        if not find_sshd():
            raise TestbedUnavailable("sshd not found")
        self.timings["packages_s"] = time.monotonic() - t0
        self.engine = ensure_engine()
        self.timings["engine_s"] = self.engine.startup_s
        self.timings["engine_cold_start"] = float(self.engine.started_now)
        self.image, self.timings["base_image_s"], _ = ensure_base_image()
        t1 = time.monotonic()
        self.user = ensure_node_user()
        ensure_privsep_dir()
        self.timings["user_s"] = time.monotonic() - t1
        self.root.mkdir(parents=True, exist_ok=True)
        self.timings["provision_total_s"] = time.monotonic() - t0
        return self

    # ---------------------------------------------------------------- nodes
    def create_node(self, containers=("current",), *, name: str | None = None, proxy: bool = True,
                    daemon: bool = False, directory: Path | None = None) -> Node:
        """A node with one container per entry of ``containers``.

        Each entry: "current"/"legacy", a SimSpec, a dict of SimSpec kwargs, or a ``ContainerSpec``
        (suffix, target_dir, extra env, init). The first container is named ``<node>-aiter-dev``,
        the next ``<node>-aiter-<profile>`` unless a suffix is given.
        """
        if self.image is None:
            self.provision()
        if not sim_available():
            raise TestbedUnavailable("orchestrator.sim is not importable (the simulated AITER is missing)")
        if name is None:
            self._counter += 1
            short = self.owner.replace("pytest-", "p")
            name = f"{short}-n{self._counter}"
        name = node_name(name)
        if name in self.nodes:
            raise ValueError(f"node {name} exists")
        t0 = time.monotonic()
        node = Node(name, Path(directory) if directory else self.root / name, owner=self.owner,
                    user=self.user.name, image=self.image, with_proxy=proxy, daemon=daemon)
        self.nodes[name] = node
        try:
            node.setup_ssh()
            node.save()            # recorded before containers exist: a crash now can still be swept
            for spec in containers:
                node.add_container(spec)
            node.save()
        except BaseException:
            self.destroy_node(node)
            raise
        node.startup_s = time.monotonic() - t0
        return node

    def destroy_node(self, node: Node | str) -> None:
        node = self.nodes.pop(node if isinstance(node, str) else node.name, node)
        if isinstance(node, Node):
            node.destroy()

    def close(self) -> list[str]:
        """Remove every node we created; stop the engine only if this bed started it and nothing uses it."""
        notes = []
        for node in list(self.nodes.values()):
            self.destroy_node(node)
        if self.root.exists() and self.root.parent == STATE_ROOT and self.owner.startswith("pytest-"):
            shutil.rmtree(self.root, ignore_errors=True)
        if self.engine and self.engine.started_now and not self.keep_engine:
            notes.append(stop_engine_if_ours_and_unused())
        return notes

    def __enter__(self):
        return self.provision()

    def __exit__(self, *exc):
        self.close()


def sweep_stale() -> list[str]:
    """Remove leftovers of *dead* pytest sessions (owner label ``pytest-<pid>`` whose pid is gone).

    Only objects carrying our label and a dead owner are touched; live sessions and `up` nodes are kept.
    """
    notes = []
    if STATE_ROOT.is_dir():
        for d in STATE_ROOT.glob("pytest-*"):
            m = re.fullmatch(r"pytest-(\d+)", d.name)
            if not m or procs.alive(int(m.group(1))):
                continue
            for node_dir in (p for p in d.iterdir() if p.is_dir()):
                rec = {"name": node_dir.name, "owner": d.name, "state_dir": str(node_dir)}
                with contextlib.suppress(OSError, ValueError, KeyError):
                    rec.update(json.loads((node_dir / "node.json").read_text()))
                with contextlib.suppress(OSError, RuntimeError):
                    notes += destroy_recorded(rec)
            shutil.rmtree(d, ignore_errors=True)
    if engine_answers():
        cp = docker("ps", "-a", "--filter", f"label={LABEL}=1", "--format",
                    f'{{{{.ID}}}} {{{{.Label "{OWNER_LABEL}"}}}}', check=False)
        dead = []
        for line in cp.stdout.splitlines():
            cid, _, owner = line.partition(" ")
            m = re.fullmatch(r"pytest-(\d+)", owner.strip())
            if m and not procs.alive(int(m.group(1))):
                dead.append(cid)
        if dead:
            docker("rm", "-f", "-v", *dead, check=False)
            notes.append(f"removed {len(dead)} stale containers")
    return notes


__all__ = ["TestBed", "Node", "Container", "ContainerSpec", "TestbedUnavailable", "sweep_stale",
           "sim_available", "node_name", "is_root"]
