"""The long poll (nodeside/longpoll.py) never sleeps through a change that lands while it reads the status."""

from __future__ import annotations

import importlib
import sys
import time
import types
from pathlib import Path

import orchestrator.nodeside as nodeside


def _longpoll(monkeypatch, statuses):
    """longpoll with a stub ``runlog`` whose op_status runs ``statuses`` in turn (then repeats the last)."""
    calls = []

    def op_status(req):
        fn = statuses[min(len(calls), len(statuses) - 1)]
        calls.append(time.monotonic())
        return fn(req)

    stub = types.SimpleNamespace(op_status=op_status)
    monkeypatch.setitem(sys.modules, "orchestrator.nodeside.runlog", stub)
    monkeypatch.setattr(nodeside, "runlog", stub, raising=False)
    monkeypatch.delitem(sys.modules, "orchestrator.nodeside.longpoll", raising=False)
    monkeypatch.delattr(nodeside, "longpoll", raising=False)
    return importlib.import_module("orchestrator.nodeside.longpoll"), calls


def test_a_run_that_ends_while_its_status_is_read_is_answered_at_once(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def running_then_ends(req):            # the read sees "running"; the rc lands right after it
        answer = {"runs": [{"run_dir": str(run_dir), "state": "running", "data_b64": "", "log_path": None}]}
        (run_dir / "rc").write_text("0\n")
        return answer

    def ended(req):
        return {"runs": [{"run_dir": str(run_dir), "state": "succeeded", "data_b64": "", "log_path": None}]}

    longpoll, calls = _longpoll(monkeypatch, [running_then_ends, ended])
    t = time.monotonic()
    answer = longpoll.op_status({"wait_s": 5})
    assert answer["runs"][0]["state"] == "succeeded"
    assert time.monotonic() - t < 1.0, "slept through the run's end"


def test_nothing_happening_waits_the_whole_wait(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def running(req):
        return {"runs": [{"run_dir": str(run_dir), "state": "running", "data_b64": "", "log_path": None}]}

    longpoll, calls = _longpoll(monkeypatch, [running])
    t = time.monotonic()
    answer = longpoll.op_status({"wait_s": 0.3})
    assert answer["runs"][0]["state"] == "running" and answer["waited_s"] >= 0.3
    assert time.monotonic() - t >= 0.3 and len(calls) <= 4          # stat-watching, not re-reading the status


def test_a_wrapper_that_exits_into_a_zombie_is_seen_at_once(tmp_path, monkeypatch):
    """A container's PID 1 may never reap the detached wrapper: its /proc entry stays, as a zombie."""
    import subprocess
    wrapper = subprocess.Popen(["sh", "-c", "read line"], stdin=subprocess.PIPE)   # never reaped below
    try:
        def running(req):
            return {"runs": [{"run_dir": str(tmp_path), "state": "running", "data_b64": "", "log_path": None,
                              "pid": wrapper.pid}]}

        def running_then_exits(req):       # its rc is already there; the wrapper exits right after this read
            wrapper.stdin.close()
            return running(req)

        def ended(req):
            return {"runs": [{"run_dir": str(tmp_path), "state": "succeeded", "data_b64": "", "log_path": None,
                              "pid": wrapper.pid}]}

        longpoll, calls = _longpoll(monkeypatch, [running, running_then_exits, ended])
        t = time.monotonic()
        answer = longpoll.op_status({"wait_s": 5})
        assert answer["runs"][0]["state"] == "succeeded"
        assert Path("/proc/%d" % wrapper.pid).exists(), "the test needs the zombie to stay"
        assert time.monotonic() - t < 1.0, "slept through the wrapper's exit (its zombie looked alive)"
    finally:
        wrapper.wait()


def test_the_answer_that_sees_the_end_carries_the_manifest_asked_ahead(tmp_path, monkeypatch):
    """on_end: compare's pull needs the manifest right after the pipeline ends; it comes with that answer."""
    import hashlib
    table = tmp_path / "tuned.csv"
    table.write_text("cu_num,M\n256,1\n")
    ask = {"manifest": {"paths": [str(table)], "have": {str(table): None}, "inline_max": 1 << 20}}
    state = {"s": "running"}

    def status(req):
        return {"runs": [{"run_dir": str(tmp_path), "state": state["s"], "data_b64": "", "log_path": None}]}

    longpoll, _calls = _longpoll(monkeypatch, [status])
    assert "on_end" not in longpoll.op_status({"wait_s": 0, "on_end": ask})      # still running: nothing extra
    state["s"] = "succeeded"
    got = longpoll.op_status({"wait_s": 0, "on_end": ask})["on_end"]["manifest"]["files"][str(table)]
    assert got["sha256"] == hashlib.sha256(table.read_bytes()).hexdigest() and got["data_b64"]
    assert "on_end" not in longpoll.op_status({"wait_s": 0})                      # not asked: not sent
