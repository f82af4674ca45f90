"""The inventory as frozen dataclasses, and the checks both loaders share (inventory.py reads inventory.yaml,
inventory_ansible.py an Ansible inventory)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import InventoryError

NODE_KEYS = {"host", "port", "user", "identity_file", "docker", "containers", "ssh_config", "local"}
CONTAINER_KEYS = {"aiter_path", "env", "python", "user", "workdir"}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    aiter_path: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    python: str = "python3"
    user: str | None = None
    workdir: str | None = None      # node work dir for job files (default: see nodeside/discovery._workdir)


@dataclass(frozen=True)
class NodeSpec:
    name: str
    host: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    docker: tuple[str, ...] = ("docker",)
    ssh_config: str | None = None
    local: bool = False  # run on this machine without SSH (tests, demo)
    containers: dict[str, ContainerSpec] = field(default_factory=dict)
    any_container: bool = False   # an Ansible host without tune_remote_containers: --container names it

    def container(self, name: str) -> ContainerSpec:
        try:
            return self.containers[name]
        except KeyError:
            if self.any_container and NAME.match(name):
                return ContainerSpec(name=name)
            raise InventoryError(
                f"node {self.name!r} has no container {name!r} in the inventory",
                hint="containers of this node: " + (", ".join(self.containers) or "none"),
            ) from None


@dataclass(frozen=True)
class SlurmSpec:
    """A Slurm cluster reached through its login node (inventory top level ``slurm: {NAME: {...}}``)."""
    name: str
    login: str
    container: str                      # "{node}" expands to the compute node's name
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    ssh_config: str | None = None
    partition: str | None = None
    account: str | None = None
    gpus_per_node: int | None = None
    time: str | None = None
    docker: tuple[str, ...] = ("docker",)

    def container_on(self, node: str) -> str:
        return self.container.replace("{node}", node)


SLURM_KEYS = {"login": str, "container": str, "port": int, "user": str, "identity_file": str,
              "ssh_config": str, "partition": str, "account": str, "gpus_per_node": int, "time": str}


@dataclass(frozen=True)
class Inventory:
    path: str
    nodes: dict[str, NodeSpec]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    slurm: dict[str, SlurmSpec] = field(default_factory=dict)

    def cluster(self, name: str) -> SlurmSpec:
        if name not in self.slurm:
            raise InventoryError(f"unknown Slurm cluster {name!r} in {self.path}",
                                 hint="clusters in this inventory's slurm: " + (", ".join(self.slurm) or "none"))
        return self.slurm[name]

    def select(self, names) -> list[NodeSpec]:
        """Nodes named by ``--node`` values: a node, a group of ``groups:``, or ``all``; in order, once each."""
        out: dict[str, NodeSpec] = {}
        for name in names:
            if name == "all":
                members = tuple(self.nodes)
            elif name in self.groups:
                members = self.groups[name]
                if not members:
                    raise InventoryError(f"group {name!r} in {self.path} has no nodes",
                                         hint="add hosts to it, or choose another --node")
            elif name in self.nodes:
                members = (name,)
            else:
                raise InventoryError(
                    f"unknown node {name!r} in {self.path}",
                    hint="nodes: " + (", ".join(self.nodes) or "none") + "; groups: "
                         + (", ".join(self.groups) or "none") + "; or all")
            for m in members:
                out.setdefault(m, self.nodes[m])
        return list(out.values())

    def node(self, name: str) -> NodeSpec:
        try:
            return self.nodes[name]
        except KeyError:
            raise InventoryError(
                f"unknown node {name!r} in {self.path}",
                hint="nodes in this inventory: " + (", ".join(self.nodes) or "none"),
            ) from None


def container_from_value(path: str, node: str, name: str, value, where: str) -> ContainerSpec:
    """A container's options (inventory.yaml's, or an Ansible host's tune_remote_containers)."""
    if not NAME.match(name):
        raise InventoryError(f"{path}{where}: invalid container name {name!r}")
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InventoryError(f"{path}{where}: options of container {name!r} must be a mapping "
                             "({} = discover everything)")
    unknown = set(value) - CONTAINER_KEYS
    if unknown:
        raise InventoryError(f"{path}{where}: unknown option {sorted(unknown)[0]!r} for "
                             f"container {name!r}", hint="allowed: " + ", ".join(sorted(CONTAINER_KEYS)))
    env = value.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) for k in env):
        raise InventoryError(f"{path}{where}: env of container {name!r} must map names to values")
    return ContainerSpec(
        name=name,
        aiter_path=value.get("aiter_path"),
        env={k: str(v) for k, v in env.items()},
        python=str(value.get("python") or "python3"),
        user=value.get("user"),
        workdir=_workdir(value.get("workdir"), path, where, name),
    )


def _workdir(value, path, where, name):
    if value is None:
        return None
    if not isinstance(value, str) or not (value.startswith("/") or value.startswith("~")):
        raise InventoryError(f"{path}{where}: workdir of container {name!r} must be an absolute path",
                             hint="e.g. workdir: /scratch/tune-remote")
    return value
