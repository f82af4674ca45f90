"""inventory.yaml -> the dataclasses of inventory_model.py. Errors name the file, line and key that is wrong."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InventoryError
from .inventory_model import (CONTAINER_KEYS, NAME, NODE_KEYS, SLURM_KEYS, ContainerSpec, Inventory,  # noqa: F401
                              NodeSpec, SlurmSpec, container_from_value)


class _YamlOnUse:
    """PyYAML, imported the first time a file is read (commands that read no inventory start faster)."""

    def __getattr__(self, name):
        import yaml as module
        globals()["yaml"] = module
        return getattr(module, name)


yaml = _YamlOnUse()


def resolve_inventory_path(cli_value: str | None) -> str:
    return cli_value or os.environ.get("TUNE_REMOTE_INVENTORY") or "inventory.yaml"


def _line(node: yaml.Node | None) -> str:
    return f":{node.start_mark.line + 1}" if node is not None else ""


def _mapping_items(node: yaml.Node) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    return {k.value: (k, v) for k, v in node.value}


def load_inventory(path: str) -> Inventory:
    p = Path(path)
    if not p.is_file():
        raise InventoryError(
            f"inventory file {path} not found",
            hint="pass --inventory FILE, set TUNE_REMOTE_INVENTORY, or create ./inventory.yaml",
        )
    text = p.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InventoryError(f"{where}: invalid YAML: {problem}",
                             hint="check indentation and quoting") from None
    if root is None or not isinstance(root, yaml.MappingNode):
        raise InventoryError(f"{path}: top level must be a mapping with a 'nodes:' key",
                             hint="see the commented example inventory.yaml")
    top = _mapping_items(root)
    if "nodes" not in top and "slurm" not in top:
        from .inventory_ansible import load_ansible, looks_like_ansible
        data = yaml.safe_load(text)
        if looks_like_ansible(data):
            return load_ansible(str(p), data)
    if "nodes" not in top and "slurm" in top:
        return Inventory(path=str(p), nodes={}, slurm=_slurm(path, top["slurm"]))
    if "nodes" not in top:
        raise InventoryError(f"{path}: missing 'nodes:'", hint="see the commented example inventory.yaml")
    unknown = set(top) - {"nodes", "groups", "slurm"}
    if unknown:
        key = sorted(unknown)[0]
        raise InventoryError(f"{path}{_line(top[key][0])}: unknown top-level key {key!r}",
                             hint="the top level holds 'nodes:', 'groups:' and 'slurm:'")
    nodes_node = top["nodes"][1]
    if not isinstance(nodes_node, yaml.MappingNode) or not nodes_node.value:
        raise InventoryError(f"{path}{_line(nodes_node)}: 'nodes' must map node names to settings",
                             hint="e.g. nodes: {mi355-07: {host: 10.1.2.7, containers: {aiter-dev: {}}}}")
    nodes: dict[str, NodeSpec] = {}
    for name, (knode, vnode) in _mapping_items(nodes_node).items():
        nodes[name] = _node(path, name, knode, vnode)
    groups = _groups(path, top["groups"], nodes) if "groups" in top else {}
    slurm = _slurm(path, top["slurm"]) if "slurm" in top else {}
    return Inventory(path=str(p), nodes=nodes, groups=groups, slurm=slurm)


def _slurm(path: str, item) -> dict[str, SlurmSpec]:
    knode, vnode = item
    if not isinstance(vnode, yaml.MappingNode) or not vnode.value:
        raise InventoryError(f"{path}{_line(knode)}: 'slurm' must map cluster names to settings",
                             hint="e.g. slurm: {mi355: {login: login01, container: aiter-dev}}")
    out = {}
    for name, (ck, cv) in _mapping_items(vnode).items():
        if not NAME.match(name) or not isinstance(cv, yaml.MappingNode):
            raise InventoryError(f"{path}{_line(ck)}: slurm cluster {name!r} must be a mapping with login: "
                                 "and container:")
        items = _mapping_items(cv)
        unknown = set(items) - set(SLURM_KEYS) - {"docker"}
        if unknown:
            key = sorted(unknown)[0]
            raise InventoryError(f"{path}{_line(items[key][0])}: unknown key {key!r} in slurm cluster {name!r}",
                                 hint="allowed: " + ", ".join(sorted([*SLURM_KEYS, "docker"])))
        for need in ("login", "container"):
            if need not in items:
                raise InventoryError(f"{path}{_line(ck)}: slurm cluster {name!r} has no {need}:",
                                     hint="login: the login node (host or ssh alias); container: the container "
                                          "on each compute node ('{node}' expands to its name)")
        kw = {k: _scalar(path, f"slurm.{name}.{k}", *items[k], kind) for k, kind in SLURM_KEYS.items() if k in items}
        if "docker" in items:
            kw["docker"] = _docker(path, items["docker"])
        out[name] = SlurmSpec(name=name, **kw)
    return out


def _docker(path: str, item) -> tuple[str, ...]:
    value = yaml.safe_load(yaml.serialize(item[1]))
    if isinstance(value, str):
        value = value.split()
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise InventoryError(f"{path}{_line(item[0])}: docker must be a command, e.g. 'docker' or 'sudo -n docker'")
    return tuple(value)


def _groups(path: str, item, nodes: dict[str, NodeSpec]) -> dict[str, tuple[str, ...]]:
    knode, vnode = item
    if not isinstance(vnode, yaml.MappingNode):
        raise InventoryError(f"{path}{_line(knode)}: 'groups' must map group names to lists of nodes",
                             hint="e.g. groups: {mi355: [mi355-07, mi355-08]}")
    out: dict[str, tuple[str, ...]] = {}
    for name, (gk, gv) in _mapping_items(vnode).items():
        if not NAME.match(name) or name == "all" or name in nodes:
            raise InventoryError(f"{path}{_line(gk)}: invalid group name {name!r}",
                                 hint="a group name is not 'all' and not the name of a node")
        if not isinstance(gv, yaml.SequenceNode) or not gv.value:
            raise InventoryError(f"{path}{_line(gk)}: group {name!r} must be a non-empty list of nodes",
                                 hint=f"e.g. {name}: [node-a, node-b]")
        members = []
        for m in gv.value:
            if not isinstance(m, yaml.ScalarNode) or m.value not in nodes:
                raise InventoryError(f"{path}{_line(m)}: group {name!r} names unknown node "
                                     f"{getattr(m, 'value', m)!r}",
                                     hint="nodes in this inventory: " + ", ".join(nodes))
            if m.value not in members:
                members.append(m.value)
        out[name] = tuple(members)
    return out


def _scalar(path: str, key: str, knode, vnode, kind):
    if not isinstance(vnode, yaml.ScalarNode):
        raise InventoryError(f"{path}{_line(knode)}: {key} must be a {kind.__name__}")
    value = yaml.safe_load(yaml.serialize(vnode))
    if kind is int and not (isinstance(value, int) and not isinstance(value, bool)):
        raise InventoryError(f"{path}{_line(knode)}: {key} must be an integer, got {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise InventoryError(f"{path}{_line(knode)}: {key} must be true or false, got {value!r}")
    if kind is str:
        if value is None or isinstance(value, (dict, list)):
            raise InventoryError(f"{path}{_line(knode)}: {key} must be a string")
        value = vnode.value      # as written: YAML 1.1 reads `time: 4:00:00` as 14400 and `user: 0123` as 123
    return value


def _node(path: str, name: str, knode, vnode) -> NodeSpec:
    if not NAME.match(name):
        raise InventoryError(f"{path}{_line(knode)}: invalid node name {name!r}",
                             hint="use letters, digits, '-', '_' and '.'")
    if vnode.tag == "tag:yaml.org,2002:null" or not isinstance(vnode, yaml.MappingNode):
        raise InventoryError(f"{path}{_line(knode)}: node {name!r} must be a mapping with 'containers:'")
    items = _mapping_items(vnode)
    unknown = set(items) - NODE_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise InventoryError(f"{path}{_line(items[key][0])}: unknown key {key!r} in node {name!r}",
                             hint="allowed: " + ", ".join(sorted(NODE_KEYS)))
    kw: dict = {}
    for key, kind in (("host", str), ("user", str), ("identity_file", str), ("ssh_config", str),
                      ("port", int), ("local", bool)):
        if key in items:
            kw[key] = _scalar(path, f"nodes.{name}.{key}", *items[key], kind)
    if "port" in kw and not 0 < kw["port"] < 65536:
        raise InventoryError(f"{path}{_line(items['port'][0])}: port {kw['port']} out of range")
    if "docker" in items:
        value = list(_docker(path, items["docker"]))
        kw["docker"] = tuple(value)
    if "containers" not in items:
        raise InventoryError(f"{path}{_line(knode)}: node {name!r} has no 'containers:'",
                             hint="list the containers to tune in, e.g. containers: {aiter-dev: {}}")
    ck, cv = items["containers"]
    if not isinstance(cv, yaml.MappingNode) or not cv.value:
        raise InventoryError(f"{path}{_line(ck)}: containers of {name!r} must map names to options",
                             hint="e.g. containers: {aiter-dev: {}}")
    containers = {}
    for cname, (cknode, cvnode) in _mapping_items(cv).items():
        containers[cname] = _container(path, name, cname, cknode, cvnode)
    return NodeSpec(name=name, host=kw.pop("host", name), containers=containers, **kw)


def _container(path: str, node: str, name: str, knode, vnode) -> ContainerSpec:
    value = yaml.load(yaml.serialize(vnode), Loader=_as_written_loader()) if vnode is not None else None
    return container_from_value(path, node, name, value, _line(knode))


def _as_written_loader():
    """A SafeLoader that keeps YAML 1.1's numbers, booleans and dates as written: a container's options are
    strings (`user: 1000:44` is a uid:gid, not the base-60 integer 60044; env `0123` is not octal 83)."""
    global _AS_WRITTEN
    if _AS_WRITTEN is None:
        class Loader(yaml.SafeLoader):
            pass
        for kind in ("int", "float", "bool", "timestamp"):
            Loader.add_constructor(f"tag:yaml.org,2002:{kind}", lambda loader, node: node.value)
        _AS_WRITTEN = Loader
    return _AS_WRITTEN


_AS_WRITTEN = None
