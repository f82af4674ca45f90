"""Laptop side of the pushed node helper: push it once, call one op per round trip.

Detached jobs are handles = a run directory on the node (see docs/internals.md): ``launch`` is
idempotent per run directory, ``status`` reads the node's truth, ``cancel`` kills the tree.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import tarfile
import threading
import time
from importlib import resources

from ..errors import JobError, RemoteCommandError
from ..nodeside import PUSHED
from . import trace
from .channel import HelperChannel, HelperGone, idle_s
from .shell import Cmd
from .transport import TransportError, Transport

# the node-side package, pushed as one tarball of its package directories as they are (PUSHED: itself and the
# shape library it imports) under orchestrator/; started as the module orchestrator.nodeside.node_helper
ENTRY = "orchestrator/nodeside/node_helper.py"
# push: the base dir is made 0700 and must be ours (S-01); a helper dir whose content went bad is replaced
_EXTRACT = (
    "import io,os,shutil,stat,sys,tarfile\n"
    "d=sys.argv[1]; b=os.path.dirname(d); t=d+'.tmp'+str(os.getpid())\n"
    "try:\n os.makedirs(b,0o700)\nexcept OSError:\n pass\n"
    "st=os.lstat(b)\n"
    "if st.st_uid!=os.getuid() or not stat.S_ISDIR(st.st_mode) or st.st_mode&0o022:\n"
    " sys.stderr.write('untrusted helper base %s\\n'%b); sys.exit(3)\n"
    "os.chmod(b,0o700)\n"
    "tarfile.open(fileobj=io.BytesIO(sys.stdin.buffer.read())).extractall(t)\n"
    "try:\n os.rename(t,d)\nexcept OSError:\n"
    " o=d+'.old'+str(os.getpid())\n"
    " try:\n  os.rename(d,o); os.rename(t,d)\n except OSError:\n  pass\n"
    " shutil.rmtree(o,ignore_errors=True); shutil.rmtree(t,ignore_errors=True)\n"
)
# run: before any code of the helper dir runs, its base dir, the dir, every dir below it that holds a file and
# every file are ours and not writable by others, and the files hash to the bundle's full sha256 (S-01); then
# the module orchestrator.nodeside.node_helper runs as __main__ with the dir first on sys.path.
# argv: DIGEST NAMES <dir>/orchestrator/nodeside/node_helper.py ARGS... (ps still shows `node_helper.py --serve`).
# Missing or different content in our own dir: exit 2 "can't open file" (the laptop pushes again); a dir
# that is not ours: an ok:false answer with "untrusted" (the laptop moves to /tmp/tune-remote-<uid>).
_RUN = (
    "import sys\n"
    "sys.path[:]=[p for p in sys.path if p not in ('','.')]\n"   # -c puts the cwd first: nothing from there
    "import hashlib,json,os,stat\n"
    "want,names,e=sys.argv[1],sys.argv[2].split(','),sys.argv[3]; me=os.getuid()\n"
    "d=os.path.dirname(os.path.dirname(os.path.dirname(e)))\n"
    "def no(p,why):\n"
    " print(json.dumps({'ok':False,'untrusted':True,'uid':me,'error':'refusing to run the node helper from %s: %s'%(p,why),"
    "'hint':'remove it if it is not yours; tune-remote runs its helper only from a directory of its own'})); sys.exit(0)\n"
    "def gone(p):\n"
    " sys.stderr.write(\"can't open file %s\\n\"%p); sys.exit(2)\n"
    "h=hashlib.sha256()\n"
    "dirs=[os.path.dirname(d),d]+sorted(set(os.path.join(d,os.path.dirname(n)) for n in names)-{d+'/'})\n"
    "for p in dirs+names:\n"
    " q=p if p in dirs else os.path.join(d,p)\n"
    " try:\n  st=os.lstat(q)\n except OSError:\n  gone(q)\n"
    " if st.st_uid!=me: no(q,'owned by uid %d, not %d'%(st.st_uid,me))\n"
    " if st.st_mode&0o022: no(q,'writable by others')\n"
    " if not (stat.S_ISDIR if p in dirs else stat.S_ISREG)(st.st_mode): no(q,'not a plain file or dir')\n"
    " if p not in dirs:\n"
    "  with open(q,'rb') as f: h.update(p.encode()+b'\\0'+f.read())\n"
    "if h.hexdigest()!=want: gone(d+' (content differs)')\n"
    "import runpy\n"
    "sys.argv=[e]+sys.argv[4:]; sys.path.insert(0,d)\n"
    "runpy.run_module('orchestrator.nodeside.node_helper',run_name='__main__',alter_sys=True)\n"
)
_RUN_LINE = "exec(%r)" % _RUN   # one line: ps and /proc/PID/cmdline readers see one process per line


def _bundle() -> tuple[str, bytes]:
    full, tarball = _bundle_full()
    return full[:12], tarball


def helper_files() -> list[str]:
    """What is pushed, relative to the helper dir: orchestrator/__init__.py and every .py / .sh file of the
    packages the node side names (orchestrator.nodeside.PUSHED), sorted."""
    top = resources.files("orchestrator")
    names = ["orchestrator/__init__.py"]
    for pkg in PUSHED:
        names += sorted(f"orchestrator/{pkg}/{f.name}" for f in top.joinpath(pkg).iterdir()
                        if f.is_file() and f.name.endswith((".py", ".sh")))
    return names


def _helper_sources() -> list[tuple[str, bytes]]:
    top = resources.files("orchestrator")
    return [(name, top.joinpath(name.split("/", 1)[1]).read_bytes()) for name in helper_files()]


def _digest(sources: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in sources:
        digest.update(name.encode() + b"\0" + data)
    return digest.hexdigest()


def _tarball(sources: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        # each package dir 0755 whatever the node's umask (S-01: _RUN refuses a dir others may write)
        for d in sorted({"/".join(n.split("/")[:i]) for n, _ in sources for i in range(1, n.count("/") + 1)}):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, data in sources:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _bundle_full() -> tuple[str, bytes]:
    sources = _helper_sources()
    return _digest(sources), _tarball(sources)


class HelperCallError(RemoteCommandError):
    """The helper answered ok=false: a handled problem on the node, with the node's hint."""


