"""The ``cancel`` op: TERM the job's process group (and every process carrying its marker), wait the grace
period, KILL what is left; report what was signalled, killed and what survived (e.g. D-state)."""

import os
import signal
import time

from .common import HelperError, epoch_s
from .files import json_bytes, atomic_write
from .runstate import run_paths, run_state
from .proctree import environ_has_marker, environ_run_dir, list_pids, pid_alive, proc_stat

def _job_processes(pgid, marker, run_dir, leader_ok):
    """Live (non-zombie) processes of the job: group members and marker carriers.

    Returns (group_members, marker_only): group members are ours when the leader is verified
    (group membership is inherited, and the pgid cannot be reused while the group exists);
    otherwise only processes that carry the marker are taken."""
    me = os.getpid()
    group, swept = [], []
    for pid in list_pids():
        if pid == me:
            continue
        st = proc_stat(pid)
        if st is None or st[0] in ("Z", "X", "x"):
            continue
        has = environ_has_marker(pid, marker) if marker else None
        if has:
            other_dir = environ_run_dir(pid)
            if other_dir and other_dir != run_dir:
                has = False
        in_group = bool(pgid) and st[2] == int(pgid)
        if in_group and (leader_ok or has):
            group.append(pid)
        elif has:
            swept.append(pid)
    return group, swept


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def op_cancel(req):
    run_dir = os.path.abspath(req.get("run_dir") or "")
    grace = float(req.get("grace_s", 10) if req.get("grace_s") is not None else 10)
    paths = run_paths(run_dir)
    st = run_state(run_dir)
    if st["state"] == "unknown":
        raise HelperError("cancel: %s is not a run directory (no command.json/record.json)" % run_dir,
                          hint="check the job id; `tune-remote status` lists known jobs")
    rec = st["record"] or {}
    marker = rec.get("marker") or (st["command"] or {}).get("marker")
    finished = st["state"] in ("succeeded", "failed", "cancelled") and not st["alive"]
    if finished:
        _, strays = _job_processes(None, marker, run_dir, False)
        if not strays:
            return {"state": st["state"], "signalled": [], "killed": [], "remaining": [],
                    "already_finished": True, "rc": st["rc"]}
    elif not os.path.exists(paths["cancelled"]):
        atomic_write(paths["cancelled"], json_bytes({"at": epoch_s(), "grace_s": grace}))
    pgid = rec.get("pgid") or rec.get("pid")
    leader_ok = pid_alive(rec.get("pid"), rec.get("starttime"), marker, rec.get("boot_id"))
    signalled, killed = [], []

    def term_round():
        group, swept = _job_processes(pgid, marker, run_dir, leader_ok)
        if group and leader_ok:
            try:
                os.killpg(int(pgid), signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            for p in group:
                if p not in signalled:
                    signalled.append(p)
        else:
            swept = group + swept
        for p in swept:
            if p not in signalled and _signal(p, signal.SIGTERM):
                signalled.append(p)
        return group + swept

    live = term_round()
    deadline = epoch_s() + max(0.0, grace)
    while live and epoch_s() < deadline:
        time.sleep(0.05)
        live = term_round()  # also catches processes forked after the first signal
    if live:
        group, swept = _job_processes(pgid, marker, run_dir, leader_ok)
        if group and leader_ok:
            try:
                os.killpg(int(pgid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            killed.extend(group)
        else:
            swept = group + swept
        for p in swept:
            if _signal(p, signal.SIGKILL):
                killed.append(p)
        end = epoch_s() + 5.0
        while epoch_s() < end:
            group, swept = _job_processes(pgid, marker, run_dir, leader_ok)
            live = group + swept
            if not live:
                break
            for p in live:
                _signal(p, signal.SIGKILL)
                if p not in killed:
                    killed.append(p)
            time.sleep(0.05)
    group, swept = _job_processes(pgid, marker, run_dir, leader_ok)
    final = run_state(run_dir)
    return {"state": final["state"], "signalled": sorted(signalled), "killed": sorted(set(killed)),
            "remaining": sorted(group + swept), "rc": final["rc"], "already_finished": finished}
