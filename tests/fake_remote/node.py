"""A test node: its own sshd on 127.0.0.1 (+ optional fault proxy) and containers reached by `docker exec`.

Layout of a node directory (``<STATE_ROOT>/<owner>/<node>`` for pytest, ``<STATE_ROOT>/<name>`` for `up`)::

    sshd_config  ssh_host_ed25519_key(.pub)  id_ed25519(.pub)  authorized_keys
    known_hosts  ssh_config  sshd.log  sshd.pid  node.json
    sims/<container>/          host side of the container's read-write sim tree (orchestrator.sim.install)
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import socket
import subprocess

from pathlib import Path
from typing import Iterable

from . import procs
from .provision import LABEL, NODE_LABEL, OWNER_LABEL, PREFIX, docker, find_sshd, poll, run, system_mounts
from .container import DEFAULT_TARGET_DIR, Container, ContainerSpec, _sim, _write  # noqa: F401
from .proxy import FaultProxy

SESSION_MARKER = "TRTEST_NODE"
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path, comment: str) -> str:
    for p in (path, path.with_name(path.name + ".pub")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    os.chmod(path, 0o600)
    return path.with_name(path.name + ".pub").read_text().strip()


class Node:
    """One simulated remote node. Create through ``TestBed.create_node`` (or the ``make_node`` fixture)."""

    def __init__(self, name: str, directory: Path, *, owner: str, user: str, image: str,
                 with_proxy: bool = True, daemon: bool = False):
        self.name = name
        self.dir = directory
        self.owner = owner
        self.user = user
        self.image = image
        self.host = "127.0.0.1"
        self.daemon = daemon
        self.with_proxy = with_proxy
        self.sshd_port: int | None = None
        self.sshd_pid: int | None = None
        self._sshd_proc: subprocess.Popen | None = None
        self.proxy: FaultProxy | None = None
        self.external_proxy_port: int | None = None   # `up --proxy`: proxy running in its own process
        self.external_proxy_pid: int | None = None
        self.startup_s: float | None = None
        self.containers: dict[str, Container] = {}
        self.identity_file = directory / "id_ed25519"
        self.host_key_file = directory / "ssh_host_ed25519_key"
        self.known_hosts_file = directory / "known_hosts"
        self.ssh_config_file = directory / "ssh_config"
        self.sshd_config_file = directory / "sshd_config"
        self.sshd_log = directory / "sshd.log"
        self.host_public_key = ""
        self.extra_env: dict[str, str] = {}   # more SetEnv for every session (e.g. SLURM_CONF on a login node)
        self.sshd_extra: list[str] = []       # more sshd_config lines (e.g. "RekeyLimit 1M"), from the next start

    # ---------------------------------------------------------------- set-up
    def setup_ssh(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.host_public_key = " ".join(_keygen(self.host_key_file, f"{self.name}-host").split()[:2])
        client_pub = _keygen(self.identity_file, f"{self.name}-client")
        # sshd reads authorized_keys with the user's rights: world-readable, StrictModes off (the dir is in /tmp)
        _write(self.dir / "authorized_keys", client_pub + "\n", 0o644)
        self.start_sshd()
        if self.with_proxy:
            self.proxy = FaultProxy(self.sshd_port).start()
        self._write_client_files()

    def _sshd_config_text(self, port: int) -> str:
        return f"""# tune-remote test bed node {self.name} (owner {self.owner})
