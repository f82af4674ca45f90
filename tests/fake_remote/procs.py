"""Small /proc helpers: process tree, exact kills (by pid, after checking the command line)."""

from __future__ import annotations

import contextlib
import os
import signal
import time


def stat(pid: int) -> tuple[str, int] | None:
    """(state letter, ppid) of ``pid`` or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[1])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    st = stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [p.decode(errors="replace") for p in fh.read().split(b"\0") if p]
    except OSError:
        return []


def stale_daemons(names: tuple[str, ...], flag: str, root) -> list[tuple[int, list[str]]]:
    """(pid, argv) of each process named one of ``names`` whose ``flag`` argument lies under
    ``<root>/pytest-<pid>/`` of a pytest session that is gone (a test bed daemon it left behind)."""
    prefix, out = f"{root}/pytest-", []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        argv = cmdline(int(entry))
        if not argv or os.path.basename(argv[0]) not in names or flag not in argv[:-1]:
            continue
        path = argv[argv.index(flag) + 1]
        owner = path[len(prefix):].split("/", 1)[0] if path.startswith(prefix) else ""
        if owner.isdigit() and not alive(int(owner)):
            out.append((int(entry), argv))
    return out


def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = stat(int(entry))
        if st:
            kids.setdefault(st[1], []).append(int(entry))
    return kids


def descendants(pid: int) -> list[int]:
    kids = children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(pid: int, *, grace_s: float = 3.0, must_contain: str | None = None) -> list[int]:
    """TERM ``pid`` and all its descendants, wait, then KILL what is left. Reaps our own children.

    ``must_contain``: only act if that string is in the process's command line (guards PID reuse).
    Returns the pids signalled.
    """
    if not alive(pid):
        _reap(pid)
        return []
    if must_contain is not None and not any(must_contain in a for a in cmdline(pid)):
        return []
    victims = [pid] + descendants(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in reversed(victims):  # leaves first
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            _reap(pid)
            if not any(alive(p) for p in victims):
                return victims
            time.sleep(0.02)
    _reap(pid)
    return victims


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
