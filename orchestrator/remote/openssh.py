"""The user's own OpenSSH ControlMaster, where their ssh_config gives the node one (``ControlPath``).

An engineer who set ``ControlMaster auto`` / ``ControlPersist`` for a node pays the SSH handshake and the
authentication (a hardware key's touch, an OTP on a bastion) once, and every later ``ssh`` rides that
connection. Here every command and stream of a node with such a master is one OpenSSH client
(``ssh -o ControlMaster=no``) on it: no TCP or SSH handshake, no new authentication, no paramiko import,
the host key checked by OpenSSH under the user's own StrictHostKeyChecking/known_hosts, ProxyJump and the
rest of ssh_config applied as ``ssh`` applies them (``ssh -G``). Where the config says ``ControlMaster auto``
(or yes) with a ``ControlPersist``, a command that finds no master starts one, exactly as ``ssh`` would
(``BatchMode``: no prompt; it persists as ControlPersist says). Nothing else of the user's is touched: no
master is ever stopped, none is started where the config does not ask for one, ``ask``/``autoask`` masters
(a confirmation per session) are left alone.

Without such a config, or when the master cannot be had, or once it went away (its socket refuses), the
node's commands go through ``SshTransport`` (paramiko), as they always did.
"""

from __future__ import annotations

import glob
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from ..errors import CommandTimeout
from .shell import Cmd, render
from .transport import CommandResult, TransportError, check_result

CONNECT_TIMEOUT_S = 15           # as SshTransport's default
START_TIMEOUT_S = 60             # a master's start: connect + authentication (+ a ProxyJump hop)
_ERR_KEEP = 1 << 16


# -- does the user's ssh_config name a master at all (no subprocess for the common case) ----------------
def _config_files(ssh_config_path: str | None) -> list[tuple[str, str]]:
    """(file, the directory its relative Includes are read from), as ``ssh`` reads them."""
    if ssh_config_path:                  # -F: the system-wide file is not read
        return [(os.path.expanduser(ssh_config_path), os.path.expanduser("~/.ssh"))]
    return [(os.path.expanduser("~/.ssh/config"), os.path.expanduser("~/.ssh")), ("/etc/ssh/ssh_config", "/etc/ssh")]


def names_a_master(ssh_config_path: str | None, _depth: int = 0) -> bool:
    """Some ssh_config line (Includes followed) sets ControlPath: only then is ``ssh -G`` asked."""
    for path, base in _config_files(ssh_config_path) if _depth == 0 else [(ssh_config_path, "")]:
        try:
            with open(path, "rb") as fh:
                text = fh.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            words = line.replace("=", " ", 1).split()
            key = words[0].lower() if words else ""
            if key == "controlpath":
                return True
            if key == "include" and _depth < 8:
                for pattern in words[1:]:
                    pattern = os.path.expanduser(pattern)
                    rel = pattern if os.path.isabs(pattern) else os.path.join(base or os.path.dirname(path), pattern)
                    if any(names_a_master(p, _depth + 1) for p in sorted(glob.glob(rel))):
                        return True
    return False


def ssh_transport(target, *, accept_new_host_key: bool = False):
    """The transport of an SSH node: through the user's OpenSSH master when their ssh_config names one (the
    choice is made on first use), else paramiko's ``SshTransport``."""
    if os.name == "posix" and shutil.which("ssh") and names_a_master(target.ssh_config_path):
        return MasterTransport(target, accept_new_host_key=accept_new_host_key)
    from .ssh import SshTransport   # fabric + paramiko
    return SshTransport(target, accept_new_host_key=accept_new_host_key)


