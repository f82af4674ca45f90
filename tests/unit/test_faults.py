"""Fault handling that needs no test bed: pipeline.sh's rc/marker rules, defensive marker parsing, the
observer's retry window (issue 8)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.errors import ObserverError, RemoteCommandError
from orchestrator.state import JobState
from orchestrator.steps import remote

PIPELINE = Path(remote.__file__).resolve().parents[1] / "nodeside" / "pipeline.sh"


def pipeline(tmp_path, *steps):
    argv = ["sh", str(PIPELINE), str(tmp_path / "rd")]
    for name, line, marker in steps:
        argv += [name, str(tmp_path / f"{name}.log"), line, marker]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return cp.returncode, cp.stdout


def test_a_failing_non_fatal_step_does_not_stop_the_pipeline(tmp_path):
    rc, out = pipeline(tmp_path, ("baseline", "exit 3", "*"), ("tune", "echo tuned", ""))
    assert rc == 0, out
    assert "== baseline rc 3" in out and "== baseline partial" in out and "== pipeline done" in out
    assert (tmp_path / "tune.log").read_text() == "tuned\n"


def test_an_empty_or_garbled_rc_file_is_a_failure_not_a_success(tmp_path):
    (tmp_path / "rd").mkdir()
    for garbage in ("", "x1\n", "0 0\n"):
        (tmp_path / "rd" / "tune.rc").write_text(garbage)
        rc, out = pipeline(tmp_path, ("tune", "echo never", ""))
        assert rc == 1 and "== tune already-done rc 1" in out and "== pipeline failed at tune" in out, out
        assert not (tmp_path / "tune.log").exists()


def test_the_partial_marker_is_a_fixed_string_not_a_regex(tmp_path):
    # "[Tuning not Finished]" as a regex is a character class that matches nearly any log
    rc, out = pipeline(tmp_path, ("tune", "echo gone; exit 1", "[Tuning not Finished]"))
    assert rc == 1 and "== pipeline failed at tune" in out
    rc, out = pipeline(tmp_path / "b", ("tune", "echo '[Tuning not Finished]'; exit 1", "[Tuning not Finished]"))
    assert rc == 0 and "== tune partial" in out


@pytest.mark.parametrize("text", [
    "== tune already-done rc \n", "== tune rc\n", "== tune rc banana\n", "== bogus start 12 /x\n",
    "== tune start\n", "== tune start notanumber /x\n",
])
def test_garbled_markers_never_crash_and_unknown_steps_are_ignored(text):
    info: dict = {}
    remote._apply_markers(info, text)
    assert "bogus" not in info.get("sub", {}) and info.get("current") in (None, "tune")
    s = info["sub"].get("tune", {"status": "pending"})
    if "rc" in text:
        assert s["status"] == "failed" and s["rc"] == 1


class _Ui:
    def __init__(self):
        self.events = []

    def event(self, text):
        self.events.append(text)

    def progress(self, *a):
        pass

    def stop(self):
        pass


def _ctx(observe_s):
    job = JobState(job_id="j1", node="n", container="c", variant="a8w8", created=0.0, request={})
    job.remote.update(logs={}, job_dir="/x")
    clock = {"t": 0.0}
    ctx = SimpleNamespace(job=job, ui=_Ui(), prefetched={}, settings=SimpleNamespace(observe_s=observe_s, poll_s=2.0),
                          save=lambda: None)
    ctx.sleep = lambda s: clock.__setitem__("t", clock["t"] + s)
    return ctx, clock


def test_observer_errors_are_retried_then_the_job_is_judged_by_the_node(monkeypatch, tmp_path):
    ctx, clock = _ctx(observe_s=30)
    monkeypatch.setattr(remote.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(remote, "_note_stalls", lambda c: None)
    answers = [RemoteCommandError("node helper 'status' crashed (exit 1)")] * 5 + [
        {"state": "succeeded", "more": False}]

    def poll(c, **kw):
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    monkeypatch.setattr(remote, "poll_once", poll)
    remote.wait(ctx)
    assert ctx.job.state == "running" and not answers       # succeeded on the node; no verdict from errors
    assert sum("retrying" in e for e in ctx.ui.events) == 5


def test_observer_gives_up_after_its_window_without_failing_the_job(monkeypatch):
    ctx, clock = _ctx(observe_s=10)
    monkeypatch.setattr(remote.time, "monotonic", lambda: clock["t"])

    def poll(c, **kw):
        raise RemoteCommandError("node helper 'status' crashed (exit 1)")

    monkeypatch.setattr(remote, "poll_once", poll)
    with pytest.raises(ObserverError) as ei:
        remote.wait(ctx)
    assert ctx.job.state == "running" and "resume j1" in ei.value.one_line()
    assert ei.value.exit_code == 1


# ------------------------------------------------------------------------------------------------
# tables.py through the real helper (table_check op) and the watchdog (_stall), as on the node
# ------------------------------------------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

HELPER = Path(remote.__file__).resolve().parents[1] / "nodeside" / "node_helper.py"
PY = os.environ.get("NODE_HELPER_PYTHON", sys.executable)
KEYS = ["gfx", "cu_num", "M", "N", "K"]
HEADER = "gfx,cu_num,M,N,K,kernelId,us\n"


def helper(op, req):
    cp = subprocess.run([PY, str(HELPER), op], input=json.dumps(req).encode(), capture_output=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout.decode().splitlines()[-1])


def rows(path):
    import csv
    return [(r["M"], r["N"], r["K"], r["kernelId"]) for r in csv.DictReader(open(path))]


def test_a_sound_table_is_left_alone(tmp_path):
    (tmp_path / "b.csv").write_text(HEADER + "gfx942,304,1,2,3,7,1.5\n")
    table = tmp_path / "t.csv"
    table.write_text(HEADER + "gfx942,304,1,2,3,7,1.5\ngfx942,304,4,2,3,9,2.0\n")
    before = table.read_bytes()
    res = helper("table_check", {"table": str(table), "backup": str(tmp_path / "b.csv"), "keys": KEYS})
    assert res["ok"] is True and res["sound"] is True and res["rows"] == 2 and res["line"] is None
    assert table.read_bytes() == before and not (tmp_path / "damaged").exists()


def test_a_torn_table_is_repaired_from_the_backup_keeping_new_complete_rows(tmp_path):
    (tmp_path / "b.csv").write_text(HEADER + "gfx942,304,1,2,3,7,1.5\ngfx942,304,8,2,3,7,1.5\n")
    table = tmp_path / "t.csv"
    # AITER rewrote the file in place and was killed half way: backup row (8,2,3) is gone, a row is torn
    torn = HEADER + "gfx942,304,1,2,3,5,1.1\ngfx942,304,16,2,3,4,0.9\ngfx942,304,32,2"
    table.write_text(torn)
    res = helper("table_check", {"table": str(table), "backup": str(tmp_path / "b.csv"), "keys": KEYS,
                                 "keep_dir": str(tmp_path / "damaged")})
    assert res["sound"] is False and "torn" in res["problem"] and "repaired from the backup" in res["line"]
    # the rows of this run win over the backup's for the same key; the lost backup row is back
    assert sorted(rows(table)) == sorted([("1", "2", "3", "5"), ("8", "2", "3", "7"), ("16", "2", "3", "4")])
    (kept,) = list((tmp_path / "damaged").iterdir())
    assert kept.read_text() == torn
    again = helper("table_check", {"table": str(table), "backup": str(tmp_path / "b.csv"), "keys": KEYS})
    assert again["ok"] is True and again["sound"] is True


def test_a_table_missing_backup_rows_is_not_a_superset_and_is_repaired(tmp_path):
    (tmp_path / "b.csv").write_text(HEADER + "gfx942,304,1,2,3,7,1.5\ngfx942,304,8,2,3,7,1.5\n")
    table = tmp_path / "t.csv"
    table.write_text(HEADER + "gfx942,304,1,2,3,7,1.5\n")
    res = helper("table_check", {"table": str(table), "backup": str(tmp_path / "b.csv"), "keys": KEYS})
    assert res["sound"] is False and "1 row(s) of the backup are missing" in res["problem"]
    assert len(rows(table)) == 2


def test_tables_without_a_gfx_column_use_the_keys_they_have(tmp_path):
    head = "cu_num,M,N,K,kernelId,us\n"
    (tmp_path / "b.csv").write_text(head + "304,1,2,3,7,1.5\n")
    table = tmp_path / "t.csv"
    table.write_text(head + "304,1,2,3,7,1.5\n304,2,2,3,7,1.5\n")
    assert helper("table_check", {"table": str(table), "backup": str(tmp_path / "b.csv"), "keys": KEYS})["sound"]


def test_the_watchdog_repairs_a_table_the_tuner_left_torn(tmp_path):
    (tmp_path / "b.csv").write_text(HEADER + "gfx942,304,8,2,3,7,1.5\n")
    table = tmp_path / "t.csv"
    line = f"printf 'gfx942,304,1,2,3,5,1.1\\ngfx942,30' > {table}; exit 137"
    cp = subprocess.run([PY, str(HELPER), "_stall", "0", "2", str(table), "--backup", str(tmp_path / "b.csv"),
                         "--keys", ",".join(KEYS), "--keep", str(tmp_path / "dmg"), "--", line],
                        capture_output=True, timeout=30)
    assert cp.returncode == 137                           # the tuner's own status is kept
    assert b"[tune-remote] table:" in cp.stdout and b"repaired from the backup" in cp.stdout
    assert rows(table) == [("8", "2", "3", "7")]          # header-less torn file: the backup's rows come back


def test_disk_free_answers_for_paths_that_do_not_exist_yet(tmp_path):
    res = helper("disk_free", {"paths": [str(tmp_path / "a" / "b" / "job"), str(tmp_path)]})["free"]
    sub = res[str(tmp_path / "a" / "b" / "job")]
    assert sub["checked"] == str(tmp_path) and sub["free_bytes"] > 0
    assert res[str(tmp_path)]["free_bytes"] > 0 and res[str(tmp_path)]["dev"] == sub["dev"]


def test_a_node_without_the_space_a_job_needs_is_refused_saying_how_much(tmp_path):
    from orchestrator.errors import JobError
    from orchestrator.steps import prepare
    job = JobState(job_id="j1", node="n", container="c", variant="a8w8", created=0.0, request={})
    job.remote["job_dir"] = "/aiter/tune_logs/.tune-remote/j1"
    job.shapes = [{"m": 1}] * 100
    need = prepare.space_needed(10 << 20, 100)
    assert need == 40 * (1 << 20) + 100 * 64 * 1024 + (64 << 20)
    answers = {"free": {"/aiter/tune_logs/.tune-remote/j1": {"free_bytes": need - 1, "checked": "/aiter"},
                        "/aiter/t.csv": {"free_bytes": need - 1, "checked": "/aiter"}}}
    ctx = SimpleNamespace(job=job)
    with pytest.raises(JobError) as ei:
        prepare.check_space(ctx, "/aiter/t.csv", 10 << 20, answers["free"])
    assert f"this job needs about {need / (1 << 20):.0f} MiB" in ei.value.message and "MiB free in /aiter" in ei.value.message
    answers["free"] = {k: dict(v, free_bytes=need) for k, v in answers["free"].items()}
    prepare.check_space(ctx, "/aiter/t.csv", 10 << 20, answers["free"])          # exactly enough: goes on
    assert job.remote["space_needed_bytes"] == need


def test_the_workspace_and_live_log_copies_are_private(tmp_path):
    import stat
    from orchestrator.state import Workspace
    ws = Workspace(tmp_path / "ws")
    job = JobState(job_id="j1", node="n", container="c", variant="a8w8", created=0.0, request={})
    ws.save(job)
    assert stat.S_IMODE((tmp_path / "ws").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "ws" / "j1").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "ws" / "j1" / "state.json").stat().st_mode) == 0o600
    log = tmp_path / "ws" / "j1" / "logs" / "x.log"
    remote._write_at(log, 0, b"abc")
    remote._write_at(log, 3, b"def")
    assert log.read_bytes() == b"abcdef" and stat.S_IMODE(log.stat().st_mode) == 0o600


# ---- two processes on one laptop never overwrite each other's state.json updates ----------------
# flock locks belong to open files, so one test process can play both: `other()` hides this process's
# ownership while the driver's lock stays held by its open file.

import contextlib  # noqa: E402


@contextlib.contextmanager
def other():
    from orchestrator import state
    saved = dict(state._OWNED)
    state._OWNED.clear()
    try:
        yield
    finally:
        state._OWNED.update(saved)


def _job(ws, job_id="j1"):
    from orchestrator.state import JobState
    job = JobState(job_id=job_id, node="n", container="c", variant="a8w8", created=0.0, request={})
    ws.own(job_id, "run")
    assert ws.save(job)
    return job


def test_a_reader_never_writes_over_the_driver(tmp_path):
    import os
    from orchestrator import state
    ws = state.Workspace(tmp_path)
    job = _job(ws)
    with other():
        stale = ws.load("j1")                  # e.g. `logs -f` loaded it while `run` drives
    job.state = "succeeded"
    assert ws.save(job)
    with other():
        stale.notes.append("reader's poll")
        assert not ws.save(stale)              # driven elsewhere: dropped
        assert ws.load("j1").state == "succeeded"
    os.close(state._OWNED.pop(str(tmp_path / "j1")))   # the driver process ended (its lock with it)
    assert not ws.save(stale)                  # not driven, but changed since the reader loaded it
    assert ws.load("j1").state == "succeeded"
    fresh = ws.load("j1")
    fresh.note("later")
    assert ws.save(fresh) and ws.load("j1").notes == ["later"]


def test_cancel_from_another_process_is_kept_by_the_driver(tmp_path):
    from orchestrator.state import Workspace
    ws = Workspace(tmp_path)
    job = _job(ws)

    def cancel(j):
        j.state, j.error = "cancelled", "cancelled by the user"
    with other():
        ws.update("j1", cancel)
    job.notes.append("driver's own update")    # the driver saves its older snapshot afterwards
    assert ws.save(job)
    on_disk = ws.load("j1")
    assert on_disk.state == "cancelled" and on_disk.notes == ["driver's own update"]


def test_a_stale_cancelled_snapshot_still_cancels_without_reverting_the_rest(tmp_path):
    from orchestrator.state import JobState, Workspace
    ws = Workspace(tmp_path)                   # nobody drives it (e.g. a campaign's `cancel` on its sub-jobs)
    assert ws.save(JobState(job_id="j2", node="n", container="c", variant="a8w8", created=0.0, request={}))
    mine, theirs = ws.load("j2"), ws.load("j2")
    theirs.note("their poll")
    assert ws.save(theirs)
    mine.state, mine.error = "cancelled", "cancelled by the user"
    assert ws.save(mine)
    on_disk = ws.load("j2")
    assert on_disk.state == "cancelled" and on_disk.notes == ["their poll"]


def test_a_second_driver_exits_naming_the_first(tmp_path):
    import os
    from orchestrator.errors import JobError
    from orchestrator.state import Workspace
    _job(Workspace(tmp_path))
    with other(), pytest.raises(JobError) as exc:
        Workspace(tmp_path).own("j1", "resume")
    assert f"job j1 is being driven by another tune-remote process (pid {os.getpid()}: tune-remote run)" in str(exc.value)


def test_a_campaigns_sub_jobs_belong_to_its_driver(tmp_path):
    from orchestrator.state import JobState, Workspace
    top = Workspace(tmp_path)
    _job(top, "camp")
    subws = Workspace(tmp_path / "camp" / "targets")
    sub = JobState(job_id="s1", node="n", container="c", variant="a8w8", created=0.0, request={})
    assert subws.save(sub)
    with other():
        theirs = subws.load("s1")
        assert subws.driven_elsewhere("s1") and not subws.save(theirs)
    sub.state = "succeeded"
    assert subws.save(sub) and subws.load("s1").state == "succeeded"


# ---- S-05: node text in report.md is text -----------------------------------------------------------

def test_node_text_in_report_notes_is_escaped_bounded_and_code_spans_survive():
    from orchestrator.report import render_report
    hostile = "shapelog: odd line '<img src=x onerror=alert(1)> [click](http://evil)\n# heading' " + "x" * 5000
    md, _ = render_report({"notes": [hostile, "run `tune-remote resume J --relaunch` <now>, token*topk <= 128"]})
    section = md[md.index("## Notes"):md.index("\n## ", md.index("## Notes"))]
    notes = [l for l in section.splitlines() if l.startswith("- ")]
    assert len(notes) == 2 and all(len(l) < 1100 for l in notes)
    assert "<img" not in md and "&lt;img" in notes[0] and "\\[click\\](http://evil)" in notes[0]
    assert "\n# heading" not in md
    assert "`tune-remote resume J --relaunch` &lt;now>, token*topk <= 128" in notes[1]


# ---- the progress scan reads only the bytes that are new since the last poll -----------------

def test_progress_is_scanned_only_in_new_bytes(tmp_path):
    from orchestrator.nodeside import runlog
    log = tmp_path / "bench.log"
    log.write_bytes(b"x" * (3 << 20) + b"\nprocessed 1 batches of 4\n")

    class Counting:
        def __init__(self, f):
            self.f, self.read_bytes = f, 0

        def read(self, n=-1):
            data = self.f.read(n)
            self.read_bytes += len(data)
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

    def poll():
        with open(log, "rb") as raw:
            f = Counting(raw)
            got = runlog._progress_cached(f, log.stat().st_size, str(log))
        return got, f.read_bytes

    got, first = poll()
    assert got["done"] == 1 and first >= 256 * 1024                   # the first poll scans back
    got, again = poll()
    assert got["done"] == 1 and again == 0                             # nothing new: nothing read
    with open(log, "ab") as fh:
        fh.write(b"bench output\n" * 10 + b"processed 2 batches of 4\n")
    got, more = poll()
    assert got["done"] == 2 and more < 8192                            # only the new bytes (+ overlap)


# ---- a command timeout is not a lost connection, and what timed out does not stay behind ---------

def test_a_slow_command_is_a_timeout_not_a_lost_connection():
    from orchestrator.errors import CommandTimeout, ConnectionLost
    from orchestrator.remote.local import LocalTransport
    from orchestrator.remote.shell import Cmd
    with pytest.raises(CommandTimeout) as exc:
        LocalTransport().run(Cmd(("sleep", "5")), timeout=0.5)
    assert not isinstance(exc.value, ConnectionLost)


def test_a_helper_op_past_its_time_is_stopped_by_the_helper_itself(tmp_path, monkeypatch):
    import os
    import time
    from orchestrator.errors import ConnectionLost
    from orchestrator.remote.detached import HelperCallError, NodeHelper
    from orchestrator.remote.local import LocalTransport
    monkeypatch.setenv("TUNE_REMOTE_HELPER_CHANNEL", "0")            # one exec per op
    script = tmp_path / f"slow_tune_{os.getpid()}.py"
    script.write_text("import time\ntime.sleep(60)\n")
    helper = NodeHelper(LocalTransport(), base_dir=str(tmp_path / "helpers"))
    t0 = time.monotonic()
    with pytest.raises(HelperCallError) as exc:
        helper.call("probe", {"tune_script": str(script), "help_timeout": 120}, timeout=6)
    assert not isinstance(exc.value, ConnectionLost) and "did not finish within 1" in str(exc.value)
    assert time.monotonic() - t0 < 6
    import subprocess
    left = subprocess.run(["pgrep", "-f", script.name], capture_output=True, text=True).stdout.split()
    assert left == [], left                                            # its child was stopped too


def test_the_poll_the_launch_brought_back_is_the_watch_loops_first(monkeypatch):
    """run: the first long poll rides in the launch's batch; the watch loop takes its answer, asks nothing."""
    ctx, clock = _ctx(observe_s=30)
    monkeypatch.setattr(remote, "_note_stalls", lambda c: None)
    ctx.prefetched["poll"] = {"state": "succeeded", "more": False, "long_poll": True}

    def poll(c, **kw):
        raise AssertionError("polled again")
    monkeypatch.setattr(remote, "poll_once", poll)
    remote.wait(ctx)
    assert ctx.job.state == "running" and "poll" not in ctx.prefetched


