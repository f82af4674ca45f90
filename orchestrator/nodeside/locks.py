"""Node-side ownership: one running job per (container, variant), across laptops.

The lock is a file ``<work dir>/.tune-remote/locks/<variant>.lock`` (develop: <aiter root>/tune_logs) holding the owning job's
id, run dir and owner (laptop user@host, pid). It is *held* while that job's pipeline is starting or
running (``runstate.run_state``); a lock whose run has ended is stale and taken over. Creation is
O_EXCL; a takeover writes a temp file and renames it, then reads it back to see who won.
"""

import json
import os

from .common import HelperError, epoch_s, read_json_file
from .files import atomic_write, exclusive_write
from .runstate import run_state

LIVE = ("starting", "running")


def lock_path(workdir, variant):
    """``workdir``: the node work dir (develop: <aiter root>/tune_logs; install: ~/.tune-remote/tune_logs)."""
    return os.path.join(workdir, ".tune-remote", "locks", "%s.lock" % variant)


def holder(path):
    """The live holder of a lock (its record), or None when free or stale."""
    rec = read_json_file(path)
    if not isinstance(rec, dict) or not rec.get("run_dir"):
        return None
    state = run_state(rec["run_dir"])["state"]
    if state in LIVE:
        rec["state"] = state
        return rec
    if state == "unknown" and epoch_s() - float(rec.get("created") or 0) < 600:
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
            "" if since is None else ", %.0f s ago" % (epoch_s() - float(since))),
        hint="wait for it, follow it with `tune-remote logs %s -f`, or cancel it with "
             "`tune-remote cancel %s`" % (rec.get("job_id"), rec.get("job_id")),
        holder=rec)


def acquire(path, variant, job_id, run_dir, owner, what=None):
    """Take the lock for job_id (idempotent for the same job) or raise naming the live holder."""
    rec = {"job_id": job_id, "run_dir": run_dir, "owner": owner or {}, "created": epoch_s(), "variant": variant}
    data = json.dumps(rec, sort_keys=True).encode()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if exclusive_write(path, data):
        return rec
    cur = read_json_file(path) or {}
    if cur.get("job_id") == job_id and _same_owner(cur, owner):
        if cur.get("run_dir") != run_dir:
            atomic_write(path, data)
        return cur if cur.get("run_dir") == run_dir else rec
    live = holder(path)
    if live is not None:
        refuse(live, variant, what)
    atomic_write(path, data)            # stale: take it over, then see who won a simultaneous takeover
    won = read_json_file(path) or {}
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
    rec = read_json_file(path) or {}
    if rec.get("job_id") == job_id and rec.get("run_dir") == run_dir:
        try:
            os.unlink(path)
        except OSError:
            pass


CHAIN_POLL_S = 1.5      # a chained run's look at the run before it and at its GPUs, while it waits


def chain_wait(after, spec, paths, term, log_fd, poll_s=CHAIN_POLL_S, sleep=None, in_use=None):
    """A chained run: wait (node side) for the run before it to end, then until it can take the GPUs that run
    held: none reserved by another live job, and (``lock.busy_threshold`` given: discover chose them by the free
    rule) none in use by anything else. None when the job may start; else the rc to write (128+N: cancelled
    or signalled while waiting). ``sleep``/``in_use``: the tests' stand-ins for time.sleep and gpus.in_use."""
    import time  # noqa: PLC0415
    sleep = sleep or time.sleep

    def say(text):
        os.write(log_fd, ("[tune-remote] %s\n" % text).encode())

    say("waiting for %s to end" % after["run_dir"])
    while run_state(after["run_dir"])["state"] in LIVE:
        rc = _stopped(term, paths)
        if rc is not None:
            return rc
        sleep(poll_s)
    lock = after.get("lock") or {}
    if not lock.get("gpus"):
        return _stopped(term, paths)
    work = lock.get("workdir") or os.path.join(lock["aiter_root"], "tune_logs")
    if lock.get("busy_threshold") is None:     # --gpus given or granted by a scheduler: used as they are
        in_use = None
    elif in_use is None:
        from . import gpus  # noqa: PLC0415
        in_use = gpus.in_use
    said = None
    while True:
        why = _gpus_taken(work, lock, spec, in_use)
        rc = _stopped(term, paths)          # after the look: a TERM also ends the smi tool it ran
        if rc is not None:
            return rc
        if why is None:
            try:
                acquire_gpus(work, lock["gpus"], lock["variant"], spec["job_id"], spec["run_dir"], lock.get("owner"))
                return None
            except HelperError as exc:      # taken between the look and the grab: look again next time
                why = (("taken",), exc.error)
        if why[0] != said:                  # one line per change of what it waits for
            say("waiting for GPU(s) %s: %s" % (",".join(str(g) for g in sorted(set(map(int, lock["gpus"])))), why[1]))
            said = why[0]
        sleep(poll_s)


def _stopped(term, paths):
    """The rc of a waiting run that was signalled or cancelled (128+N, SIGTERM for a cancel), else None."""
    import signal  # noqa: PLC0415
    if term["signal"] or os.path.exists(paths["cancelled"]):
        return 128 + (term["signal"] or signal.SIGTERM)
    return None


def _gpus_taken(work, lock, spec, in_use):
    """(key, words) of what keeps a chained run from its GPUs now, or None: another live job's reservation (a
    dead owner's is stale, taken over by acquire_gpus), else a use by anything (in_use, when it is asked)."""
    held = {}       # (job, who) -> (its record, [gpu]): a line per change of the jobs, not of each GPU
    for g in sorted(set(int(x) for x in lock["gpus"])):
        rec = holder(gpu_lock_path(work, g))
        if rec is not None and not (rec.get("job_id") == spec["job_id"] and _same_owner(rec, lock.get("owner"))):
            job = (str(rec.get("job_id")), str((rec.get("owner") or {}).get("who", "?")))
            held.setdefault(job, (rec, []))[1].append(g)
    if held:
        return tuple(sorted(held)), "; ".join(
            "GPU %s reserved by job %s (%s, %s, started by %s)" % (
                ",".join(map(str, gs)), job, rec.get("variant") or "?", rec.get("state"), who)
            for (job, who), (rec, gs) in sorted(held.items()))
    if in_use is None:
        return None
    busy = in_use(lock["gpus"], lock["busy_threshold"])
    if not busy:
        return None
    return (("in use",) + tuple(sorted(busy)),
            "; ".join("GPU %d is in use (%s) by no tune-remote job: a node may be serving, its GPUs are not taken"
                      % (g, ", ".join(why)) for g, why in sorted(busy.items())))
