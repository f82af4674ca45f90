"""The stalled-tuner watchdog (``node_helper.py _watch``): runs the tune line as its child (in the job's
own process group, so whatever kills the job kills the tuner too) and kills the tuner's whole process
tree when neither the step's log (our stdout) nor the tuned table has changed for STALL seconds, then
relaunches it (the tuner skips the shapes already in its -o table), at most
RELAUNCHES times. AITER's mp_tuner can livelock silently (aiter-after-v0.1.20.md); --timeout does
not catch it because no task ever starts or ends.

usage: node_helper.py _watch STALL_S RELAUNCHES TABLE -- LINE
Exit status: the tuner's own; 124 when it stalled once more than allowed.
"""

import os
import signal
import subprocess
import sys
import time

STALL_TAG = "[tune-remote] stall:"


def _say(text):
    sys.stdout.write("%s %s\n" % (STALL_TAG, text))
    sys.stdout.flush()


def _signature(paths):
    sig = []
    try:
        sig.append(os.fstat(1).st_size)
    except OSError:
        sig.append(None)
    for p in paths:
        try:
            st = os.stat(p)
            sig.append((st.st_size, st.st_mtime_ns))
        except OSError:
            sig.append(None)
    return tuple(sig)


def _children_map():
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(name))
    return out


def _tree(pid):
    kids, out, todo = _children_map(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _kill_tree(proc, grace_s=5.0):
    """TERM the tuner and every descendant (mp_tuner workers), then KILL what is left."""
    victims = _tree(proc.pid)
    for p in victims:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.time() + grace_s
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    for p in set(victims) | set(_tree(proc.pid) if proc.poll() is None else []):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def watch(proc, stall_s, paths):
    """True when the process stalled (and its tree was killed), False when it ended by itself."""
    last, changed = _signature(paths), time.time()
    step = max(0.2, min(2.0, stall_s / 10.0))
    while proc.poll() is None:
        time.sleep(step)
        sig = _signature(paths)
        now = time.time()
        if sig != last:
            last, changed = sig, now
        elif now - changed >= stall_s:
            _kill_tree(proc)
            proc.wait()
            return True
    return False


def main(args):
    if len(args) < 5 or args[3] != "--":
        sys.stderr.write("usage: node_helper.py _watch STALL_S RELAUNCHES TABLE -- LINE\n")
        return 2
    stall_s, relaunches, table, line = float(args[0]), int(args[1]), args[2], args[4]
    current = {"proc": None}

    def forward(signum, _frame):
        if current["proc"] is not None:
            _kill_tree(current["proc"], grace_s=2.0)
        sys.exit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, forward)
    stalls = 0
    while True:
        current["proc"] = proc = subprocess.Popen(["sh", "-c", line])
        if not watch(proc, stall_s, [table]):
            return proc.returncode
        stalls += 1
        _say("the tuner printed nothing and wrote no row for %gs: killed it and its workers (%d of %d "
             "relaunches)" % (stall_s, min(stalls, relaunches), relaunches))
        if stalls > relaunches:
            _say("still stalled after %d relaunches: giving up" % relaunches)
            return 124
        _say("relaunching the tuner (it skips the shapes already tuned)")
