"""An Ansible YAML inventory read as tune-remote's inventory (issue 10: a team keeps one list of its nodes).

    all:
      vars: {ansible_user: amd}
      children:
        mi355:
          hosts:
            mi355-[07:08]:                         # Ansible's host ranges: 07 and 08
              tune_remote_containers: [aiter-dev]  # or a name, or {aiter-dev: {env: {...}}} (inventory.yaml's options)
          vars: {ansible_ssh_private_key_file: ~/.ssh/id_mi355}
        gpu-lab:
          hosts:
            lab1: {ansible_host: 10.1.2.9, ansible_port: 2222}

Hosts become nodes: ``ansible_host`` (else the name), ``ansible_port``, ``ansible_user``,
``ansible_ssh_private_key_file`` (and the older ``ansible_ssh_host/_port/_user``), ``tune_remote_containers``,
``tune_remote_docker`` (e.g. "sudo -n docker"), ``tune_remote_ssh_config`` (an ssh_config file, as a node's
``ssh_config:`` in inventory.yaml; the user's ~/.ssh/config applies otherwise). Variables follow Ansible's order for one file: a group's vars
apply to every host below it, a child group's override its parent's, host vars override both. Every group
(``all`` and ``ungrouped`` excepted: they are Ansible's own, and ``--node all`` means every host anyway)
becomes a group of the hosts below it. A host without ``tune_remote_containers`` takes its container from
``--container``. Whatever else the file holds (other variables) is ignored.
"""

from __future__ import annotations

import re

from .errors import InventoryError
from .inventory_model import NAME, ContainerSpec, Inventory, NodeSpec, container_from_value

GROUP_KEYS = {"hosts", "children", "vars"}
_RANGE = re.compile(r"\[([0-9]+|[a-z]):([0-9]+|[a-z])(?::([0-9]+))?\]")


def looks_like_ansible(data) -> bool:
    """A mapping of group names to {hosts, children, vars} (and no tune-remote 'nodes:')."""
    return (isinstance(data, dict) and "nodes" not in data and bool(data)
            and all(isinstance(v, dict) and v and set(v) <= GROUP_KEYS for v in data.values()))


def expand(pattern: str) -> list[str]:
    """Ansible's host ranges: 'mi355-[07:09]' -> mi355-07, mi355-08, mi355-09; '[a:c]', '[0:10:5]'."""
    m = _RANGE.search(pattern)
    if not m:
        return [pattern]
    lo, hi, step = m.group(1), m.group(2), int(m.group(3) or 1)
    head, tail = pattern[:m.start()], pattern[m.end():]
    if lo.isdigit() and hi.isdigit():
        width = len(lo) if lo.startswith("0") else 0
        items = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1, step)]
    elif lo.isalpha() and hi.isalpha():
        items = [chr(c) for c in range(ord(lo), ord(hi) + 1, step)]
    else:
        raise InventoryError(f"invalid host range {m.group(0)!r} in {pattern!r}", hint="e.g. node-[01:08]")
    return [h for item in items for h in expand(head + item + tail)]


