"""The node's truth about one detached run, read from its run directory (see procs.py) and /proc: never
signals anything. Used by launch (procs.py), the locks (locks.py: a lock whose run ended is stale), status
(runlog.py) and cancel (killing.py)."""

import os

from .common import boot_id, epoch_s, read_file_text, read_json_file
from .proctree import pid_alive, proc_starttime

LAUNCH_TIMEOUT_S = 60.0


def run_paths(run_dir):
    return {
        "command": os.path.join(run_dir, "command.json"),
        "record": os.path.join(run_dir, "record.json"),
        "rc": os.path.join(run_dir, "rc"),
        "cancelled": os.path.join(run_dir, "cancelled"),
    }


def _read_rc(path):
    text = read_file_text(path)
    if text is None:
        return None, False
    try:
        return int(text.strip().split()[0]), True
    except (ValueError, IndexError):
        return None, True


def run_state(run_dir):
    """The node's truth about one run: state, rc, liveness. Never signals anything."""
    paths = run_paths(run_dir)
    record = read_json_file(paths["record"])
    command = read_json_file(paths["command"])
    rc, has_rc = _read_rc(paths["rc"])
    cancelled = os.path.exists(paths["cancelled"])
    out = {"record": record, "command": command, "rc": rc, "cancel_requested": cancelled,
           "pid": None, "child_pid": None, "alive": False, "wrapper_alive": False, "child_alive": False,
           "reason": None}
    if record is None and command is None:
        out["state"] = "unknown"
        out["reason"] = "no command.json or record.json in %s" % run_dir
        return out
    rec = record or {}
    marker = rec.get("marker") or (command or {}).get("marker")
    if record is not None and not record.get("_unreadable"):
        out["pid"] = rec.get("pid")
        out["child_pid"] = rec.get("child_pid")
        rb = rec.get("boot_id")
        out["wrapper_alive"] = pid_alive(rec.get("pid"), rec.get("starttime"), marker, rb)
        out["child_alive"] = pid_alive(rec.get("child_pid"), rec.get("child_starttime"), marker, rb)
        if rb and boot_id() and rb != boot_id():
            out["reason"] = "the node rebooted since launch (boot_id changed)"
        elif rec.get("init_starttime") and proc_starttime(1) not in (None, rec.get("init_starttime")):
            out["reason"] = "the container restarted since launch (its PID 1 is newer than the job)"
            out["container_restarted"] = True
    out["alive"] = bool(out["wrapper_alive"] or out["child_alive"])
    out["waiting_for"] = rec.get("waiting_for") if out["alive"] else None   # a chained run not started yet
    if has_rc and not out["alive"]:
        out["state"] = "cancelled" if cancelled else ("succeeded" if rc == 0 else "failed")
    elif out["alive"]:
        out["state"] = "running"
    elif record is None:
        age = epoch_s() - float((command or {}).get("created") or 0)
        if age < LAUNCH_TIMEOUT_S and not cancelled:
            out["state"] = "starting"
        else:
            out["state"] = "cancelled" if cancelled else "lost"
            out["reason"] = out["reason"] or "command.json exists but the job never recorded a start"
    else:
        out["state"] = "cancelled" if cancelled else "lost"
        if not cancelled and not out["reason"]:
            out["reason"] = ("no rc file and the process is gone (killed by SIGKILL/OOM, or the "
                             "container restarted)")
    return out