def test_a_soft_last_op_answers_its_failure_and_the_ops_before_it_did_their_work(tmp_path):
    from orchestrator.remote.detached import HelperCallError, NodeHelper
    from orchestrator.remote.local import LocalTransport

    helper = NodeHelper(LocalTransport(label="here"), python=sys.executable, base_dir=str(tmp_path / "h"))
    out = tmp_path / "written.txt"
    write = ("write_files", {"files": [{"path": str(out), "content": "x\n", "backup_dir": None}]})
    try:
        answers = helper.call_batch([write, ("no_such_op", {})], soft_last=True)
        assert answers[0]["ok"] and answers[1]["ok"] is False and out.read_text() == "x\n"
        assert helper.batched == {"write_files": 1, "no_such_op": 1}
        out.unlink()
        with pytest.raises(HelperCallError):               # without soft_last: raised as before
            helper.call_batch([write, ("no_such_op", {})])
        out.unlink()
        with pytest.raises(HelperCallError):               # only the LAST op is soft; nothing ran after it
            helper.call_batch([("no_such_op", {}), write], soft_last=True)
        assert not out.exists()
    finally:
        helper.close()


def _launch_ctx(monkeypatch, batch):
    """A ctx for remote.launch: ``batch`` answers (or raises for) the [launch, status] batch; a plain launch
    answers as a node with this run launched already would."""
    ctx, _clock = _ctx(observe_s=30)
    ctx.job.remote.update(aiter_root="/a", pipeline=[], logs_dir="/a/tune_logs")
    ctx.target = SimpleNamespace(helper=SimpleNamespace(calls=1, pipeline="/h/pipeline.sh"), container=SimpleNamespace(env={}))
    ctx.calls = []

    def call(op, req=None, **kw):
        ctx.calls.append(op)
        return {"ok": True, "launched": False, "record": {"pid": 7}}
    ctx.call = call
    ctx.call_batch = lambda calls, **kw: batch()
    monkeypatch.setattr(remote, "owner", lambda c=None: {"who": "me"})
    monkeypatch.setattr(remote, "poll_request", lambda c, **kw: ({"wait_s": 2.0}, {}))
    monkeypatch.setattr(remote, "poll_apply", lambda c, res, asked: {"state": "running", "more": False})
    return ctx