Port {port}
ListenAddress 127.0.0.1
HostKey {self.host_key_file}
PidFile {self.dir / 'sshd.pid'}
AuthorizedKeysFile {self.dir / 'authorized_keys'}
AllowUsers {self.user}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
PermitUserEnvironment no
MaxStartups 200:30:400
MaxSessions 10
LoginGraceTime 30
LogLevel VERBOSE
Subsystem sftp internal-sftp
# marks every session process, so that teardown finds commands that outlived their connection
SetEnv {SESSION_MARKER}={self.name}{"".join(f" {k}={v}" for k, v in sorted(self.extra_env.items()))}
""" + "".join(line + "\n" for line in self.sshd_extra)

    def start_sshd(self, deadline_s: float = 15.0) -> None:
        sshd = find_sshd()
        last_err = ""
        for _attempt in range(5):
            port = self.sshd_port or _free_port()
            _write(self.sshd_config_file, self._sshd_config_text(port))
            run([sshd, "-t", "-f", str(self.sshd_config_file)])
            pidfile = self.dir / "sshd.pid"
            with contextlib.suppress(FileNotFoundError):
                pidfile.unlink()
            if self.daemon:
                cp = subprocess.run([sshd, "-f", str(self.sshd_config_file), "-E", str(self.sshd_log)],
                                    capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
                if cp.returncode != 0:
                    last_err = cp.stderr
                    continue
            else:
                log = open(self.sshd_log, "ab")
                self._sshd_proc = subprocess.Popen(
                    [sshd, "-D", "-f", str(self.sshd_config_file), "-E", str(self.sshd_log)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
                log.close()
            try:
                poll(lambda: self._sshd_ready(port, pidfile), timeout=deadline_s,
                     what=f"sshd of {self.name} on port {port}")
            except (TimeoutError, RuntimeError) as e:
                last_err = f"{e}: {self.sshd_log.read_text(errors='replace')[-1500:] if self.sshd_log.exists() else ''}"
                self.stop_sshd()
                if self.sshd_port:   # a fixed port (restart): do not hop
                    break
                continue
            self.sshd_port = port
            self.sshd_pid = int(pidfile.read_text().strip())
            return
        raise RuntimeError(f"could not start sshd for {self.name}: {last_err}")

    def _sshd_ready(self, port: int, pidfile: Path) -> bool:
        if self._sshd_proc is not None and self._sshd_proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {self._sshd_proc.returncode}")
        if not pidfile.exists():
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.settimeout(3)
                return s.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    def stop_sshd(self) -> None:
        """Stop the listener and every session it forked (exact: process tree of our sshd pid)."""
        pid = self.sshd_pid
        if pid is None and (self.dir / "sshd.pid").exists():
            with contextlib.suppress(ValueError, OSError):
                pid = int((self.dir / "sshd.pid").read_text().strip())
        if pid:
            procs.kill_tree(pid, must_contain="sshd")
        if self._sshd_proc is not None:
            with contextlib.suppress(Exception):
                self._sshd_proc.kill()
            with contextlib.suppress(Exception):
                self._sshd_proc.wait(5)
            self._sshd_proc = None
        self.sshd_pid = None

    def kill_session_leftovers(self) -> list[int]:
        """Kill host processes started through this node's sshd that outlived their session
        (e.g. a remote command whose connection was cut: without a pty nothing kills it)."""
        return kill_marked(self.name)

    def restart_sshd(self) -> None:
        """Node reboot-ish: drop every ssh session, come back on the same port with the same host key."""
        self.stop_sshd()
        self.start_sshd()

    def _write_client_files(self) -> None:
        lines = [f"[{self.host}]:{self.sshd_port} {self.host_public_key}"]
        for p in (self.proxy.port if self.proxy else None, self.external_proxy_port):
            if p:
                lines.append(f"[{self.host}]:{p} {self.host_public_key}")
        _write(self.known_hosts_file, "\n".join(lines) + "\n")
        _write(self.ssh_config_file, self.ssh_config())

    # ---------------------------------------------------------------- containers
    def add_container(self, spec=None) -> Container:
        cspec = ContainerSpec.coerce(spec)
        sim_spec = cspec.sim_spec()
        profile = getattr(sim_spec, "profile", "current")
        suffix = cspec.suffix
        if suffix is None:
            suffix = "aiter-dev" if not self.containers else f"aiter-{profile}"
        name = f"{self.name}-{suffix}"
        n = 2
        while name in self.containers:
            name = f"{self.name}-{suffix}-{n}"
            n += 1
        host_dir = self.dir / "sims" / name
        if host_dir.exists():
            shutil.rmtree(host_dir)
        host_dir.mkdir(parents=True)
        inst = _sim().install(host_dir, sim_spec, target_dir=cspec.target_dir)
        env = dict(getattr(inst, "env", {}) or {})
        path = env.get("PATH", "")
        if "/usr/bin" not in path.split(":"):
            env["PATH"] = (path + ":" if path else "") + STD_PATH
        env.update(cspec.env)
        argv = ["run", "-d", "--name", name, "--hostname", name[:63], "--network", "none",
                "--label", f"{LABEL}=1", "--label", f"{OWNER_LABEL}={self.owner}",
                "--label", f"{NODE_LABEL}={self.name}",
                "--label", f"tune-remote.testbed.profile={profile}",
                *system_mounts(), "-v", f"{host_dir}:{cspec.target_dir}:rw"]
        if cspec.init:
            argv.append("--init")
        for k, v in sorted(env.items()):
            argv += ["-e", f"{k}={v}"]
        argv += [self.image, "/bin/sleep", "infinity"]
        cid = docker(*argv).stdout.strip()
        c = Container(self, name, cid, sim_spec, inst, host_dir, cspec.target_dir, cspec.init)
        self.containers[name] = c
        return c

    def remove_containers(self) -> None:
        ids = [c.id for c in self.containers.values()]
        if ids:
            docker("rm", "-f", "-v", *ids, check=False, timeout=120)
        self.containers.clear()

    # ---------------------------------------------------------------- client side
    @property
    def port(self) -> int:
        """The port clients should use: the proxy's when there is one (so faults apply), else sshd's."""
        if self.proxy:
            return self.proxy.port
        return self.external_proxy_port or self.sshd_port

    @property
    def known_hosts_line(self) -> str:
        return f"[{self.host}]:{self.port} {self.host_public_key}"

    @property
    def alias(self) -> str:
        return self.name

    def ssh_config(self, alias: str | None = None, port: int | None = None) -> str:
        return (
            f"Host {alias or self.alias}\n"
            f"    HostName {self.host}\n"
            f"    Port {port or self.port}\n"
            f"    User {self.user}\n"
            f"    IdentityFile {self.identity_file}\n"
            f"    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {self.known_hosts_file}\n"
            f"    StrictHostKeyChecking yes\n"
            f"    BatchMode yes\n"
        )

    def ssh_argv(self, command: str | Iterable[str] | None = None, *, port: int | None = None,
                 known_hosts_file: str | os.PathLike | None = None, options: Iterable[str] = (),
                 connect_timeout: int = 10) -> list[str]:
        """argv for the system ssh client. ``command``: a shell string, or an argv list (shlex-joined)."""
        argv = ["ssh", "-F", "/dev/null", "-i", str(self.identity_file),
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={known_hosts_file or self.known_hosts_file}",
                "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes", "-o", f"ConnectTimeout={connect_timeout}",
                "-o", "LogLevel=ERROR", "-p", str(port or self.port)]
        for o in options:
            argv += ["-o", o]
        argv.append(f"{self.user}@{self.host}")
        if command is not None:
            argv.append(command if isinstance(command, str) else shlex.join(list(command)))
        return argv

    def ssh(self, command: str | Iterable[str], *, timeout: float = 60, input: str | None = None,
            check: bool = False, **kw) -> subprocess.CompletedProcess:
        argv = self.ssh_argv(command, **kw)
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                            stdin=None if input is not None else subprocess.DEVNULL)
        if check and cp.returncode != 0:
            raise RuntimeError(f"ssh failed rc={cp.returncode}: {argv[-1]}\n{cp.stderr}")
        return cp

    def ssh_popen(self, command: str | Iterable[str], *, stdin=subprocess.DEVNULL, **kw) -> subprocess.Popen:
        return subprocess.Popen(self.ssh_argv(command, **kw), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=stdin, text=True)

    def docker_exec_argv(self, container: str | Container, argv: Iterable[str], *, interactive=False) -> list[str]:
        name = container.name if isinstance(container, Container) else container
        return ["docker", "exec", *(["-i"] if interactive else []), name, *argv]

    def ssh_docker_exec(self, container: str | Container, argv: Iterable[str], **kw) -> subprocess.CompletedProcess:
        """``ssh node docker exec <container> argv...`` (the path the tool takes)."""
        interactive = kw.get("input") is not None
        return self.ssh(self.docker_exec_argv(container, list(argv), interactive=interactive), **kw)

    def container(self, name_or_suffix: str) -> Container:
        if name_or_suffix in self.containers:
            return self.containers[name_or_suffix]
        return self.containers[f"{self.name}-{name_or_suffix}"]

    def inventory(self, alias: str | None = None) -> dict:
        """An inventory.yaml-shaped dict (nodes: {alias: {...}}) pointing at this node."""
        return {"nodes": {alias or self.alias: {
            "host": self.host, "port": self.port, "user": self.user,
            "identity_file": str(self.identity_file), "ssh_config": str(self.ssh_config_file),
            "containers": {c.name: {} for c in self.containers.values()},
        }}}

    def to_json(self) -> dict:
        first = next(iter(self.containers.values()), None)
        return {
            "name": self.name,
            "host": self.host,
            "port": self.port,
            "sshd_port": self.sshd_port,
            "proxy_port": self.proxy.port if self.proxy else self.external_proxy_port,
            "proxy_pid": self.external_proxy_pid,
            "user": self.user,
            "identity_file": str(self.identity_file),
            "known_hosts_line": self.known_hosts_line,
            "known_hosts_file": str(self.known_hosts_file),
            "ssh_config": self.ssh_config(),
            "ssh_config_file": str(self.ssh_config_file),
            "ssh_command": shlex.join(self.ssh_argv()),
            "example": f"ssh -F {self.ssh_config_file} {self.alias} docker exec "
                       f"{first.name if first else '<container>'} pip show amd-aiter",
            "containers": [c.to_json() for c in self.containers.values()],
            "state_dir": str(self.dir),
            "sshd_pid": self.sshd_pid,
            "owner": self.owner,
            "image": self.image,
            "inventory": self.inventory(),
        }

    def save(self, path: Path | None = None) -> Path:
        return _write(path or (self.dir / "node.json"), json.dumps(self.to_json(), indent=2) + "\n")

    # ---------------------------------------------------------------- teardown
    def destroy(self, *, remove_dir: bool = True) -> None:
        if self.proxy:
            self.proxy.stop()
            self.proxy = None
        self.stop_sshd()
        self.kill_session_leftovers()
        self.remove_containers()
        if remove_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def marked_pids(node_name: str) -> list[int]:
    """Host processes carrying ``TRTEST_NODE=<node_name>`` (set by the node's sshd for every session)."""
    needle = f"{SESSION_MARKER}={node_name}".encode()
    out = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    out.append(int(entry))
        except OSError:
            continue
    return out


def kill_marked(node_name: str) -> list[int]:
    pids = marked_pids(node_name)
    for pid in pids:
        procs.kill_tree(pid, grace_s=2.0)
    return pids


def destroy_recorded(record: dict, *, remove_dir: bool = True) -> list[str]:
    """Remove what a node.json/state.json describes (sshd by pid+config path, containers by id+label)."""
    done = []
    state_dir = Path(record["state_dir"])
    pid = record.get("sshd_pid")
    if pid and procs.alive(pid) and any(str(state_dir) in a for a in procs.cmdline(pid)):
        procs.kill_tree(pid, must_contain="sshd")
        done.append(f"sshd pid {pid}")
    # also any proxy subprocess recorded by `up --proxy`
    ppid = record.get("proxy_pid")
    if ppid and procs.alive(ppid) and any("tests.fake_remote.proxy" in a for a in procs.cmdline(ppid)):
        procs.kill_tree(ppid)
        done.append(f"proxy pid {ppid}")
    # an sshd started with this node's config but not recorded (crash between start and save)
    cfg = str(state_dir / "sshd_config")
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            # sshd rewrites its title: "sshd: /usr/sbin/sshd -D -f <cfg> ... [listener] ..."
            line = " ".join(procs.cmdline(int(entry)))
            if "sshd" in line and f"-f {cfg} " in line + " " and procs.alive(int(entry)):
                if " -R" not in line:   # a listener, not a re-exec'd per-connection child
                    procs.kill_tree(int(entry), must_contain="sshd")
                    done.append(f"sshd pid {entry}")
    if kill_marked(record["name"]):
        done.append("session leftovers")
    cp = docker("ps", "-aq", "--no-trunc", "--filter", f"label={LABEL}=1",
                "--filter", f"label={OWNER_LABEL}={record['owner']}",
                "--filter", f"label={NODE_LABEL}={record['name']}", check=False)
    ids = cp.stdout.split()
    if ids:
        docker("rm", "-f", "-v", *ids, check=False, timeout=120)
        done.append(f"containers {len(ids)}")
    if remove_dir and state_dir.name and state_dir.exists():
        shutil.rmtree(state_dir, ignore_errors=True)
        done.append(f"dir {state_dir}")
    return done


def wait_port_closed(port: int, timeout: float = 5.0) -> None:
    def closed():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return False
        except OSError:
            return True
    poll(closed, timeout=timeout, what=f"port {port} to close")


__all__ = ["Container", "ContainerSpec", "Node", "PREFIX", "destroy_recorded", "wait_port_closed"]
