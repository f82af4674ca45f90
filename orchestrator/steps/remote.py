"""The detached node pipeline: launch once (idempotent per run dir), then poll with one round trip each.

Each poll asks the helper for the pipeline's state and the new bytes of the pipeline log and of the
current step's log; the bytes are appended to live local copies under <job>/logs/.
"""

from __future__ import annotations

import base64
import os
import re
import time

from ..context import Ctx, owner
from ..errors import ConnectionLost, JobError, ObserverError, TuneRemoteError
from ..remote.detached import HelperCallError
from ..state import Status
from ..warm import warm_up
from ..workflow import REMOTE_STEPS
from .prepare import local_log_path

MAX_BYTES_PER_POLL = 256 * 1024
# a poll answers in well under a second; a silent path (no RST, keepalives unanswered) must not stall
# the laptop for the 5-minute default: give up on the channel and reconnect with back-off instead
LAUNCH_TIMEOUT_S = 300.0   # Ctx.call's default: a loaded node may start the supervisor slowly
POLL_TIMEOUT_S = 30
_MARK = re.compile(r"^== (\S+) (start|rc|partial|already-done|failed|done)\b ?(.*)$")


def pipeline_argv(ctx: Ctx, run_dir: str) -> list[str]:
    argv = ["sh", ctx.target.helper.pipeline, run_dir]
    for s in ctx.job.remote.pipeline:
        argv += [s["name"], s["log"], s["line"], s["marker"]]
    return argv


def launch(ctx: Ctx, with_poll: bool = False) -> dict:
    job = ctx.job
    # a relaunch (resume --relaunch) has its own run dir; the steps it carries over are marked done there
    run_dir = job.remote.run_dir or f"{job.remote.job_dir}/pipeline"
    job.remote.run_dir = run_dir
    job.remote.pipeline_log = f"{job.remote.job_dir}/pipeline.log"
    if not ctx.target.helper.calls:  # a resumed process: make sure pipeline.sh (beside the helper) is there
        ctx.call("version")
    carried = job.remote.pop("carry_rc", None)
    launched_before = bool(ctx.job.step_state("remote").info.get("launched")) and carried is None
    if carried:
        ctx.call("write_files", {"files": [{"path": f"{run_dir}/{name}.rc", "content": "0\n", "backup_dir": None}
                                           for name in carried]})
    req = {
        "job_id": job.job_id, "step": "pipeline", "run_dir": run_dir,
        # inventory env travels in the launch request only: the node keeps its names, never its values
        "argv": pipeline_argv(ctx, run_dir), "cwd": job.remote.aiter_root,
        "env": dict(ctx.target.container.env),
        "log_path": job.remote.pipeline_log, "must_exist": launched_before,
        "lock": {"aiter_root": job.remote.aiter_root, "workdir": job.remote.logs_dir,
                 "variant": job.variant, "owner": owner(ctx),
                 "gpus": job.facts.tune_gpus or []},
    }
    chain = job.request.get("chain_after") or {}
    if chain.get("run_dir"):   # a detached campaign's later variant: it starts on the node once that run ended
        req["after"] = chain["run_dir"]
        if chain.get("busy_threshold") is not None:   # GPUs chosen free: it waits while they are in use
            req["lock"]["busy_threshold"] = chain["busy_threshold"]
    res = status = poll = None
    if with_poll:   # the first long poll rides along: the launch answer comes with the first step's news
        poll = poll_request(ctx, wait=True, ahead=True)
        try:
            res, status = ctx.call_batch([("launch", req), ("status", poll[0])], soft_last=True,
                                         timeout=LAUNCH_TIMEOUT_S + poll[0]["wait_s"])
        except (HelperCallError, ConnectionLost):
            raise                   # the launch itself failed on the node, or the node is out of reach
        except TuneRemoteError as exc:   # the watching's trouble (a helper that died in the poll, a slow
            ctx.ui.event(f"the launch's first poll failed ({exc.message}); launching alone")   # answer)
    if res is None:
        res = ctx.call("launch", req, timeout=LAUNCH_TIMEOUT_S)      # idempotent: a launched run is found
    info = ctx.job.step_state("remote").info
    info["launched"] = info.get("launched", 0) + (1 if res.get("launched") else 0)
    if not info["launched"] and (res.get("record") or res.get("command")):
        info["launched"] = 1        # launched by us, its answer lost (a resume): a later resume must find it
    info["record"] = res.get("record")
    if status is not None and status.get("ok"):     # else the watch loop asks again (an observer's error)
        try:
            ctx.prefetched["poll"] = poll_apply(ctx, status, poll[1])
        except TuneRemoteError as exc:
            ctx.ui.event(f"could not read the job's state ({exc.message}); asking again")
    ctx.save()
    return res


