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

PIPELINE = Path(remote.__file__).resolve().parents[1] / "remote" / "helpers" / "pipeline.sh"


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
    ctx = SimpleNamespace(job=job, ui=_Ui(), settings=SimpleNamespace(observe_s=observe_s, poll_s=2.0),
                          save=lambda: None)
    ctx.sleep = lambda s: clock.__setitem__("t", clock["t"] + s)
    return ctx, clock


def test_observer_errors_are_retried_then_the_job_is_judged_by_the_node(monkeypatch, tmp_path):
    ctx, clock = _ctx(observe_s=30)
    monkeypatch.setattr(remote.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(remote, "_note_stalls", lambda c: None)
    answers = [RemoteCommandError("node helper 'status' crashed (exit 1)")] * 5 + [
        {"state": "succeeded", "more": False}]

    def poll(c):
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

    def poll(c):
        raise RemoteCommandError("node helper 'status' crashed (exit 1)")

    monkeypatch.setattr(remote, "poll_once", poll)
    with pytest.raises(ObserverError) as ei:
        remote.wait(ctx)
    assert ctx.job.state == "running" and "resume j1" in ei.value.one_line()
    assert ei.value.exit_code == 1