def load_ansible(path: str, data: dict) -> Inventory:
    host_vars: dict[str, dict] = {}                               # the host's own vars, merged in order
    seen_in: dict[str, list[tuple[int, str, dict]]] = {}          # (depth, group, its vars with its parents')
    groups: dict[str, list[str]] = {}

    def walk(name: str, group, inherited: dict, trail: tuple) -> list[str]:
        if name in trail:
            raise InventoryError(f"{path}: group {name!r} contains itself", hint="check its children:")
        if group is None:
            group = {}
        if not isinstance(group, dict) or set(group) - GROUP_KEYS:
            bad = sorted(set(group) - GROUP_KEYS)[0] if isinstance(group, dict) else type(group).__name__
            raise InventoryError(f"{path}: group {name!r}: unexpected {bad!r}",
                                 hint="an Ansible group holds hosts:, children: and vars:")
        gvars = {**inherited, **_mapping(path, f"group {name!r} vars", group.get("vars"))}
        members: list[str] = []
        for pattern, hvars in _mapping(path, f"group {name!r} hosts", group.get("hosts")).items():
            for host in expand(str(pattern)):
                host_vars[host] = {**host_vars.get(host, {}), **_mapping(path, f"host {host!r}", hvars)}
                seen_in.setdefault(host, []).append((len(trail), name, gvars))
                members.append(host)
        for child, cdef in _mapping(path, f"group {name!r} children", group.get("children")).items():
            members.extend(walk(str(child), cdef, gvars, trail + (name,)))
        members = list(dict.fromkeys(members))
        if name not in ("all", "ungrouped"):
            groups[name] = list(dict.fromkeys(groups.get(name, []) + members))
        return members

    for name, group in data.items():
        walk(str(name), group, {}, ())
    if not host_vars:
        raise InventoryError(f"{path}: the Ansible inventory lists no hosts", hint="add hosts: under a group")
    nodes = {}
    for host, own in host_vars.items():
        merged: dict = {}
        for _, _, gvars in sorted(seen_in[host], key=lambda t: (t[0], t[1])):   # deeper groups win, then host
            merged.update(gvars)
        nodes[host] = _node(path, host, {**merged, **own})
    clash = [g for g in groups if g in nodes]
    if clash:
        raise InventoryError(f"{path}: group {clash[0]!r} has the name of a host",
                             hint="tune-remote's --node takes both; rename one of them")
    return Inventory(path=path, nodes=nodes, groups={g: tuple(m) for g, m in groups.items()})


ALIASES = {"ansible_ssh_host": "ansible_host", "ansible_ssh_port": "ansible_port", "ansible_ssh_user": "ansible_user"}


def _mapping(path: str, what: str, value) -> dict:
    """A mapping of hosts, children or vars; the older ansible_ssh_* names read as their new names at the
    level they are set (so a host's ansible_ssh_user beats a group's ansible_user)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InventoryError(f"{path}: {what} must be a mapping", hint="see docs: an Ansible YAML inventory")
    out = dict(value)
    for old, new in ALIASES.items():
        if old in out:
            out.setdefault(new, out.pop(old))
    return out


def _node(path: str, host: str, v: dict) -> NodeSpec:
    if not NAME.match(host):
        raise InventoryError(f"{path}: invalid host name {host!r}", hint="use letters, digits, '-', '_' and '.'")
    port = v.get("ansible_port")
    try:
        port = int(port) if port is not None else None
    except (TypeError, ValueError):
        raise InventoryError(f"{path}: host {host!r}: ansible_port {port!r} is not a number") from None
    if port is not None and not 0 < port < 65536:
        raise InventoryError(f"{path}: host {host!r}: ansible_port {port} out of range")
    docker = v.get("tune_remote_docker") or "docker"
    if not isinstance(docker, str) or not docker.split():
        raise InventoryError(f"{path}: host {host!r}: tune_remote_docker must be a command, e.g. 'sudo -n docker'")
    return NodeSpec(name=host, host=str(v.get("ansible_host") or host), port=port, user=_str(v.get("ansible_user")),
                    identity_file=_str(v.get("ansible_ssh_private_key_file")),
                    ssh_config=_str(v.get("tune_remote_ssh_config")),
                    docker=tuple(docker.split()), containers=_containers(path, host, v.get("tune_remote_containers")),
                    any_container="tune_remote_containers" not in v)


def _containers(path: str, host: str, value) -> dict[str, ContainerSpec]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = [c.strip() for c in value.split(",") if c.strip()]
    if isinstance(value, list):
        value = {str(c): {} for c in value}
    if not isinstance(value, dict) or not value:
        raise InventoryError(f"{path}: host {host!r}: tune_remote_containers must name containers",
                             hint="e.g. tune_remote_containers: [aiter-dev]")
    return {str(name): container_from_value(path, host, str(name), opts, "") for name, opts in value.items()}


def _str(value) -> str | None:
    return None if value is None else str(value)