def _apply_markers(info: dict, text: str) -> None:
    """Marker lines of pipeline.sh -> sub-step states. Node output is not trusted: a garbled marker or an
    unknown step name is ignored (it must never crash this or any later `resume`)."""
    sub = info.setdefault("sub", {})
    for line in text.splitlines():
        m = _MARK.match(line.strip())
        if not m:
            continue
        name, what, rest = m.groups()
        if name not in REMOTE_STEPS:
            continue
        words = rest.split()
        s = sub.setdefault(name, {"status": Status.PENDING})
        if what == "start":
            s.update(status=Status.RUNNING, started=_number(words[0]) if words else None)
            info["current"] = name
        elif what in ("rc", "already-done"):
            rc = _number(words[-1]) if words else None
            rc = int(rc) if rc is not None and float(rc).is_integer() else 1   # garbage rc = failure
            s.update(status=Status.DONE if rc == 0 else Status.FAILED, rc=rc)
        elif what == "partial":
            s.update(status="partial")


def _number(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None


def _local_size(path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _write_at(path, offset: int, data: bytes) -> None:
    """Write a chunk at its node offset and cut what follows: re-reading a chunk (a laptop killed
    between this write and saving the offsets, a re-sent poll) never duplicates bytes."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
        fh.truncate()


def poll_once(ctx: Ctx, wait: bool = True, ahead: bool = False) -> dict:
    """One round trip: pipeline state + new log bytes. Returns the run status dict. With ``wait`` a long
    poll: the helper answers as soon as the run's state or the pipeline log changes (a step ended), after
    poll_s/2 when only the step log grew, else after poll_s (nodeside/longpoll.py)."""
    req, asked = poll_request(ctx, wait, ahead)
    return poll_apply(ctx, ctx.call("status", req, timeout=POLL_TIMEOUT_S + req["wait_s"]), asked)


def poll_request(ctx: Ctx, wait: bool = True, ahead: bool = False) -> tuple[dict, dict]:
    """The ``status`` request of one poll, and what ``poll_apply`` needs to take its answer."""
    job = ctx.job
    info = job.step_state("remote").info
    offsets = info.setdefault("offsets", {})
    plog = job.remote.pipeline_log
    current = info.get("current")
    local_plog = ctx.job_dir / "pipeline.log"
    files = []
    if current:
        step_log = job.remote.logs[current]
        # never ask past what the local copy holds (it may be shorter than the saved offset if lost)
        off = min(offsets.get(step_log, 0), _local_size(local_log_path(ctx, step_log)))
        files.append({"path": step_log, "offset": off, "step": current})
    plog_off = min(offsets.get(plog, 0), _local_size(local_plog))
    wait_s = ctx.settings.poll_s if wait else 0
    req = {"runs": [{"run_dir": job.remote.run_dir, "offset": plog_off}], "files": files,
           "max_bytes": MAX_BYTES_PER_POLL, "wait_s": wait_s, "min_s": wait_s / 2}
    asked = {"files": files, "plog_off": plog_off, "current": current, "wanted": None}
    if ahead:   # the driver's polls: once the pipeline ended, the answer carries the manifest compare asks next
        from .fetch import manifest_request, wanted_files
        asked["wanted"] = list(wanted_files(ctx, ctx.job_dir))
        req["on_end"] = {"manifest": manifest_request(ctx, asked["wanted"])}
    return req, asked


def poll_apply(ctx: Ctx, res: dict, asked: dict) -> dict:
    """A ``status`` answer -> the local logs, offsets and sub-step states; the run status dict."""
    job = ctx.job
    info = job.step_state("remote").info
    offsets = info.setdefault("offsets", {})
    plog = job.remote.pipeline_log
    local_plog = ctx.job_dir / "pipeline.log"
    files, plog_off, current, wanted = asked["files"], asked["plog_off"], asked["current"], asked["wanted"]
    run = res["runs"][0]
    run["long_poll"] = "waited_s" in res
    if res.get("now") is not None:
        info["node_now"] = res["now"]      # the node's clock: what it builds from now on (jitprofile ahead)
    data = base64.b64decode(run.get("data_b64") or "")
    if data:
        at = run.get("offset")
        _write_at(local_plog, plog_off if at is None else at, data)
        offsets[plog] = run["next_offset"]
        # markers re-read after a lost save are applied again: _apply_markers is idempotent
        _apply_markers(info, data.decode("utf-8", "replace"))
    for f, asked in zip(res.get("files") or [], files):
        chunk = base64.b64decode(f.get("data_b64") or "")
        if chunk:
            at = f.get("offset")
            _write_at(local_log_path(ctx, f["path"]), asked["offset"] if at is None else at, chunk)
            offsets[f["path"]] = f["next_offset"]
            if asked.get("step") == "tune":
                _tuning_results(info, chunk)
        info["tail"] = {k: f.get(k) for k in ("progress", "last_line", "age_s", "size")}
        info["tail"]["step"] = current
    info["state"] = run["state"]
    more = bool(data) and run.get("next_offset", 0) < run.get("log_size", 0)
    run["more"] = more or any((f.get("next_offset", 0) < f.get("size", 0)) for f in res.get("files") or [])
    if wanted is not None and (res.get("on_end") or {}).get("manifest") and not run["more"]:
        ctx.prefetched["manifest"] = (wanted, res["on_end"]["manifest"])
    return run


LIVE_RESULTS = 200    # the live tuning table keeps the newest per-shape results (the report reads the table)


def _tuning_results(info: dict, chunk: bytes) -> None:
    """The tuner's per-shape result lines in new tuning-log bytes -> ``info["results"]`` (P-11)."""
    from ..parsing.tuneresults import feed
    got, info["results_pending"] = feed(info.get("results_pending") or "", chunk.decode("utf-8", "replace"))
    if got:
        info["results"] = ((info.get("results") or []) + got)[-LIVE_RESULTS:]
        info["results_seen"] = int(info.get("results_seen") or 0) + len(got)
        info["results_none"] = int(info.get("results_none") or 0) + sum(1 for r in got if not r["kernel"])


def settle_tuning_results(ctx: Ctx) -> None:
    """Once the whole tuning log is local (compare pulls it): the per-shape results read from all of it. The
    polls feed the live view from the bytes they bring while the tune step runs; the tail written as the step
    ended arrives with the next step's polls or the pull, not through them."""
    from ..parsing.tuneresults import feed
    log = (ctx.job.remote.logs or {}).get("tune")
    path = local_log_path(ctx, log) if log else None
    if path is None or not path.is_file():
        return
    info = ctx.job.step_state("remote").info
    got, _rest = feed("", path.read_bytes().decode("utf-8", "replace") + "\n")
    info["results"], info["results_seen"], info["results_pending"] = got[-LIVE_RESULTS:], len(got), ""
    info["results_none"] = sum(1 for r in got if not r["kernel"])


def _poll_watching(ctx: Ctx, since: list) -> dict | None:
    """One poll; an error of the *observer* (helper crash, ok:false, garbage, a slow answer) is retried
    within settings.observe_s and never judged as the job's failure. Returns None to poll again."""
    try:
        run = poll_once(ctx, ahead=True)
    except ConnectionLost:
        raise                       # Ctx.call already used the whole reconnect window
    except TuneRemoteError as exc:
        now = time.monotonic()
        if since[0] is None:
            since[0] = now
        if now - since[0] >= ctx.settings.observe_s:
            raise ObserverError(f"could not watch job {ctx.job.job_id} for {ctx.settings.observe_s:g} s: "
                                f"{exc.one_line()}",
                                hint=f"the job goes on on the node; `tune-remote resume {ctx.job.job_id}` "
                                     "re-attaches") from exc
        ctx.ui.event(f"could not read the job's state ({exc.message}); retrying")
        ctx.sleep(max(ctx.settings.poll_s, 1.0))
        return None
    since[0] = None
    return run


def wait(ctx: Ctx, t0: float | None = None) -> None:
    """Watch the launched pipeline to its end; ``t0``: when watching began (the launch that carried the
    first poll), for ``info["poll_seconds"]``."""
    job = ctx.job
    info = job.step_state("remote").info
    t0 = time.monotonic() if t0 is None else t0
    failing_since: list = [None]
    while True:
        run = ctx.prefetched.pop("poll", None) or _poll_watching(ctx, failing_since)
        if run is None:
            continue
        ctx.save()
        ctx.ui.progress(job, info)
        if run["state"] not in (Status.RUNNING, "starting") and not run["more"]:
            break
        if not run["more"] and not run.get("long_poll"):   # a long poll already waited on the node
            ctx.sleep(ctx.settings.poll_s)
    ctx.ui.stop()
    info["poll_seconds"] = round(time.monotonic() - t0, 3)
    _note_stalls(ctx)
    state = run["state"]
    sub = info.get("sub", {})
    if state == Status.SUCCEEDED:
        for name in ("baseline", "after"):     # non-fatal bench steps (marker "*"): tuning went on
            if sub.get(name, {}).get("status") == "partial":
                job.note(f"the {name} benchmark exited with {sub[name].get('rc')}: shapes it did not measure "
                         f"have no {'before' if name == 'baseline' else 'after'} value in the comparison "
                         f"(see `tune-remote logs {job.job_id} --step {name}`)")
        if sub.get("tune", {}).get("status") == "partial":
            job.step_state("remote").info["partial"] = True
            job.note("the tuner exited with [Tuning not Finished]: some shapes found no valid kernel "
                     "(listed in the report); every other row was written")
        return
    if state == Status.CANCELLED:
        job.state = Status.CANCELLED
        job.error = "cancelled"
        return
    if state in (Status.LOST, "unknown"):
        job.state = Status.LOST
        why = run.get("reason") or "container restarted or process killed"
        raise JobError(f"the job's process on the node is gone without an exit status ({why})",
                       hint=f"`tune-remote resume {job.job_id} --relaunch` tunes the shapes not tuned yet "
                            "(rows already written are kept)")
    failed = next((n for n in REMOTE_STEPS if sub.get(n, {}).get("status") == Status.FAILED), None)
    rc = sub.get(failed, {}).get("rc", run.get("rc")) if failed else run.get("rc")
    log = job.remote.logs.get(failed or "tune")
    raise JobError(f"step {failed or 'pipeline'} failed on the node (exit {rc})",
                   hint=f"see {log} (or `tune-remote logs {job.job_id} --step {failed or 'tune'}`)")


STALL_TAG = b"[tune-remote] stall:"
TABLE_TAG = b"[tune-remote] table:"


def _note_stalls(ctx: Ctx) -> None:
    """The watchdog's own lines in the tune log (nodeside/stall.py): said in the report."""
    log = (ctx.job.remote.logs or {}).get("tune")
    path = local_log_path(ctx, log) if log else None
    if not path or not path.is_file():
        return
    data = path.read_bytes()
    for ln in data.splitlines():
        if ln.startswith(TABLE_TAG):      # the watchdog found the table torn and repaired it (tables.py)
            ctx.job.note("the tuned table " + ln[len(TABLE_TAG):].decode("utf-8", "replace").strip()[:400])
    lines = [ln for ln in data.splitlines() if ln.startswith(STALL_TAG)]
    kills = sum(1 for ln in lines if b"killed it and its workers" in ln)
    if kills:
        gave_up = any(b"giving up" in ln for ln in lines)
        ctx.job.step_state("remote").info["stalls"] = kills
        ctx.job.note(f"the tuner stalled {kills} time(s) (no log output and no new row for "
                     f"{ctx.job.remote.stall_timeout_s or 0:g} s): it and its workers were killed and "
                     + ("it was not relaunched again (limit reached)" if gave_up else
                        "it was relaunched, skipping the shapes already tuned"))


def cancel(ctx: Ctx, grace_s: float) -> dict:
    """The run's process tree ended on the node (TERM, grace, KILL). A cancel can land in the middle of the
    tuner's in-place rewrite of its table: then the table is checked (parseable, a superset of the backup) and
    repaired from the backup if not (nodeside/tables.py); that answer is ``res["table"]``."""
    r = ctx.job.remote
    res = ctx.call("cancel", {"run_dir": r.run_dir, "grace_s": grace_s})
    if not res.get("already_finished") and r.tuned_csv:
        res["table"] = ctx.call("table_check", {"table": r.tuned_csv, "backup": r.tuned_backup,
                                                "keys": ["gfx", "cu_num", *ctx.variant.untuned_columns],
                                                "keep_dir": f"{r.job_dir}/damaged"})
    return res


def prepare_relaunch(job) -> None:
    """A lost job goes on in a new run dir: the steps that finished (the first baseline) are carried over,
    the tuner skips the rows it already wrote, and every later step runs again."""
    info = job.step_state("remote").info
    n = int(job.remote.relaunches or 0) + 1
    done = [name for name, sub in (info.get("sub") or {}).items() if sub.get("status") == Status.DONE
            and name == "baseline"]
    job.remote.update(relaunches=n, run_dir=f"{job.remote.job_dir}/pipeline-r{n}", carry_rc=done)
    info["sub"] = {k: v for k, v in (info.get("sub") or {}).items() if k in done}
    info.pop("current", None)
    info.pop("state", None)
    job.note(f"relaunched after the job was lost ({n}x); the first baseline is kept")


def run(ctx: Ctx) -> None:
    detach = bool(ctx.job.request.detach)
    t0 = time.monotonic()
    launch(ctx, with_poll=not detach)
    if not detach:
        warm_up()       # what compare and report load, while the pipeline runs (warm.py)
        wait(ctx, t0)

