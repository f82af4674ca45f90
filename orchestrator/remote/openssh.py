"""The user's own OpenSSH ControlMaster, where their ssh_config gives the node one (``ControlPath``).

An engineer who set ``ControlMaster auto`` / ``ControlPersist`` for a node pays the SSH handshake and the
authentication (a hardware key's touch, an OTP on a bastion) once, and every later ``ssh`` rides that
connection. Here every command and stream of a node with such a master is one OpenSSH client on it: no TCP or
SSH handshake, no new authentication, no paramiko import; ssh_config applied as ``ssh`` applies it (``ssh -G``).
Where the config says ``ControlMaster auto`` (or yes) with a ``ControlPersist``, a command that finds no master
starts one as ``ssh`` would: without a terminal or askpass (no prompt can hang a job), a changed host key
refused and a new one accepted only under accept-new (or ``--accept-new-host-key``), ssh's "Permanently
added" line shown. No master is ever stopped here; ``ask``/``autoask`` masters (a confirmation per session)
are left alone.

A client never connects by itself (``ProxyCommand=false``: no master, no connection), never runs the config's
RemoteCommand, sends no environment (SendEnv finds none) and logs to a file (``-E``): its stderr is the
command's, and a 255 with a log is ssh's failure, not the command's. At most MAX_SESSIONS sessions of this
process ride one master (sshd's MaxSessions is 10); more go over this transport's own connection. Without
such a config, once the master cannot be had, or when its connection went silent, the node's commands go
through ``SshTransport`` (paramiko), as they always did.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from ..errors import CommandTimeout
from .pipestream import ERR_KEEP, PipeStream, end, new_log, read_log, widen
from .shell import Cmd, render
from .sshtarget import DEFAULT_CONNECT_TIMEOUT
from .transport import CommandResult, TransportBase, TransportError, check_result

START_TIMEOUT_S = 45             # a master's start: connect + authentication (+ a ProxyJump hop)
PROBE_TIMEOUT_S = 5              # a session through the master: its connection still answers
MAX_SESSIONS = 8                 # of this process on one master; sshd refuses an 11th (MaxSessions 10)
RESTARTS = 3                     # masters started again after one went away, per transport
START_AGAIN_S = 30               # after a start that failed, none for this long (k threads: one start, not k)
_CLIENT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "TMPDIR")
_GONE = (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK, errno.ENOTDIR, errno.EACCES)
_sessions: dict[str, int] = {}   # control path -> sessions of this process riding it
_sessions_lock = threading.Lock()


# -- does the user's ssh_config name a master at all (no subprocess for the common case) ----------------
def _config_files(ssh_config_path: str | None) -> list[tuple[str, str]]:
    """(file, the directory its relative Includes are read from), as ``ssh`` reads them."""
    if ssh_config_path:                  # -F: the system-wide file is not read
        return [(os.path.expanduser(ssh_config_path), os.path.expanduser("~/.ssh"))]
    return [(os.path.expanduser("~/.ssh/config"), os.path.expanduser("~/.ssh")), ("/etc/ssh/ssh_config", "/etc/ssh")]


def names_a_master(ssh_config_path: str | None) -> bool:
    """Some ssh_config line (Includes followed) sets ControlPath: only then is ``ssh -G`` asked."""
    return any(_mentions(path, base, 0) for path, base in _config_files(ssh_config_path))


def _mentions(path: str, base: str, depth: int) -> bool:
    try:
        with open(path, "rb") as fh:
            text = fh.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return False
    for line in text.splitlines():
        words = line.replace("=", " ", 1).replace('"', " ").split()
        key = words[0].lower() if words else ""
        if key == "controlpath":
            return True
        if key == "include" and depth < 8:
            for pattern in words[1:]:           # relative: to ~/.ssh (user files) or /etc/ssh, at any depth
                pattern = os.path.expanduser(pattern)
                full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
                if any(_mentions(p, base, depth + 1) for p in sorted(glob.glob(full))):
                    return True
    return False


def ssh_transport(target, *, accept_new_host_key: bool = False):
    """The transport of an SSH node: through the user's OpenSSH master when their ssh_config names one (the
    choice is made on first use), else paramiko's ``SshTransport``."""
    if os.name == "posix" and shutil.which("ssh") and names_a_master(target.ssh_config_path):
        return MasterTransport(target, accept_new_host_key=accept_new_host_key)
    from .ssh import SshTransport  # fabric + paramiko
    return SshTransport(target, accept_new_host_key=accept_new_host_key)


def _listening(path: str) -> bool:
    """A master accepts on its control socket (gone: no socket, or a file a killed master left refuses)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2.0)
        s.connect(path)
        return True
    except OSError as exc:
        return exc.errno not in _GONE     # a full backlog, a slow accept: it is there
    finally:
        s.close()


def _socket_id(path: str) -> tuple | None:
    """Which socket file is there (a master started again makes a new one)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)