def test_a_watching_error_in_the_launchs_batch_launches_alone_and_never_fails_the_job(monkeypatch):
    """The helper died in the first long poll (twice): the launch may have run; a plain launch (idempotent)
    finds it; the watch loop polls as usual. Before, the launch step failed while the node ran on."""
    def batch():
        raise RemoteCommandError("node helper died during batch (exit -9)")
    ctx = _launch_ctx(monkeypatch, batch)
    res = remote.launch(ctx, with_poll=True)
    assert res["record"] == {"pid": 7} and ctx.calls == ["launch"] and "poll" not in ctx.prefetched
    info = ctx.job.step_state("remote").info
    assert info["launched"] == 1               # launched by us, its answer lost: a later resume must find it
    assert any("launching alone" in e for e in ctx.ui.events)


def test_a_failed_launch_in_the_batch_fails_as_a_plain_launch_would(monkeypatch):
    from orchestrator.remote.detached import HelperCallError

    def batch():
        raise HelperCallError("launch on n/c: launch: cwd /a does not exist")
    ctx = _launch_ctx(monkeypatch, batch)
    with pytest.raises(HelperCallError):
        remote.launch(ctx, with_poll=True)
    assert ctx.calls == []


def test_the_batchs_status_is_the_first_poll_unless_it_failed(monkeypatch):
    ctx = _launch_ctx(monkeypatch, lambda: [{"ok": True, "launched": True, "record": {"pid": 8}}, {"ok": True}])
    assert remote.launch(ctx, with_poll=True)["record"] == {"pid": 8}
    assert ctx.prefetched["poll"] == {"state": "running", "more": False} and ctx.calls == []
    assert ctx.job.step_state("remote").info["launched"] == 1
    ctx = _launch_ctx(monkeypatch, lambda: [{"ok": True, "launched": True, "record": {"pid": 8}},
                                            {"ok": False, "error": "status crashed"}])
    remote.launch(ctx, with_poll=True)
    assert "poll" not in ctx.prefetched and ctx.calls == []
