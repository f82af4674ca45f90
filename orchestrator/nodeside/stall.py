"""The stalled-tuner watchdog (``node_helper.py _stall``): runs the tune line as its child (in the job's
own process group, so whatever kills the job kills the tuner too) and kills the tuner's whole process
tree when neither the step's log (our stdout) nor the tuned table has changed for STALL seconds, then
relaunches it (the tuner skips the shapes already in its -o table), at most
RELAUNCHES times. AITER's mp_tuner can livelock silently (aiter-after-v0.1.20.md); --timeout does
not catch it because no task ever starts or ends.

After every exit of the tuner (its own, a stall kill, a TERM of the job) the table is checked and, when
torn or missing rows of the backup, repaired from it (tables.py); a repair is said in the log.
A watchdog that was frozen (``docker pause``, SIGSTOP) does not count the frozen time as a stall.

usage: node_helper.py _stall STALL_S RELAUNCHES TABLE [--backup B] [--keys K1,K2..] [--keep DIR] -- LINE
STALL_S 0 = no stall detection (the table is still checked). Exit status: the tuner's own; 124 when it
stalled once more than allowed.
"""

import os
import signal
import subprocess
import sys
import time

STALL_TAG = "[tune-remote] stall:"
FROZEN_S = 5.0   # a poll step that took this much longer than asked: we were frozen, not the tuner


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
    if stall_s <= 0:
        proc.wait()
        return False
    last, changed = _signature(paths), time.monotonic()
    step = max(0.2, min(2.0, stall_s / 10.0))
    while proc.poll() is None:
        before = time.monotonic()
        try:
            proc.wait(timeout=step)       # the tuner's end is seen at once, not a poll step later (issue 9)
            break
        except subprocess.TimeoutExpired:
            pass
        sig = _signature(paths)
        now = time.monotonic()
        if sig != last or now - before > step + FROZEN_S:   # changed, or the whole container was frozen
            last, changed = sig, now
        elif now - changed >= stall_s:
            _kill_tree(proc)
            proc.wait()
            return True
    return False


def _options(args):
    """(stall_s, relaunches, table, {backup, keys, keep}, line) or None."""
    if "--" not in args:
        return None
    cut = args.index("--")
    head, tail = args[:cut], args[cut + 1:]
    if len(head) < 3 or len(tail) != 1:
        return None
    opts = {"backup": None, "keys": [], "keep": None}
    rest = head[3:]
    while rest:
        if len(rest) < 2 or rest[0] not in ("--backup", "--keys", "--keep"):
            return None
        name, value = rest[0][2:], rest[1]
        opts[name] = [k for k in value.split(",") if k] if name == "keys" else value
        rest = rest[2:]
    return float(head[0]), int(head[1]), head[2], opts, tail[0]


def _check_table(table, opts):
    """Validate (and repair) the table after the tuner ended; a repair is said in the log."""
    if not opts["keys"]:
        return
    try:
        from . import tables  # noqa: PLC0415
        res = tables.check_and_repair(table, opts["backup"], opts["keys"],
                                      opts["keep"] or os.path.dirname(os.path.abspath(table)))
        line = tables.say(res, table)
    except Exception as exc:  # noqa: BLE001 - never lose the tuner's exit status over a check
        line = "[tune-remote] table: could not check %s: %s" % (table, exc)
    if line:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main(args):
    parsed = _options(args)
    if parsed is None:
        sys.stderr.write("usage: node_helper.py _stall STALL_S RELAUNCHES TABLE [--backup B] [--keys K,..] "
                         "[--keep DIR] -- LINE\n")
        return 2
    stall_s, relaunches, table, opts, line = parsed
    current = {"proc": None}

    def forward(signum, _frame):
        if current["proc"] is not None:
            _kill_tree(current["proc"], grace_s=2.0)
        _check_table(table, opts)           # a cancel may have landed in the middle of a rewrite
        sys.exit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, forward)
    stalls = 0
    while True:
        current["proc"] = proc = subprocess.Popen(["sh", "-c", line])
        stalled = watch(proc, stall_s, [table])
        _check_table(table, opts)           # a kill can land in the middle of the tuner's in-place rewrite
        if not stalled:
            return proc.returncode
        stalls += 1
        _say("the tuner printed nothing and wrote no row for %gs: killed it and its workers (%d of %d "
             "relaunches)" % (stall_s, min(stalls, relaunches), relaunches))
        if stalls > relaunches:
            _say("still stalled after %d relaunches: giving up" % relaunches)
            return 124
        _say("relaunching the tuner (it skips the shapes already tuned)")
