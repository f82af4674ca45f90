"""Node-side ownership: one running job per (container, variant), across laptops.

The lock is a file ``<work dir>/.tune-remote/locks/<variant>.lock`` (develop: <aiter root>/tune_logs) holding the owning job's
id, run dir and owner (laptop user@host, pid). It is *held* while that job's pipeline is starting or
running (``procs.run_state``); a lock whose run has ended is stale and taken over. Creation is
O_EXCL; a takeover writes a temp file and renames it, then reads it back to see who won.
"""

import json
import os

from common import HelperError, _now, _read_json
from files import atomic_write, exclusive_write

LIVE = ("starting", "running")


def lock_path(workdir, variant):
    """``workdir``: the node work dir (develop: <aiter root>/tune_logs; install: ~/.tune-remote/tune_logs)."""
    return os.path.join(workdir, ".tune-remote", "locks", "%s.lock" % variant)


def holder(path):
    """The live holder of a lock (its record), or None when free or stale."""
    import procs  # noqa: PLC0415 - procs imports much; only callers that lock need it
    rec = _read_json(path)
    if not isinstance(rec, dict) or not rec.get("run_dir"):
        return None
    state = procs.run_state(rec["run_dir"])["state"]
    if state in LIVE:
        rec["state"] = state
        return rec
    if state == "unknown" and _now() - float(rec.get("created") or 0) < 600:
        rec["state"] = "preparing"          # locked before launch: the run dir is not written yet
        return rec
    return None


def refuse(rec, variant, what=None):
    who = rec.get("owner") or {}
    since = rec.get("created")
    raise HelperError(
        "job %s is already %s %s (started by %s%s)" % (
            rec.get("job_id"), rec.get("state", "running"), what or "for %s in this container" % variant,
            who.get("who", "?"),
            "" if since is None else ", %.0f s ago" % (_now() - float(since))),
        hint="wait for it, follow it with `tune-remote logs %s -f`, or cancel it with "
             "`tune-remote cancel %s`" % (rec.get("job_id"), rec.get("job_id")),
        holder=rec)


def acquire(path, variant, job_id, run_dir, owner, what=None):
    """Take the lock for job_id (idempotent for the same job) or raise naming the live holder."""
    rec = {"job_id": job_id, "run_dir": run_dir, "owner": owner or {}, "created": _now(), "variant": variant}
    data = json.dumps(rec, sort_keys=True).encode()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if exclusive_write(path, data):
        return rec
    cur = _read_json(path) or {}
    if cur.get("job_id") == job_id and _same_owner(cur, owner):
        if cur.get("run_dir") != run_dir:
            atomic_write(path, data)
        return cur if cur.get("run_dir") == run_dir else rec
    live = holder(path)
    if live is not None:
        refuse(live, variant, what)
    atomic_write(path, data)            # stale: take it over, then see who won a simultaneous takeover
    won = _read_json(path) or {}
    if won.get("job_id") != job_id:
        live = holder(path)
        if live is not None:
            refuse(live, variant, what)
    return rec


def _same_owner(rec, owner):
    """The same job id from another laptop (its own workspace) is another job: it would overwrite the
    untuned CSV under the running tuner. Same user@host = the same laptop (a resume)."""
    mine, theirs = owner or {}, rec.get("owner") or {}
    for key in ("who", "workspace"):
        if mine.get(key) and theirs.get(key) and mine[key] != theirs[key]:
            return False
    return True


def check(path, variant, job_id, owner=None):
    """Early check (no side effect): raise if another job (or the same id from another laptop) holds it."""
    live = holder(path)
    if live is not None and (live.get("job_id") != job_id or not _same_owner(live, owner)):
        refuse(live, variant)
    return live


# ---- GPU reservations: gpu-<physical index>.lock, same record, held while the owning run lives ----

def gpu_lock_path(workdir, gpu):
    return os.path.join(os.path.dirname(lock_path(workdir, "x")), "gpu-%d.lock" % int(gpu))


def gpus_held(workdir, job_id=None, owner=None):
    """{physical gpu: record} of the GPUs a live job other than (job_id, owner) holds."""
    d = os.path.dirname(lock_path(workdir, "x"))
    try:
        names = os.listdir(d)
    except OSError:
        return {}
    held = {}
    for name in names:
        if not (name.startswith("gpu-") and name.endswith(".lock") and name[4:-5].isdigit()):
            continue
        live = holder(os.path.join(d, name))
        if live is not None and (live.get("job_id") != job_id or not _same_owner(live, owner)):
            held[int(name[4:-5])] = live
    return held


def acquire_gpus(workdir, gpus, variant, job_id, run_dir, owner):
    """Reserve every GPU of a run or none: a GPU a live other job holds refuses the launch naming both."""
    taken = []
    try:
        for g in sorted(set(int(x) for x in gpus)):
            path = gpu_lock_path(workdir, g)
            acquire(path, variant, job_id, run_dir, owner, what="on GPU %d in this container" % g)
            taken.append(path)
    except HelperError:
        for path in taken:
            release(path, job_id, run_dir)
        raise


def release(path, job_id, run_dir):
    """Remove a lock this run took (ours only: the record names this job and run dir)."""
    rec = _read_json(path) or {}
    if rec.get("job_id") == job_id and rec.get("run_dir") == run_dir:
        try:
            os.unlink(path)
        except OSError:
            pass


def chain_wait(after, spec, paths, term, log_fd):
    """A chained run: wait (node side) for the run before it to end, then take the GPUs it held. None when
    the job may start; else the rc to write (128+N: cancelled or signalled while waiting; 75: GPUs taken)."""
    import time  # noqa: PLC0415
    import procs  # noqa: PLC0415
    import signal  # noqa: PLC0415
    os.write(log_fd, ("[tune-remote] waiting for %s to end\n" % after["run_dir"]).encode())
    while procs.run_state(after["run_dir"])["state"] in ("starting", "running"):
        if term["signal"] or os.path.exists(paths["cancelled"]):
            return 128 + (term["signal"] or signal.SIGTERM)
        time.sleep(1.0)
    if term["signal"] or os.path.exists(paths["cancelled"]):
        return 128 + (term["signal"] or signal.SIGTERM)
    lock = after.get("lock") or {}
    if lock.get("gpus"):
        work = lock.get("workdir") or os.path.join(lock["aiter_root"], "tune_logs")
        try:
            acquire_gpus(work, lock["gpus"], lock["variant"], spec["job_id"], spec["run_dir"], lock.get("owner"))
        except HelperError as exc:
            os.write(log_fd, ("[tune-remote] cannot take the GPUs: %s\n" % exc).encode())
            return 75
    return None
