"""Machine-level provisioning of the test bed: packages, Docker engine, base image, node user.

Everything here is idempotent and conservative:

* packages (``docker.io``, ``openssh-server``) are apt-installed only when missing and only as root;
* a Docker engine is started only when none answers ``docker info``; one we start is recorded in
  ``<STATE_ROOT>/engine/engine.json`` and is the only one we may ever stop;
* every Docker object we create is named ``trtest-…`` and labelled ``tune-remote.testbed=1``; we never
  touch anything else.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import io
import json
import os
import pwd
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "trtest-"
LABEL = "tune-remote.testbed"                 # value "1" on every container/image we create
OWNER_LABEL = "tune-remote.testbed.owner"     # who created it: "pytest-<pid>" or "up-<name>"
NODE_LABEL = "tune-remote.testbed.node"       # node name
STATE_ROOT = Path(os.environ.get("TRTEST_STATE_ROOT") or (
    "/tmp/tune-remote-testbed" if os.geteuid() == 0 else f"/tmp/tune-remote-testbed-{os.geteuid()}"))
NODE_USER = os.environ.get("TRTEST_NODE_USER", "trnode")
NODE_USER_COMMENT = "tune-remote test bed node user"
BASE_IMAGE_REPO = PREFIX + "base"
ENGINE_DEADLINE_S = 60.0

# Host directories that make up the container's userland (bind-mounted read-only).
HOST_SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")


class TestbedUnavailable(RuntimeError):
    """The machine cannot host the test bed (no root, no docker, no sshd...). Tests skip (or fail in CI)."""

    __test__ = False  # not a pytest test class


def is_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


def is_root() -> bool:
    return os.geteuid() == 0


def run(argv, *, check=True, timeout=120, input=None, env=None) -> subprocess.CompletedProcess:
    """Run a local command, text mode, captured. Raises RuntimeError with stderr on failure."""
    try:
        cp = subprocess.run(
            [str(a) for a in argv], input=input, capture_output=True, text=True, timeout=timeout, env=env,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"timed out after {timeout}s: {' '.join(map(str, argv))}") from e
    if check and cp.returncode != 0:
        raise RuntimeError(
            f"command failed (rc={cp.returncode}): {' '.join(map(str, argv))}\n"
            f"stdout: {cp.stdout[-2000:]}\nstderr: {cp.stderr[-2000:]}"
        )
    return cp


def poll(condition, *, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Call ``condition()`` until it returns a truthy value or the deadline passes (then TimeoutError)."""
    deadline = time.monotonic() + timeout
    delay = interval
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


