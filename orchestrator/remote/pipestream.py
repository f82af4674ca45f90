"""An ``ssh`` client process's pipes as a transport Stream (remote/openssh.py's clients of the user's master)."""

from __future__ import annotations

import atexit
import os
import select
import shutil
import subprocess
import tempfile
import threading

try:
    import fcntl
except ImportError:             # not POSIX: no OpenSSH master route there (openssh.ssh_transport)
    fcntl = None

ERR_KEEP = 1 << 16              # stderr kept for errors
PIPE_BYTES = 1 << 20


def widen(pipe) -> None:
    """Linux: a 1 MiB pipe (64 KiB by default): a copy's reads here are 16x fewer (fetch through a master
    368 -> 450 MB/s on loopback)."""
    try:
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, AttributeError):
        pass


def end(proc: subprocess.Popen) -> None:
    """The client ends (its session on the master with it) and is reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


LOG_PREFIX = "tune-remote-ssh-"
_log_dir: list = []             # [path, the held lock's fd]
_log_lock = threading.Lock()


def new_log() -> str:
    """A path for one client's ``-E`` log, in this process's own temp dir (removed at exit), whose ``.lock``
    it holds (flock) while it lives. A process killed outright leaves its dir: the next one removes the dirs
    whose lock it can take (their process is gone: a pid check would misjudge another pid namespace)."""
    with _log_lock:
        if not _log_dir or not os.path.isdir(_log_dir[0]):
            _sweep(tempfile.gettempdir())
            d = tempfile.mkdtemp(prefix=f"{LOG_PREFIX}{os.getpid()}-")
            fd = os.open(os.path.join(d, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            _log_dir[:] = [d, fd]
            atexit.register(shutil.rmtree, d, True)
    fd, path = tempfile.mkstemp(dir=_log_dir[0], suffix=".log")
    os.close(fd)
    return path


def _sweep(tmp: str) -> None:
    try:
        entries = [e for e in os.scandir(tmp) if e.name.startswith(LOG_PREFIX)]
    except OSError:
        return
    for e in entries:
        try:
            if not e.is_dir(follow_symlinks=False) or e.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            fd = os.open(os.path.join(e.path, ".lock"), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue                        # no lock (not one of ours), or gone meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue                        # its process lives
        finally:
            os.close(fd)
        shutil.rmtree(e.path, ignore_errors=True)


def read_log(path: str) -> str:
    """What ssh wrote to its ``-E`` log, which is removed (ssh closes every inherited descriptor at its start:
    the log must be a path)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(ERR_KEEP).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


class PipeStream:
    """An ``ssh`` client's pipes as a Stream: stdout as it comes, stderr kept (bounded) by a thread. Pipes are
    closed by the last of their users (another thread's ``close`` only ends the client): an fd number closed under
    a reader or a writer could be another file's by its next call. ``owner`` (a MasterTransport) counts the session
    (``_done``), keeps its open streams (``_streams``) and judges an exit (``_failed``)."""

    def __init__(self, proc: subprocess.Popen, owner, path: str, log: str):
        self.proc = proc
        self.owner = owner
        self.path = path
        self.log = log
        self._err = bytearray()
        self._io = threading.Lock()
        self._busy = 0                  # recv/send calls using a pipe's fd number right now
        self._closed = False
        self._released = False
        self._drain = threading.Thread(target=self._read_err, name="ssh-stderr", daemon=True)
        self._drain.start()

    def _read_err(self) -> None:
        fd = self.proc.stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.proc.stderr.close()
                return
            self._err += chunk[: max(0, ERR_KEEP - len(self._err))]

    def send(self, data: bytes) -> None:
        with self._io:
            if self._closed:
                return
            self._busy += 1
            fd = self.proc.stdin.fileno()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            return   # the client is gone: recv() reports how
        finally:
            self._idle()

    def recv(self, timeout: float) -> bytes | None:
        with self._io:
            if self._closed:
                return b""
            self._busy += 1
            fd = self.proc.stdout.fileno()
        try:
            poller = select.poll()        # any fd number (select() stops at 1024)
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            if not poller.poll(max(0.0, timeout) * 1000):
                return None
            data = os.read(fd, 1 << 20)
        except OSError:
            data = b""
        finally:
            self._idle()
        if not data:
            self._at_eof()
        return data

    def _at_eof(self) -> None:
        """stdout ended: the client's exit status follows; ssh's own failure (the master died: a copy would
        look whole) is the transport's error, as a dropped paramiko channel is."""
        try:
            code = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return
        failed = self.owner._failed(self.path, code, self._release())
        if failed is not None:
            raise failed

    def _release(self) -> str:
        """The session is no longer counted and its log is read (once)."""
        with self._io:
            if self._released:
                return ""
            self._released = True
        self.owner._done(self.path)
        return read_log(self.log)

    def stderr(self) -> bytes:
        self._drain.join(timeout=2.0)    # the client ends moments after its stdout did
        return bytes(self._err)

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def _idle(self) -> None:
        with self._io:
            self._busy -= 1
            if self._closed and not self._busy:
                self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass

    def close(self) -> None:
        self.owner._streams.discard(self)
        end(self.proc)
        with self._io:
            self._closed = True
            if not self._busy:
                self._close_pipes()
        self._drain.join(timeout=0.2)
        self._release()
