"""`status` as a long poll: with ``wait_s`` the answer comes when something happened, not a poll later.

Answers at once when a run's state is final or its own log (the pipeline's markers) grew; when only
the other ``files`` grew (a chatty step log), answers once ``min_s`` has passed since the request, so
a busy log does not turn polling into a busy loop; otherwise answers after ``wait_s``. Between full
``status`` computations it only stats the run files and the logs and reads ``/proc/<pid>/stat`` every 10 ms.
``on_end``: the answer that finds every run ended also carries the manifest the laptop asks for next.
"""

import os
import time

from . import files
from . import runlog
from .proctree import proc_stat

MAX_WAIT_S = 60.0
TICK_S = 0.01
_RUN_FILES = ("rc", "record.json", "cancelled", "command.json")


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns if hasattr(st, "st_mtime_ns") else st.st_mtime)


def _alive(pid):
    """As runlog judges it: a zombie is dead (an unreaped wrapper keeps its /proc entry)."""
    st = pid and proc_stat(pid)
    return bool(st) and st[0] not in ("Z", "X", "x")


def _fingerprint(answer):
    """(the runs' own files, logs and processes; the other files): what the wait watches, by stat."""
    keys = []
    for run in answer.get("runs") or []:
        keys.extend(_stat(os.path.join(run["run_dir"], n)) for n in _RUN_FILES)
        if run.get("log_path"):
            keys.append(_stat(run["log_path"]))
        for pid in (run.get("pid"), run.get("child_pid")):
            keys.append(_alive(pid))
    return keys, [_stat(f["path"]) for f in answer.get("files") or [] if f.get("path")]


def _seconds(value, cap):
    try:
        return max(0.0, min(float(value or 0), cap))
    except (TypeError, ValueError):
        return 0.0


def _with_end(answer, req):
    """``on_end``: when every run has ended, the answer also carries the manifest the laptop asks next."""
    ask = (req.get("on_end") or {}).get("manifest")
    runs = answer.get("runs") or []
    if ask and runs and all(r.get("state") not in ("running", "starting") for r in runs):
        answer["on_end"] = {"manifest": files.op_manifest(ask)}
    return answer


def op_status(req):
    return _with_end(_op_status(req), req)


def _op_status(req):
    wait_s = _seconds(req.get("wait_s"), MAX_WAIT_S)
    min_s = _seconds(req.get("min_s"), wait_s)
    t0 = time.time()
    answer = runlog.op_status(req)
    if wait_s <= 0:
        return answer
    # the fingerprint is always taken BEFORE the answer it is compared with is read: a change that lands
    # between the read and the fingerprint would otherwise be in neither, and the poll would sleep through
    # a step's end until wait_s (a lost wake-up; seen as a 2 s poll after the pipeline had finished)
    seen = _fingerprint(answer)
    answer = runlog.op_status(req)
    while True:
        elapsed = time.time() - t0
        urgent = any(r.get("state") not in ("running", "starting") or r.get("data_b64")
                     for r in answer.get("runs") or [])
        files_news = any(f.get("data_b64") or f.get("reset") for f in answer.get("files") or [])
        if urgent or elapsed >= wait_s or (files_news and elapsed >= min_s):
            answer["waited_s"] = round(elapsed, 3)
            return answer
        until = t0 + (min_s if files_news else wait_s)
        while time.time() < until:
            runs, files = _fingerprint(answer)
            if runs != seen[0] or (not files_news and files != seen[1]):
                break
            time.sleep(TICK_S)
        seen = _fingerprint(answer)
        answer = runlog.op_status(req)
