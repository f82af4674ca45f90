"""The persistent helper: JSON lines over one channel, pings answered while an op runs, deadlines.

``python3 -u node_helper.py --serve [--idle S]`` prints a hello line, then answers one request per
line: ``{"id", "op", "req", "timeout_s"}`` -> ``{"id", "ok", ...}`` (the same answers as one exec
per op). A reader thread answers ``{"id", "op": "ping"}`` at once, even while an op runs, so the
laptop can tell a slow op from a dead path. The helper exits on stdin EOF (the channel closed) and
after ``idle`` seconds without a request. Every op runs under a self-deadline (SIGALRM): past
``timeout_s`` it is interrupted (a subprocess it waits for is killed) and answers ``"timeout": true``,
so timed-out work does not stay behind in the container.
"""

import json
import os
import signal
import sys
import threading
import time

try:
    import queue
except ImportError:  # pragma: no cover - Python 2 never gets here (version gate)
    queue = None

DEFAULT_IDLE_S = 120.0
_out_lock = threading.Lock()
_proto = []   # the protocol stream once serving (fd 1 itself then points at stderr)


class Deadline(BaseException):
    """Raised in the op by SIGALRM (BaseException: an op's own ``except Exception`` must not eat it)."""


def emit(obj, stream=None):
    line = json.dumps(obj, ensure_ascii=True, default=str) + "\n"
    stream = stream or (_proto[0] if _proto else sys.stdout)
    with _out_lock:
        stream.write(line)
        stream.flush()


def _on_alarm(_signum, _frame):
    raise Deadline()


class deadline(object):
    """``with deadline(seconds):`` interrupts the block with Deadline (main thread only; None = none)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        if self.seconds and self.seconds > 0:
            signal.signal(signal.SIGALRM, _on_alarm)
            signal.setitimer(signal.ITIMER_REAL, float(self.seconds))
        return self

    def __exit__(self, *exc):
        if self.seconds and self.seconds > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return False


# a helper started ahead of its first request (the laptop's preconnect) loads what that request most likely
# needs while it waits; a request sent with the start arrives within this and is answered first
PRELOAD_AFTER_S = 0.02
_NOTHING = object()


def serve(run_op, hello, idle_s=DEFAULT_IDLE_S, preload=None):
    """Answer requests until stdin closes or ``idle_s`` passes without one. ``run_op(op, req, timeout_s)``
    returns the answer dict (never raises). ``preload()``: run once when no request came with the start."""
    requests = queue.Queue()
    stdin = sys.stdin.buffer
    # answers go to a private copy of stdout; anything an op (or a child it starts) prints goes to stderr
    sys.stdout.flush()
    _proto.append(os.fdopen(os.dup(1), "w"))
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reader():
        while True:
            line = stdin.readline()
            if not line:
                break
            try:
                msg = json.loads(line.decode("utf-8"))
                if not isinstance(msg, dict):
                    raise ValueError("not an object")
            except ValueError as exc:
                emit({"id": None, "ok": False, "error": "bad request line: %s" % exc,
                      "hint": "send one JSON object per line"})
                continue
            if msg.get("op") == "ping":
                emit({"id": msg.get("id"), "ok": True, "pong": True, "t": time.time()})
            else:
                requests.put(msg)
        requests.put(None)

    emit(hello)
    t = threading.Thread(target=reader, name="stdin-reader")
    t.daemon = True
    t.start()
    first = _NOTHING
    if preload is not None:
        try:
            first = requests.get(timeout=PRELOAD_AFTER_S)
        except queue.Empty:
            try:
                preload()
            except Exception:  # noqa: BLE001 - the op that needs it reports its own failure
                pass
    while True:
        if first is not _NOTHING:
            msg, first = first, _NOTHING
        else:
            try:
                msg = requests.get(timeout=idle_s)
            except queue.Empty:
                msg = None  # idle: the laptop starts a new helper with its next request
        if msg is None:  # idle, or the channel closed
            _proto[0].flush()
            os._exit(0)  # the reader thread may sit in a blocking read: no interpreter shutdown
        req = msg.get("req")
        answer = run_op(msg.get("op"), req if isinstance(req, dict) else {}, msg.get("timeout_s"))
        answer["id"] = msg.get("id")
        emit(answer)


def idle_from_argv(argv):
    if "--idle" in argv:
        try:
            return float(argv[argv.index("--idle") + 1])
        except (IndexError, ValueError):
            pass
    return float(os.environ.get("TUNE_REMOTE_HELPER_IDLE_S") or DEFAULT_IDLE_S)