@contextlib.contextmanager
def state_lock(name: str = "provision"):
    """Inter-process lock (flock) so that two sessions never start two engines or build twice."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(STATE_ROOT / f".{name}.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------------------------
# Packages
# ----------------------------------------------------------------------------------------------

def find_sshd() -> str | None:
    return shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.access(p, os.X_OK)), None
    )


def find_docker() -> str | None:
    return shutil.which("docker")


def find_dockerd() -> str | None:
    return shutil.which("dockerd") or (
        "/usr/sbin/dockerd" if os.access("/usr/sbin/dockerd", os.X_OK) else None
    )


def ensure_packages(*, allow_apt: bool | None = None) -> list[str]:
    """apt-get install docker.io / openssh-server when their binaries are missing. Returns what was installed."""
    missing = []
    if not (find_docker() and find_dockerd()):
        missing.append("docker.io")
    if not (find_sshd() and shutil.which("ssh") and shutil.which("ssh-keygen")):
        missing.append("openssh-server")
        missing.append("openssh-client")
    if not missing:
        return []
    if allow_apt is None:
        allow_apt = os.environ.get("TRTEST_NO_APT", "") == ""
    if not (allow_apt and is_root() and shutil.which("apt-get")):
        raise TestbedUnavailable(
            f"missing packages {missing} and cannot apt-get install them (root={is_root()}); "
            f"run: apt-get install -y {' '.join(missing)}"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-q"], timeout=600, env=env)
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], timeout=1200, env=env)
    return missing


# ----------------------------------------------------------------------------------------------
# Docker engine
# ----------------------------------------------------------------------------------------------

ENGINE_DIR = STATE_ROOT / "engine"
ENGINE_RECORD = ENGINE_DIR / "engine.json"


def docker(*args, check=True, timeout=120, input=None) -> subprocess.CompletedProcess:
    exe = find_docker()
    if not exe:
        raise TestbedUnavailable("docker CLI not found")
    return run([exe, *args], check=check, timeout=timeout, input=input)


def engine_answers(timeout: float = 10) -> bool:
    exe = find_docker()
    if not exe:
        return False
    try:
        cp = subprocess.run([exe, "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                            text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False
    return cp.returncode == 0 and bool(cp.stdout.strip())


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _pid_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [p.decode(errors="replace") for p in fh.read().split(b"\0") if p]
    except OSError:
        return []


@dataclass
class EngineInfo:
    started_by_testbed: bool      # True when a test bed (any session) started this dockerd
    started_now: bool             # True when *this* call started it
    pid: int | None
    log_path: str | None
    startup_s: float              # time spent making the engine answer (0 when it already did)
    server_version: str = ""


def _read_engine_record() -> dict | None:
    try:
        rec = json.loads(ENGINE_RECORD.read_text())
    except (OSError, ValueError):
        return None
    pid = rec.get("pid")
    if pid and _pid_alive(pid) and any("dockerd" in a for a in _pid_cmdline(pid)[:1]):
        return rec
    return None


def ensure_engine(deadline_s: float = ENGINE_DEADLINE_S) -> EngineInfo:
    """Make ``docker info`` answer, starting ``dockerd --iptables=false --bridge=none`` only if needed."""
    t0 = time.monotonic()
    with state_lock("engine"):
        if engine_answers():
            rec = _read_engine_record()
            return EngineInfo(bool(rec), False, rec and rec.get("pid"), rec and rec.get("log"), 0.0,
                              _server_version())
        dockerd = find_dockerd()
        if not dockerd:
            raise TestbedUnavailable("no Docker engine answers and dockerd is not installed")
        if not is_root():
            raise TestbedUnavailable("no Docker engine answers and starting dockerd needs root")
        ENGINE_DIR.mkdir(parents=True, exist_ok=True)
        log_path = ENGINE_DIR / "dockerd.log"
        _ensure_group("docker")
        argv = [dockerd, "--iptables=false", "--bridge=none", "--ip-masq=false", "--group", "docker",
                "--pidfile", "/var/run/docker.pid"]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True, close_fds=True)
        rec = {"pid": proc.pid, "argv": argv, "log": str(log_path), "started_at": time.time(),
               "started_by_pid": os.getpid()}
        tmp = ENGINE_RECORD.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=2))
        tmp.replace(ENGINE_RECORD)

        def ready():
            if proc.poll() is not None:
                raise TestbedUnavailable(
                    f"dockerd exited with {proc.returncode}; log tail:\n{_tail(log_path)}")
            return engine_answers(timeout=5)

        try:
            poll(ready, timeout=deadline_s, interval=0.1, what="dockerd to answer `docker info`")
        except TimeoutError as e:
            raise TestbedUnavailable(f"{e}; log tail:\n{_tail(log_path)}") from None
        return EngineInfo(True, True, proc.pid, str(log_path), time.monotonic() - t0, _server_version())


def _server_version() -> str:
    cp = docker("info", "--format", "{{.ServerVersion}}", check=False, timeout=10)
    return cp.stdout.strip()


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def stop_engine_if_ours_and_unused(*, wait_s: float = 30.0) -> str:
    """Stop dockerd only if a test bed started it and no container at all (ours or not) remains.

    Returns a short sentence saying what happened.
    """
    with state_lock("engine"):
        rec = _read_engine_record()
        if not rec:
            return "engine not started by the test bed: left alone"
        if not engine_answers():
            return "engine does not answer: left alone"
        cp = docker("ps", "-aq", check=False)
        if cp.stdout.strip():
            return "engine still has containers: left running"
        if live_nodes():
            return "other test-bed nodes are registered: engine left running"
        for d in STATE_ROOT.glob("pytest-*"):
            pid = d.name.split("-", 1)[1]
            if pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid)):
                return f"another pytest session ({pid}) uses the engine: left running"
        pid = rec["pid"]
        os.kill(pid, 15)
        try:
            poll(lambda: not _pid_alive(pid), timeout=wait_s, what="dockerd to exit")
        except TimeoutError:
            os.kill(pid, 9)
        with contextlib.suppress(OSError):
            ENGINE_RECORD.unlink()
        return f"engine (pid {pid}) stopped"


def live_nodes() -> list[Path]:
    """State dirs of nodes made by `python -m tests.fake_remote up` that still exist."""
    if not STATE_ROOT.is_dir():
        return []
    return sorted(p.parent for p in STATE_ROOT.glob("*/state.json"))


# ----------------------------------------------------------------------------------------------
# Base image: `docker import` of an almost empty rootfs, host userland bind-mounted read-only
# ----------------------------------------------------------------------------------------------

def _rootfs_layout() -> list[tuple[str, str | None]]:
    """[(name, symlink target or None for a directory)] mirroring the host's merged-/usr layout."""
    layout: list[tuple[str, str | None]] = []
    for d in ("bin", "lib", "lib64", "sbin"):
        p = Path("/") / d
        if p.is_symlink():
            layout.append((d, os.readlink(p)))
        else:
            layout.append((d, None))
    for d in ("usr", "etc", "tmp", "var", "var/tmp", "root", "home", "opt", "run", "proc", "dev", "sys"):
        layout.append((d, None))
    return layout