class MasterTransport(TransportBase):
    """Commands and streams as ``ssh`` clients of the node's OpenSSH master; ``SshTransport`` where there is
    none (see the module)."""

    streams = True

    def __init__(self, target, *, accept_new_host_key: bool = False):
        self.target = target
        self.accept_new_host_key = accept_new_host_key
        self.label = target.host
        self.control_path: str | None = None     # the live master's socket
        self.fallback = None                     # this transport's own SshTransport, once needed
        self._cfg: dict[str, str] | None = None  # ssh -G, read once
        self._left: tuple | None = None          # the socket (inode, ctime) this process left: it went silent
        self._restarts = 0
        self._start_failed_at: float | None = None
        self._lock = threading.Lock()
        self._clients = 0
        self._streams: set[PipeStream] = set()

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
        return argv + ["-o", f"ConnectTimeout={t.connect_timeout or DEFAULT_CONNECT_TIMEOUT}"]

    def _effective(self) -> dict[str, str]:
        """``ssh -G``: the options ssh itself would use for this node (Match, Include, %-tokens applied)."""
        try:
            cp = subprocess.run([*self._base(), "-G", "--", self.target.host], capture_output=True, timeout=15,
                                stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        out: dict[str, str] = {}
        for line in cp.stdout.decode("utf-8", "replace").splitlines() if cp.returncode == 0 else ():
            key, _, value = line.partition(" ")
            out.setdefault(key.lower(), value.strip())
        return out

    def _may_start(self) -> bool:
        cfg = self._cfg or {}
        recent = self._start_failed_at is not None and time.monotonic() - self._start_failed_at < START_AGAIN_S
        return cfg.get("controlmaster") in ("auto", "true") and cfg.get("controlpersist", "no") != "no" \
            and self._restarts <= RESTARTS and not recent

    def _start_master(self) -> None:
        """``ssh ... true`` under the user's ControlMaster auto + ControlPersist leaves the master running. In a
        session of its own (no terminal: no prompt, nor askpass), killed whole past START_TIMEOUT_S."""
        strict = "accept-new" if self.accept_new_host_key or self._cfg.get("stricthostkeychecking") == "false" \
            else None                                 # "no" would accept a CHANGED key: never here
        argv = [*self._base(), "-o", "BatchMode=yes", "-o", "ControlMaster=auto", "-o", "RemoteCommand=none", "-T",
                *(("-o", f"StrictHostKeyChecking={strict}") if strict else ()), "--", self.target.host, "true"]
        env = dict(os.environ, SSH_ASKPASS_REQUIRE="never")
        with tempfile.TemporaryFile() as err:     # a file: the master it leaves must hold no pipe of ours
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    env=env, start_new_session=True)
            try:
                proc.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)     # a ProxyJump hop's ssh too
                except OSError:
                    pass
                proc.wait()
            err.seek(0)
            for line in err.read(ERR_KEEP).decode("utf-8", "replace").splitlines():
                if "Permanently added" in line:           # as paramiko's path says it (S-02)
                    sys.stderr.write(f"tune-remote: warning: ssh: {line.strip()}\n")

    def _route(self):
        """The live master's socket path, or the fallback transport."""
        with self._lock:
            if self._cfg is None:
                self._cfg = self._effective()
                path = self._cfg.get("controlpath", "none")
                if path and path != "none" and self._cfg.get("controlmaster") not in ("ask", "autoask"):
                    self.control_path = path
            path = self.control_path
            if path is not None and self._left is not None:
                if _socket_id(path) == self._left:
                    path = None                           # the master whose connection went silent
                else:
                    self._left = None                     # gone, or a new one there: as at the start
            if path is not None and not _listening(path):
                if self._may_start():                     # as ssh would, each time it finds none
                    self._restarts += 1
                    self._start_master()
                if not _listening(path):
                    self._start_failed_at = time.monotonic()   # threads behind this one: no start each
                    path = None
            return path if path is not None else self._own()

    def _own(self):
        """This transport's own connection (paramiko), made on first need."""
        if self.fallback is None:
            from .ssh import SshTransport
            self.fallback = SshTransport(self.target, accept_new_host_key=self.accept_new_host_key)
        return self.fallback

    def _session(self):
        """The master's path with a session of it taken (``_done`` gives it back), or the own connection when
        there is no master or MAX_SESSIONS of this process ride it already (checked and taken at once)."""
        path = self._route()
        if isinstance(path, str):
            with _sessions_lock:
                if _sessions.get(path, 0) < MAX_SESSIONS:
                    _sessions[path] = _sessions.get(path, 0) + 1
                    return path
            with self._lock:
                return self._own()
        return path

    def via_master(self) -> bool:
        """A session on the master would be had now (none is taken)."""
        path = self._session()
        if isinstance(path, str):
            self._done(path)
            return True
        return False

    # -- clients --------------------------------------------------------------------------------------------
    def _client(self, cmd: Cmd, path: str, **popen):
        """One ``ssh`` client on the master at ``path`` (ssh -G printed it with tokens expanded: a literal %
        doubled) and its log (``-E``), in a session the caller took (``_session``; given back on failure)."""
        log = new_log()                                     # read and removed at the end
        argv = [*self._base(), "-S", path.replace("%", "%%"), "-o", "ControlMaster=no", "-o", "ProxyCommand=false",
                "-o", "RemoteCommand=none", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-E", log, "-T",
                "--", self.target.host, render(cmd)]
        env = {k: os.environ[k] for k in _CLIENT_ENV if k in os.environ}
        with self._lock:
            self._clients += 1
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=env, **popen)
        except OSError as exc:
            self._done(path)
            read_log(log)
            raise TransportError(f"cannot start ssh for {self.label}: {exc}") from exc
        widen(proc.stdout)
        return proc, log

    def _done(self, path: str) -> None:
        with _sessions_lock:
            _sessions[path] = max(0, _sessions.get(path, 0) - 1)

    def _failed(self, path: str, code: int | None, log: str) -> TransportError | None:
        """ssh's own failure (exit 255 and a log line, or the master gone): the transport's error."""
        if code != 255 or (not log and _listening(path)):
            return None
        why = log.splitlines()[-1][:200] if log else "its OpenSSH master went away"
        return TransportError(f"connection to {self.label} through the OpenSSH master lost or refused ({why})",
                              hint="it is retried (a refused session: sshd's MaxSessions)")

    def _probe(self, path: str) -> bool:
        """A session through the master within PROBE_TIMEOUT_S: its connection still answers (a session
        refused by sshd, MaxSessions, is an answer too)."""
        with _sessions_lock:
            _sessions[path] = _sessions.get(path, 0) + 1      # over the cap if need be: sshd refusing is an answer
        proc, log = self._client(Cmd(("true",)), path)
        try:
            proc.communicate(b"", timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False
        finally:
            end(proc)
            self._done(path)
            text = read_log(log)
        return proc.returncode == 0 or "refused" in text.lower() or "prohibited" in text.lower()

    # -- the Transport protocol -------------------------------------------------------------------------
    @property
    def round_trips(self) -> int:
        return self._clients + (self.fallback.round_trips if self.fallback is not None else 0)

    def connect(self) -> None:
        route = self._route()
        if not isinstance(route, str):
            route.connect()

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult:
        path = self._session()
        if not isinstance(path, str):
            return path.run(cmd, stdin=stdin, timeout=timeout, check=check)
        proc, log = self._client(cmd, path)
        try:
            out, err = proc.communicate(stdin or b"", timeout=timeout)
        except subprocess.TimeoutExpired:
            end(proc)
            if not self._probe(path):                       # a black hole under the master
                self._leave(path)
                raise TransportError(f"connection to {self.label} lost (no answer through the OpenSSH master "
                                     "after a command timed out)") from None
            raise CommandTimeout(f"command on {self.label} did not finish within {timeout:g}s "
                                 "(the connection is fine)",
                                 hint="the node is busy or the step is slow; run again or resume") from None
        finally:
            end(proc)
            self._done(path)
            text = read_log(log)
        failed = self._failed(path, proc.returncode, text)
        if failed is not None:
            raise failed
        result = CommandResult(cmd, proc.returncode, out, err)
        return check_result(result) if check else result

    def open_stream(self, cmd: Cmd):
        path = self._session()
        if not isinstance(path, str):
            return path.open_stream(cmd)
        proc, log = self._client(cmd, path, bufsize=0)
        stream = PipeStream(proc, self, path, log)
        self._streams.add(stream)
        return stream

    def path_silent(self) -> None:
        """Nothing came back (a black hole): this process's streams end; its own connection is dropped; unless
        a session through the master still answers, the process leaves that master (the user's, theirs to end)
        until another one listens there."""
        self._close_streams()
        if self.fallback is not None:
            self.fallback.path_silent()
        path = self.control_path
        if path is not None and self._left is None and not (_listening(path) and self._probe(path)):
            self._leave(path)

    def _leave(self, path: str) -> None:
        self._close_streams()
        self._left = _socket_id(path) or ()

    def _close_streams(self) -> None:
        for stream in list(self._streams):
            stream.close()

    def close(self) -> None:
        """This process's clients end; the master is the user's (ControlPersist decides when it goes)."""
        self._close_streams()
        if self.fallback is not None:
            self.fallback.close()
