"""A watch's state in ``<ws>/watch/<NAME>/``: ``offsets.json`` (where each log was read to, the facts each
target had, the misses counted so far: one file, replaced whole by rename, so a killed watch either committed
a cycle's reading or did not), ``ledger.jsonl`` (one JSON object per line, ``ts`` and ``event``: what
happened, appended and flushed as it happens) and ``lock`` (an ``flock`` held while a watch of NAME runs)."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from ..errors import JobError, UsageError
from ..state import atomic_write, hold_lock

EVENTS = ("cycle", "seen", "job", "promoted", "skipped", "upgrade")
OPEN_STATES = ("running",)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def default_name(nodes, containers) -> str:
    """NAME from the nodes and containers, e.g. ``node1-node2-vllm``."""
    text = "-".join(list(dict.fromkeys(nodes)) + sorted(set(containers)))
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")[:100] or "watch"


def check_name(name: str) -> str:
    if not _NAME_RE.match(name or ""):
        raise UsageError(f"--name {name!r} is not a usable watch name",
                         hint="letters, digits, '.', '_' and '-' (up to 100), starting with a letter or digit")
    return name


def shape_key(variant: str, shape: dict) -> str:
    """One shape of one variant as text: the ledger's and the offsets' key."""
    return variant + " " + json.dumps({k: v for k, v in shape.items() if k != "_meta"}, sort_keys=True)


class WatchStore:
    def __init__(self, workspace_root: Path, name: str):
        self.name = check_name(name)
        self.dir = Path(workspace_root) / "watch" / name
        self.offsets_path = self.dir / "offsets.json"
        self.ledger_path = self.dir / "ledger.jsonl"
        self._lock_fd: int | None = None

    # -- lock ------------------------------------------------------------------------------------
    def lock(self, command: str = "watch") -> None:
        """Two watches of one NAME never run at once: the second exits 1 naming the first."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, who = hold_lock(self.dir / "lock", command)
        if fd is None:
            raise JobError(f"watch {self.name} is already running (pid {who.get('pid', '?')}, since "
                           f"{time.strftime('%H:%M:%S', time.localtime(who.get('since', 0)))})",
                           hint=f"its ledger: {self.ledger_path}; stop that process first (SIGTERM), or "
                                "give this one another --name")
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- offsets.json ------------------------------------------------------------------------------
    def load_offsets(self) -> dict:
        """``{"cycle": n, "targets": {label: {"logs": {path: {inode, offset, size}}, "facts": {..}}},
        "seen": {shape key: {"variant", "shape", "count", "first"}}}``."""
        try:
            data = json.loads(self.offsets_path.read_text())
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as exc:
            raise JobError(f"{self.offsets_path} cannot be read: {exc}",
                           hint="move it aside to start this watch from the logs' beginning") from None
        data.setdefault("cycle", 0)
        data.setdefault("targets", {})
        data.setdefault("seen", {})
        return data

    def save_offsets(self, data: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.offsets_path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())

    # -- ledger.jsonl --------------------------------------------------------------------------------
    def record(self, event: str, **fields) -> dict:
        if event not in EVENTS:
            raise ValueError(f"unknown ledger event {event!r}")
        entry = {"ts": round(time.time(), 3), "event": event, **fields}
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.ledger_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return entry

    def events(self) -> list[dict]:
        """The ledger's events; a line torn by a crash (no newline, bad JSON) is left out."""
        try:
            text = self.ledger_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event"):
                out.append(entry)
        return out

    # -- what the ledger says ------------------------------------------------------------------------
    def open_jobs(self) -> list[dict]:
        """The start events of jobs a watch launched and never saw end (killed or stopped meanwhile)."""
        started: dict[str, dict] = {}
        for e in self.events():
            if e["event"] != "job" or not e.get("job_id"):
                continue
            if e.get("state") in OPEN_STATES:
                started.setdefault(e["job_id"], e)
            else:
                started.pop(e["job_id"], None)
        return list(started.values())

    def tried(self) -> set[str]:
        """Shape keys a finished job of this watch tuned (found a kernel or not), and shapes a live table
        was found to serve: not tuned again."""
        out: set[str] = set()
        for e in self.events():
            if e["event"] == "job" and e.get("state") not in OPEN_STATES:
                out.update(shape_key(e.get("variant", ""), s) for s in e.get("tuned") or [])
            elif e["event"] == "skipped":      # a live table serves them already
                out.update(shape_key(e.get("variant", ""), s) for s in e.get("served") or [])
        return out