def base_image_tag() -> str:
    digest = hashlib.sha256(json.dumps(_rootfs_layout()).encode()).hexdigest()[:12]
    return f"{BASE_IMAGE_REPO}:{digest}"


def _rootfs_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, target in _rootfs_layout():
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if target is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = target
                info.mode = 0o777
            else:
                info.type = tarfile.DIRTYPE
                info.mode = 0o1777 if name in ("tmp", "var/tmp") else 0o755
            tar.addfile(info)
    return buf.getvalue()


def ensure_base_image() -> tuple[str, float, bool]:
    """Import the base image if missing. Returns (tag, seconds spent, created_now)."""
    tag = base_image_tag()
    t0 = time.monotonic()
    with state_lock("image"):
        if docker("image", "inspect", tag, check=False).returncode == 0:
            return tag, 0.0, False
        exe = find_docker()
        cp = subprocess.run(
            [exe, "import", "--change", f"LABEL {LABEL}=1", "--change", 'CMD ["/bin/sleep", "infinity"]',
             "-", tag], input=_rootfs_tar(), capture_output=True, timeout=120)
        if cp.returncode != 0:
            raise RuntimeError(f"docker import failed: {cp.stderr.decode(errors='replace')}")
    return tag, time.monotonic() - t0, True


def system_mounts() -> list[str]:
    """``-v`` arguments binding the host userland read-only (directories only; symlinks live in the image)."""
    args = []
    for d in HOST_SYSTEM_DIRS:
        p = Path(d)
        if p.is_dir() and not p.is_symlink():
            args += ["-v", f"{d}:{d}:ro"]
    return args


# ----------------------------------------------------------------------------------------------
# Node user
# ----------------------------------------------------------------------------------------------

def _ensure_group(name: str) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        if is_root():
            run(["groupadd", "--system", name])


def docker_socket_path() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host[len("unix://"):]
    return "/var/run/docker.sock"


@dataclass
class NodeUser:
    name: str
    uid: int
    home: str
    shell: str


def ensure_node_user() -> NodeUser:
    """The account nodes log in as: ``trnode`` (root only), plain /bin/sh, no rc files, docker socket group.

    Not root: the current user is used (it must already be able to run docker).
    """
    if not is_root():
        pw = pwd.getpwuid(os.geteuid())
        return NodeUser(pw.pw_name, pw.pw_uid, pw.pw_dir, pw.pw_shell)
    with state_lock("user"):
        sock = docker_socket_path()
        try:
            sock_gid = os.stat(sock).st_gid
        except OSError as e:
            raise TestbedUnavailable(f"docker socket {sock} missing: {e}") from None
        if sock_gid == 0:
            rec = _read_engine_record()
            if not rec:
                raise TestbedUnavailable(
                    f"{sock} belongs to group root and the engine was not started by the test bed; "
                    "the node user could not run docker")
            _ensure_group("docker")
            os.chown(sock, 0, grp.getgrnam("docker").gr_gid)
            sock_gid = grp.getgrnam("docker").gr_gid
        sock_group = grp.getgrgid(sock_gid).gr_name
        try:
            pw = pwd.getpwnam(NODE_USER)
        except KeyError:
            skel = STATE_ROOT / ".empty-skel"
            skel.mkdir(parents=True, exist_ok=True)
            run(["useradd", "--create-home", "--skel", str(skel), "--shell", "/bin/sh",
                 "--comment", NODE_USER_COMMENT, "--groups", sock_group, NODE_USER])
            pw = pwd.getpwnam(NODE_USER)
        members = grp.getgrgid(sock_gid).gr_mem
        if NODE_USER not in members and pw.pw_gid != sock_gid:
            run(["usermod", "--append", "--groups", sock_group, NODE_USER])
        # A '!' password means "locked": sshd without PAM refuses locked accounts even for keys.
        shadow = run(["getent", "shadow", NODE_USER], check=False).stdout.split(":")
        if len(shadow) > 1 and shadow[1].startswith("!"):
            run(["usermod", "--password", "*", NODE_USER])
        home = Path(pw.pw_dir)
        home.mkdir(parents=True, exist_ok=True)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        if pw.pw_gecos == NODE_USER_COMMENT:
            # Our own account: make sure no rc file sneaked in (logins must stay plain and fast).
            for rc in (".bashrc", ".profile", ".bash_profile", ".bash_login", ".bash_logout"):
                with contextlib.suppress(FileNotFoundError):
                    (home / rc).unlink()
        return NodeUser(pw.pw_name, pw.pw_uid, pw.pw_dir, pw.pw_shell)


def ensure_privsep_dir() -> None:
    if is_root():
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
