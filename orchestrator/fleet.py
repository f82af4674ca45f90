"""The nodes of a GPU kind (`recheck --all-nodes`, `audit --all-nodes`): every inventory node's GPU kind (gfx
and cu_num, what the team's rows are keyed by), probed by one discover round trip each, all at once, and the
nodes of the kinds the named nodes have. A node that cannot be probed is said, never guessed; the others go
on."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .errors import TuneRemoteError, UsageError


@dataclass
class Fleet:
    nodes: list = field(default_factory=list)      # node names of the kinds, in the inventory's order
    kinds: dict = field(default_factory=dict)      # node -> (gfx, cu_num), every node probed
    skipped: list = field(default_factory=list)    # {"node", "why"}: not probed (unreachable, no container)

    def kind_text(self) -> str:
        return ", ".join(sorted({f"{g}/cu_num={c}" for n, (g, c) in self.kinds.items() if n in self.nodes}))


def lacks(node, container: str | None) -> str | None:
    """Why ``node`` is not one to recheck or audit in ``container`` (None: it has it, or none was named)."""
    if container is None or container in node.containers or node.any_container:
        return None
    return f"no container {container} (its containers: {', '.join(node.containers) or 'none'})"


def probe_container(node, container: str | None) -> str:
    """The container a node's GPU kind is probed in: ``container`` where the node has it, else its only one
    (every container of a node sees the node's GPUs)."""
    if container and (container in node.containers or node.any_container):
        return container
    if node.containers:
        return next(iter(node.containers))
    raise UsageError(f"node {node.name!r} names no container", hint="add --container NAME")


def _kind(inventory, name: str, container: str | None, accept_new: bool):
    from .campaign.targets import InventoryRunner, TargetRef
    from .session import NodeSession, Settings
    from .ui import Ui
    runner = InventoryRunner(inventory, accept_new)
    target = None
    try:
        target = runner.open(TargetRef(name, probe_container(inventory.node(name), container)))
        target.connect()
        session = NodeSession(target, Settings(), Ui(quiet=True), node=name)
        facts = session.call("discover", session.discover_request())     # its answer as is: any AITER's
        gfx, cu = facts.get("gfx"), facts.get("cu_num")
        if gfx is None or not isinstance(cu, int):
            return None, f"no GPU kind found on {name} (gfx {gfx}, cu_num {cu})"
        return (gfx, cu), None
    except TuneRemoteError as exc:
        return None, exc
    finally:
        if target is not None:
            target.close()
        runner.close()


def same_kind(inventory, named, container: str | None = None, accept_new_host_key: bool = False) -> Fleet:
    """The inventory's nodes of the GPU kinds of ``named`` (``--node`` values: nodes, groups or ``all``).
    A named node that cannot be probed stops it (its own error) only when no named node could be."""
    wanted = [n.name for n in inventory.select(named)]
    names = list(inventory.nodes)
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(names)))) as pool:
        probed = dict(zip(names, pool.map(lambda n: _kind(inventory, n, container, accept_new_host_key), names)))
    out = Fleet()
    errors = []
    for n in names:
        kind, why = probed[n]
        if kind is not None:
            out.kinds[n] = kind
            continue
        text = why.one_line() if isinstance(why, TuneRemoteError) else why
        out.skipped.append({"node": n, "why": f"GPU kind unknown: {text}"})
        if n in wanted:
            errors.append(why)
    kinds = {out.kinds[n] for n in wanted if n in out.kinds}
    if not kinds:
        first = errors[0]
        raise first if isinstance(first, TuneRemoteError) else UsageError(first, hint="check the node")
    out.nodes = [n for n in names if out.kinds.get(n) in kinds]
    return out
