"""A test node's container: the simulated AITER in it (orchestrator.sim), its fault controls, and the few
docker operations the tests use to be unkind to it (restart, pause). Reached by `docker exec` only."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from . import bigfiles
from .provision import docker, find_docker, poll

if TYPE_CHECKING:
    from .node import Node

DEFAULT_TARGET_DIR = "/opt/aiter-sim"


def _sim():
    """Import orchestrator.sim lazily (it is built in parallel; tests skip/fail without it)."""
    from orchestrator import sim  # noqa: PLC0415
    return sim


@dataclass
class ContainerSpec:
    """What to put in one container. ``sim`` is an ``orchestrator.sim.SimSpec`` (or kwargs for it)."""

    sim: Any = None
    suffix: str | None = None           # container name = "<node>-<suffix>"
    target_dir: str = DEFAULT_TARGET_DIR
    env: dict[str, str] = field(default_factory=dict)  # extra env on top of inst.env
    init: bool = False                  # docker run --init (default False: PID 1 = sleep, zombies)

    @classmethod
    def coerce(cls, value) -> "ContainerSpec":
        if isinstance(value, ContainerSpec):
            return value
        if value is None:
            return cls()
        if isinstance(value, str):           # "current" / "legacy"
            return cls(sim={"profile": value})
        if isinstance(value, dict):
            return cls(sim=dict(value))
        return cls(sim=value)                # a SimSpec

    def sim_spec(self):
        sim = _sim()
        if self.sim is None:
            return sim.SimSpec()
        if isinstance(self.sim, dict):
            return sim.SimSpec(**self.sim)
        return self.sim


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    tmp.replace(path)
    return path


class Container:
    """One container of a node (created by ``Node.add_container``)."""

    def __init__(self, node: "Node", name: str, cid: str, spec, inst, host_dir: Path, target_dir: str,
                 init: bool):
        self.node = node
        self.name = name
        self.id = cid
        self.spec = spec
        self.inst = inst
        self.host_dir = host_dir
        self.target_dir = target_dir
        self.init = init

    # ---------------------------------------------------------------- facts
    @property
    def profile(self) -> str:
        return getattr(self.spec, "profile", "current")

    @property
    def install_mode(self) -> str:
        return getattr(self.spec, "install_mode", "develop")

    @property
    def aiter_root(self) -> str:
        return str(self.inst.aiter_root)

    @property
    def env(self) -> dict[str, str]:
        return dict(self.inst.env)

    def host_path(self, container_path: str | os.PathLike) -> Path:
        """Host path of a file under the sim tree (the bind-mounted target dir)."""
        rel = PurePosixPath(str(container_path)).relative_to(self.target_dir)
        return self.host_dir / rel

    @property
    def control_host_path(self) -> Path:
        return self.host_path(self.inst.control_path)

    @property
    def launches_host_path(self) -> Path:
        return self.host_path(self.inst.launches_path)

    @property
    def logs_host_dir(self) -> Path:
        return self.host_path(self.inst.logs_dir)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "id": self.id[:12],
            "profile": self.profile,
            "install_mode": self.install_mode,
            "pip_name": getattr(self.spec, "pip_name", None) or "amd-aiter",
            "aiter_root": self.aiter_root,
            "target_dir": self.target_dir,
            "host_dir": str(self.host_dir),
            "logs_dir": str(self.inst.logs_dir),
            "control_path": str(self.inst.control_path),
            "control_host_path": str(self.control_host_path),
            "launches_path": str(self.inst.launches_path),
            "launches_host_path": str(self.launches_host_path),
            "env": self.env,
        }

    # ---------------------------------------------------------------- local (not through ssh) helpers
    def exec(self, *argv: str, check: bool = True, timeout: float = 60, input: str | None = None,
             user: str | None = None) -> subprocess.CompletedProcess:
        """``docker exec`` from the test process (no ssh): for set-up and assertions, not for the tool."""
        args = ["exec"] + (["-i"] if input is not None else []) + (["-u", user] if user else [])
        return docker(*args, self.name, *argv, check=check, timeout=timeout, input=input)

    def sh(self, script: str, **kw) -> subprocess.CompletedProcess:
        return self.exec("sh", "-c", script, **kw)

    def state(self) -> dict:
        cp = docker("inspect", "--format", "{{json .State}}", self.id, check=False)
        return json.loads(cp.stdout) if cp.returncode == 0 else {}

    def processes(self) -> list[dict]:
        """[{pid, ppid, state, comm, args}] from the container's /proc (container PID namespace)."""
        script = (
            "for d in /proc/[0-9]*; do "
            "s=$(cat $d/stat 2>/dev/null) || continue; "
            "a=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null); "
            "printf '%s\\t%s\\n' \"$s\" \"$a\"; done"
        )
        out = []
        for line in self.sh(script).stdout.splitlines():
            stat, _, args = line.partition("\t")
            try:
                pid = int(stat.split(" ", 1)[0])
                comm = stat[stat.index("(") + 1: stat.rindex(")")]
                rest = stat[stat.rindex(")") + 2:].split()
            except ValueError:
                continue
            out.append({"pid": pid, "ppid": int(rest[1]), "state": rest[0], "comm": comm, "args": args.strip()})
        return out

    def zombies(self) -> list[dict]:
        return [p for p in self.processes() if p["state"] == "Z"]

    # ---------------------------------------------------------------- faults
    def restart(self, timeout: float = 30) -> dict:
        """``docker restart`` (every process in it dies; files in the sim tree and /tmp survive)."""
        before = self.state().get("StartedAt")
        docker("restart", "-t", "0", self.id, timeout=timeout)
        poll(lambda: self.state().get("Running") and self.state().get("StartedAt") != before,
             timeout=timeout, what=f"{self.name} to run again")
        return self.state()

    def pause(self) -> None:
        """``docker pause``: every process in the container is frozen; ``docker exec`` is refused."""
        docker("pause", self.id)

    def unpause(self, timeout: float = 30) -> None:
        """``docker unpause``. A ``docker exec`` that raced the pause has its ``runc init`` frozen inside the
        container (D state) while runc holds the container's lock, so ``docker unpause`` waits forever
        (Docker 20.10 / runc 1.1). Then: thaw the freezer cgroup (the exec finishes and lets go), which
        makes docker's pending resume fail ("not paused"); freeze it again and unpause through docker."""
        exe = find_docker()
        proc = subprocess.Popen([exe, "unpause", self.id], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._freeze(False)
            proc.wait(timeout=timeout)
        if self.state().get("Paused"):
            self._freeze(True)
            docker("unpause", self.id, timeout=timeout)
        poll(lambda: not self.state().get("Paused"), timeout=timeout, what=f"{self.name} to run again")

    def _freeze(self, frozen: bool) -> None:
        """Freeze or thaw the container's cgroup directly (cgroup v1 freezer, or v2 cgroup.freeze)."""
        cg = Path("/sys/fs/cgroup")
        v1 = cg / "freezer/docker" / self.id / "freezer.state"
        if v1.exists():
            v1.write_text("FROZEN" if frozen else "THAWED")
            poll(lambda: v1.read_text().strip() == ("FROZEN" if frozen else "THAWED"), timeout=10,
                 what="the freezer cgroup")
            return
        for d in (cg / "docker" / self.id, cg / f"system.slice/docker-{self.id}.scope"):
            if (d / "cgroup.freeze").exists():
                (d / "cgroup.freeze").write_text("1" if frozen else "0")
                want = f"frozen {1 if frozen else 0}"
                poll(lambda: want in (d / "cgroup.events").read_text(), timeout=10, what="the cgroup to freeze")
                return

    def read_control(self) -> dict:
        try:
            return json.loads(self.control_host_path.read_text())
        except (OSError, ValueError):
            return {}

    def set_control(self, **fields) -> dict:
        """Merge ``fields`` into the sim tuner's control file (re-read by the tuner per shape)."""
        data = {"seconds_per_shape": 0.0, "crash_after_shapes": None, "hang_after_shapes": None}
        data.update(self.read_control())
        data.update(fields)
        self.control_host_path.parent.mkdir(parents=True, exist_ok=True)
        _write(self.control_host_path, json.dumps(data, indent=2) + "\n")
        return data

    def crash_after(self, shapes: int, *, once: bool = False) -> dict:
        """The next tune run dies (exit 139, GPU memory-access-fault line) after ``shapes`` shapes."""
        return self.set_control(crash_after_shapes=int(shapes), hang_after_shapes=None, fault_once=once)

    def hang_after(self, shapes: int, *, once: bool = False) -> dict:
        """The next tune run sleeps forever after ``shapes`` shapes (``once``: the fault clears itself)."""
        return self.set_control(hang_after_shapes=int(shapes), crash_after_shapes=None, fault_once=once)

    def torn_write_after(self, shapes: int, *, once: bool = False) -> dict:
        """The tuner's in-place table rewrite after ``shapes`` shapes stops half way (flushed) and the tuner
        hangs there: whatever kills it now (watchdog, cancel) leaves a truncated table, as with AITER."""
        return self.set_control(torn_write_after_shapes=int(shapes), fault_once=once)

    def slow(self, seconds_per_shape: float) -> dict:
        return self.set_control(seconds_per_shape=float(seconds_per_shape))

    def reset_control(self) -> dict:
        return self.set_control(seconds_per_shape=getattr(self.spec, "seconds_per_shape", 0.0),
                                crash_after_shapes=None, hang_after_shapes=None, torn_write_after_shapes=None,
                                fault_once=False)

    def launches(self) -> list[dict]:
        """One record per tune-script start (the sim's launch counter)."""
        return _jsonl(self.launches_host_path)

    def stalls(self) -> list[dict]:
        """One record per hang fault that fired (a tuner that now sleeps forever, still alive)."""
        return _jsonl(self.launches_host_path.with_name("stalls.jsonl"))

    def wait_stalled(self, count: int = 1, timeout: float = 60) -> None:
        """Until `count` tuners have reached their hang fault: only then may the control be reset."""
        poll(lambda: len(self.stalls()) >= count, timeout=timeout, what="the tuner to reach its hang fault")

    def fill_log(self, size_bytes: int, name: str = "server-big.log", *, exact: bool = False):
        """Write a big AITER-like server log into the sim's logs dir (host side, at test time).

        Default: ``bigfiles.write_log`` -- exactly ``size_bytes`` bytes at disk speed (~450 MB/s here),
        returns ``bigfiles.LogFill`` (a few repeated shapes, line and miss counts).
        ``exact=True``: ``orchestrator.sim.logs.write_large_log`` (>= size_bytes, ~65 MB/s) whose
        ``SimLog.misses`` lists every distinct miss shape, for parser-correctness checks.
        The container-side path is in ``.container_path`` in both cases.
        """
        host = self.logs_host_dir / name
        cpath = str(PurePosixPath(str(self.inst.logs_dir)) / name)
        if exact:
            from orchestrator.sim.logs import write_large_log  # noqa: PLC0415
            result = write_large_log(host, size_bytes)
        else:
            result = bigfiles.write_log(host, size_bytes)
        result.container_path = cpath
        return result

    def serve_variant(self, name: str, facts: dict) -> None:
        """Make the sim serve a variant its tree has no file for (host side, at test time): the generic tuner
        and op_test at the entry's paths, its tables and its facts (``orchestrator.sim.fromfacts``)."""
        from orchestrator.sim.fromfacts import serve_variant  # noqa: PLC0415
        serve_variant(self.inst, name, facts)

    def tune_script(self, rel: str = "csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py") -> str:
        """Container path of a sim script (csrc/... lives under the meta root in install mode)."""
        script = getattr(self.inst, "script", None)
        return script(rel) if script else f"{self.aiter_root}/{rel}"


def _jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file the sim appends to (missing file: none; a torn line: skipped)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out
