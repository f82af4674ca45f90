"""A real PostgreSQL server on this machine, for the e2e tests of the team's store (issue 39).

Debian's own package (``postgresql``: ``initdb``, ``postgres``, ``pg_isready``, ``createdb`` under
``/usr/lib/postgresql/<major>/bin``), apt-installed as root when missing, like Slurm (slurm.py). Each server
is a cluster of its own under ``STATE_ROOT/pytest-<pid>/`` (its data directory, socket and log), run in the
foreground as our child by the ``postgres`` system user (initdb refuses root) on a free port of 127.0.0.1,
trust authentication, fsync off: ``PostgresServer().start()``; ``url`` is the store URL. ``kill()`` is a
crash (SIGQUIT: the immediate shutdown, crash recovery at the next start), ``start()`` brings it back on the
same port and data, ``stop()`` ends it and removes its directory.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from .procs import stale_daemons
from .provision import STATE_ROOT, TestbedUnavailable, is_root, poll

PG_PACKAGES = ("postgresql",)
PG_BINARIES = ("initdb", "postgres", "pg_isready", "createdb")
PG_USER = "postgres"


def pg_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/<major>/bin holding every binary, else the one pg_ctl on PATH is in."""
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                   if Path(p).parent.name.isdigit() else 0, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        cands.append(str(Path(os.path.realpath(on_path)).parent))
    return next((Path(c) for c in cands if all(os.access(Path(c) / b, os.X_OK) for b in PG_BINARIES)), None)


def postgres_available() -> str | None:
    """None when a server can be started here (apt-installing Debian's PostgreSQL as root if missing)."""
    if not is_root():
        return "a PostgreSQL test server runs as the postgres user: the test bed needs root"
    if pg_bindir() is None and shutil.which("apt-get") and os.environ.get("TRTEST_NO_APT", "") == "":
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *PG_PACKAGES],
                       env=env, capture_output=True, timeout=1200)
    if pg_bindir() is None:
        return f"PostgreSQL not installed (no initdb/postgres): apt-get install {' '.join(PG_PACKAGES)}"
    try:
        import pwd
        pwd.getpwnam(PG_USER)
    except KeyError:
        return f"no {PG_USER} system user (Debian's postgresql package makes it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self, name: str = "pg", root: Path = STATE_ROOT):
        self.dir = Path(root) / f"pytest-{os.getpid()}" / f"{name}-{_free_port()}"
        self.port = _free_port()
        self.bin: Path | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgresql://tune@127.0.0.1:{self.port}/team"

    def _run(self, *argv: str) -> None:
        cp = subprocess.run([str(self.bin / argv[0]), *argv[1:]], user=PG_USER, capture_output=True, text=True,
                            timeout=120, cwd="/")
        if cp.returncode != 0:
            raise TestbedUnavailable(f"{argv[0]} failed: {(cp.stderr or cp.stdout).strip()[-500:]}")

    def ready(self) -> bool:
        cp = subprocess.run([str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                            capture_output=True, timeout=10)
        return cp.returncode == 0

    def start(self, timeout: float = 60.0) -> "PostgresServer":
        why = postgres_available()
        if why:
            raise TestbedUnavailable(why)
        self.bin = pg_bindir()
        data = self.dir / "data"
        fresh = not data.exists()
        if fresh:
            self.dir.mkdir(parents=True, exist_ok=True)
            shutil.chown(self.dir, PG_USER, PG_USER)
            self._run("initdb", "-D", str(data), "-U", "tune", "--auth=trust", "-E", "UTF8", "--no-sync")
        log = open(self.dir / "postgres.log", "ab")
        self.proc = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(data), "-p", str(self.port), "-k", str(self.dir),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"],
            user=PG_USER, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/",
            start_new_session=True)
        log.close()
        poll(self.ready, timeout=timeout, interval=0.1, what="postgres answering")
        if fresh:
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tune", "team")
        return self

    def kill(self) -> None:
        """A crash: the postmaster's immediate shutdown (no checkpoint), its connections cut."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            self.proc.wait(timeout=30)
        poll(lambda: not self.ready(), timeout=30, interval=0.1, what="postgres gone")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)           # fast shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def sweep_stale_servers(root: Path = STATE_ROOT) -> list[int]:
    """Stop the postmasters of servers whose pytest session died (``-D <root>/pytest-<pid>/...``)."""
    stopped = []
    for pid, _ in stale_daemons(("postgres",), "-D", root):
        os.kill(pid, signal.SIGQUIT)
        stopped.append(pid)
    return stopped
