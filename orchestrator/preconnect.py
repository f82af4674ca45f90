"""Connect to a job's node and start its node helper in a thread while the CLI checks the inputs and makes
the job (issue 26: ~0.25 s of network and node-side start-up that the checks used to wait in front of).

The SSH stack is imported by the caller's thread first (an import holds the GIL: two importing threads only
take turns), so the thread mostly waits on the network, and the caller's checks run meanwhile. Nothing of
the job is on the node before ``target()`` returns: a connection and a helper that answered hello (the
discover step sends the first request). A check that fails abandons it: the thread closes the connection
once it is done, and the one-line error is out at once, never behind a connect timeout."""

from __future__ import annotations

import os
import threading

from .context import Target
from .errors import TuneRemoteError
from .inventory import ContainerSpec, NodeSpec
from .parsing.sources import flag_values


class Preconnect:
    def __init__(self, node: NodeSpec, container: ContainerSpec, accept_new_host_key: bool = False):
        self._error: BaseException | None = None
        self._abandoned = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        try:
            self._target = Target(node, container, accept_new_host_key=accept_new_host_key)
        except TuneRemoteError as exc:      # e.g. its ssh_config: said by target(), after the inputs' checks
            self._error = exc
            return
        self._thread = threading.Thread(target=self._run, name="tune-remote-connect", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._target.connect()
        except BaseException as exc:        # the caller gets it from target(), as from Target.connect()
            self._error = exc
        else:
            try:
                self._target.helper.start()
            except TuneRemoteError:          # the first request starts it again and says what is wrong
                pass
        with self._lock:
            if self._abandoned:
                self._target.close()

    def target(self) -> Target:
        """The connected target (its helper started where it could be); raises what connecting raised."""
        if self._thread is None:
            raise self._error
        self._thread.join()
        if self._error is not None:
            self._target.close()
            raise self._error
        return self._target

    def abandon(self) -> None:
        """The job is not made: the connection is closed (now, or by the thread once it is done)."""
        with self._lock:
            self._abandoned = True
            if self._thread is not None and not self._thread.is_alive():
                self._target.close()


# ---- speculative: from the command line, before the CLI's own modules are imported --------------------------
# The `tune-remote` executable imports its command modules (~0.15 s) before it parses the command line, and the
# SSH stack (~0.15 s) only when `run` makes its target: both CPU, in turn, before the first byte goes out. For
# a plain single-target `run` (one --node, one --variant, no --slurm/--dry-run/--help), the inventory is read
# and the SSH stack imported first, and the connection and the helper start while the command modules import.
# `run` claims it when its own parsing names the same inventory, node, container and host-key choice; else it
# is abandoned unused.

_GLOBAL_VALUE = ("--inventory", "--workspace")
_GLOBAL_FLAGS = ("-q", "--quiet", "--json")
_speculation: dict = {}


def single_run(argv: list[str]) -> dict | None:
    """The target of ``argv`` when it is a plain single-target run, else None (anything unsure: None)."""
    if "run" not in argv:
        return None
    i = argv.index("run")
    pre, args = argv[:i], argv[i + 1:]
    j = 0
    while j < len(pre):                      # only the group's own options before `run`
        if pre[j] in _GLOBAL_VALUE and j + 1 < len(pre):
            j += 2
        elif pre[j] in _GLOBAL_FLAGS or pre[j].split("=", 1)[0] in _GLOBAL_VALUE:
            j += 1
        else:
            return None
    if any(a in ("-h", "--help", "--dry-run") or a.startswith("--slurm") for a in args):
        return None
    nodes, containers, variants = (flag_values(args, flag) for flag in ("--node", "--container", "--variant"))
    if len(nodes) != 1 or "," in nodes[0] or len(containers) > 1 or len(variants) != 1 \
            or "," in variants[0] or variants[0].strip() in ("", "auto"):
        return None
    inventory = flag_values(pre, "--inventory")
    return {"inventory": inventory[-1] if inventory else None, "node": nodes[0],
            "container": containers[0] if containers else None, "accept": "--accept-new-host-key" in args}


def speculate(argv: list[str]) -> None:
    """Start connecting for ``argv`` when it is a plain single-target run (see above). The inventory is read
    and the SSH stack imported here, in the caller's thread, before the command modules: two importing threads
    would only take turns (the GIL), and the network would start no earlier."""
    want = single_run(argv)
    if want is None:
        return
    try:
        from .inventory import load_inventory, resolve_inventory_path
        path = resolve_inventory_path(want["inventory"])
        node = load_inventory(path).node(want["node"])
        name = want["container"] or (next(iter(node.containers)) if len(node.containers) == 1 else None)
        if name is not None:
            _speculation.update(pre=Preconnect(node, node.container(name), want["accept"]),
                                key=(os.path.abspath(path), node.name, name, want["accept"]))
    except Exception:  # noqa: BLE001 - `run` reads the inventory itself and says what is wrong
        _speculation.clear()


def claim(inventory_path: str, node: NodeSpec, container: ContainerSpec, accept: bool) -> Preconnect | None:
    """The speculative connection when it is for this target, else None (and it is abandoned)."""
    pre, key = _speculation.pop("pre", None), _speculation.pop("key", None)
    if pre is None:
        return None
    if key == (os.path.abspath(inventory_path), node.name, container.name, accept):
        return pre
    pre.abandon()
    return None