class ContainerUnavailable(TransportError):
    """``docker exec`` was refused by the daemon (container restarting, paused, stopped): like a dropped
    connection, the caller retries within its reconnect window; the job in the container is not judged."""


_DAEMON_REFUSALS = (b"Error response from daemon", b"is restarting", b"is paused", b"is not running")


class NodeHelper:
    """Runs node helper ops in the target: over one persistent channel when the transport can hold one
    (``python3 -u node_helper.py --serve``, see remote/channel.py), else one ``python3 node_helper.py <op>``
    exec per op with the JSON request on stdin. Either way the same answers; ops are idempotent, so a
    request the helper died under is sent again once to a new helper."""

    RETRY_STREAM_S = 30.0   # after the persistent helper failed to start, use one exec per op this long

    def __init__(self, transport: Transport, python: str = "python3", base_dir: str = "/tmp/tune-remote"):
        self.transport = transport
        self.python = python
        # the digest names the helper dir (every call); the gzipped tarball (~40 ms to build on a loaded 2-core
        # machine, before the first round trip) only a push needs: built then, from the same sources
        self._sources = _helper_sources()
        self.digest = _digest(self._sources)
        self.version = self.digest[:12]
        self.base_dir = base_dir
        self.dir = f"{base_dir}/helper-{self.version}"
        self.calls = 0
        self.ops: collections.Counter = collections.Counter()  # op -> calls, for round-trip figures
        self.batched: collections.Counter = collections.Counter()  # of those, the ones that rode in a batch
        self.helpers_started = 0
        self._channel_requests = 0
        self.channel: HelperChannel | None = None
        self._stream_ok = os.environ.get("TUNE_REMOTE_HELPER_CHANNEL", "1") != "0"
        self._stream_failed_at: float | None = None
        self._lock = threading.Lock()

    @property
    def round_trips(self) -> int:
        """Requests answered over persistent channels (each costs one network round trip, no new channel)."""
        return self._channel_requests + (self.channel.requests if self.channel else 0)

    @property
    def path(self) -> str:
        """node_helper.py in the pushed dir (``python3 PATH <op>`` runs it too)."""
        return f"{self.dir}/{ENTRY}"

    @property
    def pipeline(self) -> str:
        """The detached pipeline runner, beside node_helper.py."""
        return f"{self.dir}/orchestrator/nodeside/pipeline.sh"

    def push(self) -> None:
        self.transport.run(Cmd((self.python, "-c", _EXTRACT, self.dir)), stdin=_tarball(self._sources),
                           timeout=120)

    def _checked(self, *args: str) -> Cmd:
        """python -c _RUN: node_helper.py ARGS, run only after the dir and its content were checked."""
        return Cmd((self.python, *(("-u",) if args[:1] == ("--serve",) else ()), "-c", _RUN_LINE, self.digest,
                    ",".join(name for name, _ in self._sources), self.path, *args))

    def _per_user(self, answer: dict | None) -> bool:
        """The shared base dir belongs to someone else (or others may write it): use /tmp/tune-remote-<uid>."""
        if not (answer and answer.get("untrusted")) or self.base_dir != "/tmp/tune-remote":
            return False
        self.base_dir = f"/tmp/tune-remote-{int(answer.get('uid', 0))}"
        self.dir = f"{self.base_dir}/helper-{self.version}"
        self.push()
        return True

    def call(self, op: str, request: dict | None = None, *, timeout: float | None = 300) -> dict:
        what = op if op != "batch" else "batch " + ",".join(o["op"] for o in (request or {}).get("ops", []))
        with self._lock, trace.span(self.transport.label, "helper " + what):
            answer = self._call_channel(op, request or {}, timeout)
            if answer is None:
                answer = self._call_exec(op, request or {}, timeout)
            self.calls += 1
            self.ops[op] += 1
        if not answer.get("ok", False):
            raise HelperCallError(
                f"{op} on {self.transport.label}: {answer.get('error', 'failed')}",
                hint=answer.get("hint"),
            )
        return answer

    def call_batch(self, calls: list[tuple[str, dict]], *, timeout: float | None = 300,
                   soft_last: bool = False) -> list[dict]:
        """Several ops in one round trip (op ``batch``), in order; the first failed one raises as ``call``
        would, and the ops after it were not run. ``soft_last``: the last op's failure is its answer
        (``ok`` false), not an exception (an op that only rides along: the ones before it did their work)."""
        answer = self.call("batch", {"ops": [{"op": op, "req": req or {}} for op, req in calls]}, timeout=timeout)
        self.ops["batch"] -= 1            # counted as the ops it carries (it is still one round trip)
        if not self.ops["batch"]:
            del self.ops["batch"]
        answers = answer.get("answers") or []
        for i, ((op, _req), a) in enumerate(zip(calls, answers)):
            self.ops[op] += 1
            self.batched[op] += 1
            if not a.get("ok", False) and not (soft_last and i == len(calls) - 1):
                raise HelperCallError(f"{op} on {self.transport.label}: {a.get('error', 'failed')}",
                                      hint=a.get("hint"))
        if len(answers) != len(calls):
            raise HelperCallError(f"batch on {self.transport.label}: {len(answers)} answers for {len(calls)} ops")
        return answers

    def close(self) -> None:
        """Drop the persistent channel (the helper exits on its stdin EOF)."""
        if self.channel is not None:
            self._channel_requests += self.channel.requests
            self.channel.close()
            self.channel = None

    def start(self) -> bool:
        """Start the persistent helper now, before its first request (a channel that answered hello): that
        request then pays no start-up. False where this target runs one exec per op. No request is sent, so
        the round-trip figures are those of a helper started by its first request."""
        with self._lock:
            return self.channel is not None or self._start() is not None

    # ---- persistent channel --------------------------------------------------------------------
    def _call_channel(self, op: str, request: dict, timeout: float | None) -> dict | None:
        """The answer over the persistent channel, or None when this target must use one exec per op."""
        for attempt in (1, 2):
            if self.channel is None and self._start((op, request, timeout)) is None:
                return None
            try:
                return self.channel.request(op, request, timeout)
            except HelperGone:        # killed, idle-timed-out, or its channel closed: a new helper, once
                code = self.channel.stream.exit_code()
                self.close()
                if attempt == 2:
                    raise RemoteCommandError(f"node helper on {self.transport.label} exited during {op} "
                                             f"twice (exit {code})") from None
            except BaseException:
                self.close()
                raise
        return None  # not reached

    def _start(self, first: tuple[str, dict, float | None] | None = None) -> HelperChannel | None:
        opener = self.transport.open_stream
        if not self.transport.streams or not self._stream_ok:
            return None
        if self._stream_failed_at is not None and time.monotonic() - self._stream_failed_at < self.RETRY_STREAM_S:
            return None
        for attempt in (1, 2):
            cmd = self._checked("--serve", "--idle", f"{idle_s():g}")
            try:
                stream = opener(cmd)
            except NotImplementedError:   # e.g. docker exec over srun: one exec per op
                self._stream_ok = False
                return None
            channel = HelperChannel(stream, self.transport.label)
            try:
                hello = channel.start(first)
            except BaseException:
                channel.close()
                raise
            if hello is not None and hello.get("ok"):
                self.channel = channel
                self.helpers_started += 1
                return channel
            code, err = _exit_status(stream)
            channel.close()
            if hello is None and code == 2 and b"can't open file" in err and attempt == 1:
                self.push()
                continue
            if hello is None and attempt == 1 and self._per_user(channel.refusal):
                continue                  # /tmp/tune-remote is someone else's: the channel from our own dir
            if hello is None and code != 0 and any(m in err for m in _DAEMON_REFUSALS):
                line = err.decode("utf-8", "replace").strip().splitlines()[-1][:200]
                raise ContainerUnavailable(f"{self.transport.label}: docker exec refused: {line}",
                                           hint="the container is restarting, paused or stopped; retrying")
            break
        # the helper cannot run persistently here (too old a Python, a crash at start): one exec per op,
        # whose answer carries the real error; try the persistent helper again later
        self._stream_failed_at = time.monotonic()
        return None

    # ---- one exec per op -----------------------------------------------------------------------
    def _call_exec(self, op: str, request: dict, timeout: float | None) -> dict:
        payload = json.dumps(request).encode()
        # the helper stops the op itself a little before the laptop gives up: nothing stays behind
        args = (op,) if timeout is None else (op, "--timeout", f"{max(1.0, timeout - 5):g}")
        result = self.transport.run(self._checked(*args), stdin=payload, timeout=timeout, check=False)
        if result.exit_code == 0 and self._per_user(_last_json(result.stdout)):
            result = self.transport.run(self._checked(*args), stdin=payload, timeout=timeout, check=False)
        if result.exit_code == 2 and b"can't open file" in result.stderr:
            self.push()
            result = self.transport.run(self._checked(*args), stdin=payload, timeout=timeout, check=False)
        if result.exit_code == 127 and not result.stdout:
            raise JobError(
                f"{self.python} is not available in {self.transport.label}",
                hint="tune-remote needs python3 inside the container (AITER needs it too)",
            )
        answer = _last_json(result.stdout)
        if answer is None and result.exit_code != 0 and any(m in result.stderr for m in _DAEMON_REFUSALS):
            line = result.err_text.strip().splitlines()[-1][:200] if result.err_text.strip() else ""
            raise ContainerUnavailable(f"{self.transport.label}: docker exec refused: {line}",
                                       hint="the container is restarting, paused or stopped; retrying")
        if answer is None:
            tail = result.err_text.strip().splitlines()[-3:]
            raise RemoteCommandError(
                f"node helper '{op}' on {self.transport.label} crashed (exit {result.exit_code})"
                + (f": {' | '.join(tail)}" if tail else ""),
                result=result,
            )
        return answer


def _exit_status(stream) -> tuple[int | None, bytes]:
    """Exit code and stderr of a stream whose stdout closed (the exit status follows within moments)."""
    end = time.monotonic() + 2.0
    code = stream.exit_code()
    while code is None and time.monotonic() < end:
        time.sleep(0.01)
        code = stream.exit_code()
    return code, stream.stderr()


def _last_json(stdout: bytes) -> dict | None:
    for line in reversed(stdout.decode("utf-8", "replace").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None

