"""The holder's stop.py (campaign/slurm_scripts.py) run here as it runs in a container: it ends every process
group carrying the campaign's job marker, marks their runs cancelled, and leaves every other process alone."""

import json
import os
import subprocess
import sys
import time

from orchestrator.campaign.slurm_scripts import HOLDER, STOP


def _spawn(marker: str, run_dir, *, trap_term: bool = False) -> subprocess.Popen:
    """A group leader (like the helper's supervisor) with a child (like the tuner), both carrying the marker."""
    body = "trap '' TERM; " if trap_term else ""
    env = dict(os.environ, TUNE_REMOTE_JOB=marker, TUNE_REMOTE_RUN_DIR=str(run_dir))
    return subprocess.Popen(["sh", "-c", body + "sleep 300 & wait"], env=env, start_new_session=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _wait_children(proc) -> list[int]:
    deadline = time.monotonic() + 10
    while not _children(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _children(proc.pid)


def test_stop_ends_the_campaigns_groups_and_nothing_else(tmp_path):
    ours_dir, other_dir = tmp_path / "ours", tmp_path / "other"
    ours_dir.mkdir()
    other_dir.mkdir()
    ours = _spawn("camp1.a.ctr.a8w8:pipeline", ours_dir)
    stubborn = _spawn("camp1.b.ctr.moe:pipeline", ours_dir, trap_term=True)     # ignores TERM: KILLed
    other = _spawn("camp10.a.ctr.a8w8:pipeline", other_dir)                    # another job, same prefix
    kids = {p.pid: _wait_children(p) for p in (ours, stubborn, other)}
    try:
        out = subprocess.run([sys.executable, "-", "camp1", "1"], input=STOP, capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout.strip().splitlines()[-1])
        for p in (ours, stubborn):
            p.wait(timeout=10)
            assert not any(_alive(k) for k in kids[p.pid]), "a child of the group survived"
        assert report["remaining"] == [] and report["signalled"] >= 4 and report["killed"] >= 1, report
        assert _alive(other.pid) and all(_alive(k) for k in kids[other.pid])
        assert json.loads((ours_dir / "cancelled").read_text())["by"] == "slurm"
        assert not (other_dir / "cancelled").exists()
    finally:
        for p in (ours, stubborn, other):
            try:
                os.killpg(p.pid, 9)
            except OSError:
                pass
            p.wait(timeout=10)


def test_holder_is_posix_sh_and_traps_term_around_a_background_wait():
    assert HOLDER.startswith("#!/bin/sh\n")
    assert "trap 'stop \"$@\"' TERM INT" in HOLDER and "sleep 1 &\n  wait $!" in HOLDER
    subprocess.run(["sh", "-n"], input=HOLDER, text=True, check=True)


def test_cancel_ends_pending_jobs_at_once_and_waits_only_for_running_ones(monkeypatch):
    """An audit found a campaign with one running and one pending job always waited grace + 60 s: the
    pending job stayed in squeue until the final scancel, and the wait was for squeue to be empty."""
    from orchestrator.campaign import slurm as sl
    queue = {"101": ("RUNNING", "n1", "None"), "102": ("PENDING", "", "Resources")}
    calls = []

    def run(self, *argv, stdin=None, check=True):
        calls.append(argv)
        if argv[0] == "scancel":     # plain: the jobs leave squeue; TERM: the holder's trap ends its job
            for j in (a for a in argv[1:] if not a.startswith("-")):
                queue.pop(j, None)
        return ""

    monkeypatch.setattr(sl.SlurmSource, "_run", run)
    monkeypatch.setattr(sl.SlurmSource, "squeue", lambda self: dict(queue))
    src = sl.SlurmSource(None, {"dir": "/d", "jobs": {"0": {"id": "101"}, "1": {"id": "102"}}}, None, None)
    t = time.monotonic()
    src.cancel(grace_s=5.0, wait_s=60.0)
    assert time.monotonic() - t < 2.0
    scancels = [c for c in calls if c[0] == "scancel"]
    assert scancels[0] == ("scancel", "102") and scancels[1] == ("scancel", "--full", "--signal=TERM", "101")


def test_the_nodes_a_plan_leaves_out_are_given_back_to_slurm_at_once(monkeypatch):
    """A reviewer found the Slurm jobs of nodes the plan left out held their GPUs until the campaign ended."""
    from orchestrator.campaign import slurm as sl
    calls = []
    monkeypatch.setattr(sl.SlurmSource, "_run", lambda self, *argv, stdin=None, check=True: calls.append(argv) or "")
    state = {"dir": "/d", "jobs": {"0": {"id": "101", "node": "a"}, "1": {"id": "102", "node": "b"}}}
    saved = []
    src = sl.SlurmSource(None, state, lambda: saved.append(1), None)
    src.release(keep={"a"})
    assert calls[0][-1:] == ("/d/1",) and "/d/0" not in calls[0]
    assert calls[1] == ("scancel", "--state=PENDING", "102")
    assert state["jobs"]["1"]["state"] == "ENDED" and "state" not in state["jobs"]["0"] and saved
    calls.clear()
    src.release()                                    # the campaign's end: every holder
    assert calls[0][-2:] == ("/d/0", "/d/1")