def _listening(path: str) -> bool:
    """A master accepts on its control socket (a socket file left by a killed one refuses)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2.0)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class MasterTransport:
    """Commands and streams as ``ssh`` clients of the node's OpenSSH master; ``SshTransport`` where there is
    none (see the module)."""

    def __init__(self, target, *, accept_new_host_key: bool = False):
        self.target = target
        self.accept_new_host_key = accept_new_host_key
        self.label = target.host
        self.control_path: str | None = None     # the live master's socket, once chosen
        self.fallback = None                     # SshTransport, once chosen (for good)
        self._decided = False
        self._lock = threading.Lock()
        self._clients = 0
        self._streams: set[_PipeStream] = set()

    # -- the choice -----------------------------------------------------------------------------------
    def _base(self) -> list[str]:
        t = self.target
        argv = ["ssh"]
        if t.ssh_config_path:
            argv += ["-F", os.path.expanduser(t.ssh_config_path)]
        if t.port:
            argv += ["-p", str(t.port)]
        if t.user:
            argv += ["-l", t.user]
        if t.identity_file:
            argv += ["-i", os.path.expanduser(t.identity_file)]
        return argv + ["-o", f"ConnectTimeout={t.connect_timeout or CONNECT_TIMEOUT_S}"]

    def _effective(self) -> dict[str, str]:
        """``ssh -G``: the options ssh itself would use for this node (Match, Include, %-tokens applied)."""
        try:
            cp = subprocess.run([*self._base(), "-G", "--", self.target.host], capture_output=True, timeout=15,
                                stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        out = {}
        for line in cp.stdout.decode("utf-8", "replace").splitlines() if cp.returncode == 0 else ():
            key, _, value = line.partition(" ")
            out.setdefault(key.lower(), value.strip())
        return out

    def _start_master(self) -> None:
        """``ssh`` with the user's ControlMaster auto + ControlPersist: it leaves the master running. No prompt
        (BatchMode); a failure (an unknown host key, a password login) is said by the paramiko path after."""
        argv = [*self._base(), "-o", "BatchMode=yes", "-o", "ControlMaster=auto"]
        if self.accept_new_host_key:
            argv += ["-o", "StrictHostKeyChecking=accept-new"]
        # stderr to a file: the master it leaves behind must not hold a pipe of ours open
        with tempfile.TemporaryFile() as err:
            try:
                subprocess.run([*argv, "--", self.target.host, "true"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=err, timeout=START_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def _route(self):
        """The master's socket path, or the fallback transport (decided once, on first use)."""
        with self._lock:
            if not self._decided:
                self._decided = True
                cfg = self._effective()
                path = cfg.get("controlpath", "none")
                mode = cfg.get("controlmaster", "false")
                if path and path != "none" and mode not in ("ask", "autoask"):
                    if not _listening(path) and mode in ("auto", "true", "yes") \
                            and cfg.get("controlpersist", "no") not in ("no", "false", "0"):
                        self._start_master()
                    if _listening(path):
                        self.control_path = path
            if self.control_path is not None and not _listening(self.control_path):
                self.control_path = None          # it went away (ControlPersist ran out, ssh -O exit, killed)
            if self.control_path is None and self.fallback is None:
                from .ssh import SshTransport
                self.fallback = SshTransport(self.target, accept_new_host_key=self.accept_new_host_key)
            return self.control_path if self.control_path is not None else self.fallback

    def via_master(self) -> bool:
        return isinstance(self._route(), str)

    # -- the Transport protocol -------------------------------------------------------------------------
    @property
    def round_trips(self) -> int:
        return self._clients + (self.fallback.round_trips if self.fallback is not None else 0)

    def connect(self) -> None:
        route = self._route()
        if not isinstance(route, str):
            route.connect()

    def _client(self, cmd: Cmd, control_path: str, **popen) -> subprocess.Popen:
        """One ``ssh`` client on the master at ``control_path`` (as ssh -G printed it, tokens expanded: a literal
        % doubled); ControlMaster=no: it never becomes a master of its own."""
        with self._lock:
            self._clients += 1
        argv = [*self._base(), "-o", "ControlMaster=no", "-o", "ControlPath=" + control_path.replace("%", "%%"),
                "-o", "BatchMode=yes", "-T", "--", self.target.host, render(cmd)]
        try:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    **popen)
        except OSError as exc:
            raise TransportError(f"cannot start ssh for {self.label}: {exc}") from exc

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult:
        route = self._route()
        if not isinstance(route, str):
            return route.run(cmd, stdin=stdin, timeout=timeout, check=check)
        proc = self._client(cmd, route)
        try:
            out, err = proc.communicate(stdin or b"", timeout=timeout)
        except subprocess.TimeoutExpired:
            _end(proc)
            if not _listening(route):
                raise TransportError(f"connection to {self.label} lost (its OpenSSH master went away)") from None
            raise CommandTimeout(f"command on {self.label} did not finish within {timeout:g}s "
                                 "(the connection is fine)",
                                 hint="the node is busy or the step is slow; run again or resume") from None
        if proc.returncode == 255 and not _listening(route):
            raise TransportError(f"connection to {self.label} lost (its OpenSSH master went away)")
        result = CommandResult(cmd, proc.returncode, out, err)
        return check_result(result) if check else result

    def open_stream(self, cmd: Cmd):
        route = self._route()
        if not isinstance(route, str):
            return route.open_stream(cmd)
        stream = _PipeStream(self._client(cmd, route, bufsize=0), self)
        self._streams.add(stream)
        return stream

    def close(self) -> None:
        """This process's clients end; the master is the user's (ControlPersist decides when it goes)."""
        for stream in list(self._streams):
            stream.close()
        if self.fallback is not None:
            self.fallback.close()


class _PipeStream:
    """An ``ssh`` client's pipes as a Stream: stdout as it comes, stderr kept (bounded) by a thread."""

    def __init__(self, proc: subprocess.Popen, owner: MasterTransport):
        self.proc = proc
        self.owner = owner
        self._err = bytearray()
        self._drain = threading.Thread(target=self._read_err, name="ssh-stderr", daemon=True)
        self._drain.start()

    def _read_err(self) -> None:
        while True:
            try:
                chunk = os.read(self.proc.stderr.fileno(), 1 << 16)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            self._err += chunk[: max(0, _ERR_KEEP - len(self._err))]

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.proc.stdin.fileno(), view):]
        except (OSError, ValueError):
            return   # the client is gone: recv() reports EOF

    def recv(self, timeout: float) -> bytes | None:
        try:
            fd = self.proc.stdout.fileno()       # ValueError once closed (the number may be another file's)
            ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
            if not ready:
                return None
            return os.read(fd, 1 << 20)
        except (OSError, ValueError):
            return b""

    def stderr(self) -> bytes:
        self._drain.join(timeout=2.0)    # the client ends moments after its stdout did
        return bytes(self._err)

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def close(self) -> None:
        self.owner._streams.discard(self)
        _end(self.proc)
        self._drain.join(timeout=0.2)


def _end(proc: subprocess.Popen) -> None:
    """The client ends (its session on the master with it) and its pipes are closed; it is reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if pipe is not None:
                pipe.close()
        except OSError:
            pass
