"""A chained run's wait on the node (nodeside/locks.py chain_wait): once the run before it ended, it waits until
it can take its GPUs (another job's reservation, a use by something else), one log line per change of what
it waits for, cancellable. Driven in process: the helper's own polling, its sleep replaced by the test's step."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from orchestrator.nodeside import locks, procs


@pytest.fixture
def bed(tmp_path, monkeypatch):
    work = tmp_path / "work"
    run = tmp_path / "run"
    run.mkdir()
    log = tmp_path / "pipeline.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    yield {"work": work, "run": run, "log": log, "fd": fd, "tmp": tmp_path}
    os.close(fd)


def lock_file(bed, gpu):
    return Path(locks.gpu_lock_path(str(bed["work"]), gpu))


def reserve(bed, gpu, job_id, who="someone@laptop2", created=None, run_dir=None):
    """Another job's GPU reservation. Its run dir is not written yet: held while young ('preparing')."""
    path = lock_file(bed, gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"job_id": job_id, "run_dir": str(run_dir or bed["tmp"] / ("r-" + job_id)),
                                "owner": {"who": who}, "created": time.time() if created is None else created,
                                "variant": "a8w8"}))


def wait(bed, steps, gpus=(0, 1), busy_threshold=None, in_use=None, term=None):
    """chain_wait after a run that has ended; `steps[n]()` runs at its n-th poll (the helper's sleep)."""
    polls = []

    def step(seconds):
        assert seconds == 0.01
        polls.append(seconds)
        action = steps.get(len(polls))
        if action:
            action()
        assert len(polls) < 50, "still waiting"

    lock = {"workdir": str(bed["work"]), "variant": "a8w8_blockscale_bpreshuffle", "gpus": list(gpus),
            "owner": {"who": "me@laptop"}}
    if busy_threshold is not None:
        lock["busy_threshold"] = busy_threshold
    after = {"run_dir": str(bed["tmp"] / "before"), "lock": lock}     # no run there: ended long ago
    spec = {"job_id": "mine", "run_dir": str(bed["run"])}
    paths = {"cancelled": str(bed["run"] / "cancelled")}
    rc = locks.chain_wait(after, spec, paths, term or {"signal": None}, bed["fd"], poll_s=0.01, sleep=step,
                          in_use=in_use)
    return rc, len(polls), [line for line in bed["log"].read_text().splitlines() if "GPU(s)" in line]


def owner_of(bed, gpu):
    return json.loads(lock_file(bed, gpu).read_text())["job_id"]


def test_it_waits_for_another_jobs_reservation_saying_so_once_then_takes_the_gpus(bed):
    reserve(bed, 1, "other")
    rc, polls, lines = wait(bed, {3: lambda: lock_file(bed, 1).unlink()})
    assert rc is None and polls == 3
    assert lines == [("[tune-remote] waiting for GPU(s) 0,1: GPU 1 reserved by job other (a8w8, preparing, "
                      "started by someone@laptop2)")]                  # one line, not one per poll
    assert owner_of(bed, 0) == owner_of(bed, 1) == "mine"


def test_a_new_line_only_when_what_it_waits_for_changes(bed):
    reserve(bed, 0, "other")
    steps = {2: lambda: reserve(bed, 0, "third", who="x@y"),       # released and taken by a third job
             4: lambda: reserve(bed, 0, "third", who="x@y"),       # the same holder again: no new line
             6: lambda: lock_file(bed, 0).unlink()}
    rc, polls, lines = wait(bed, steps, gpus=[0])
    assert rc is None and polls == 6
    assert [line.split("reserved by job ")[1].split(" ")[0] for line in lines] == ["other", "third"]
    assert owner_of(bed, 0) == "mine"


def test_a_job_letting_go_of_its_gpus_one_by_one_is_one_line(bed):
    reserve(bed, 0, "other")
    reserve(bed, 1, "other")
    rc, polls, lines = wait(bed, {2: lambda: lock_file(bed, 1).unlink(), 4: lambda: lock_file(bed, 0).unlink()})
    assert rc is None and polls == 4
    assert len(lines) == 1 and "GPU 0,1 reserved by job other" in lines[0]


def test_a_reservation_whose_owner_is_gone_is_taken_over_at_once(bed):
    ended = bed["tmp"] / "ended"
    ended.mkdir()
    (ended / "command.json").write_text("{}")
    (ended / "rc").write_text("0\n")
    reserve(bed, 0, "old", run_dir=ended)                          # its run ended: the lock is stale
    reserve(bed, 1, "older", created=time.time() - 3600)           # locked before a launch that never came
    rc, polls, lines = wait(bed, {})
    assert rc is None and polls == 0 and lines == []
    assert owner_of(bed, 0) == owner_of(bed, 1) == "mine"


def test_gpus_in_use_by_something_else_are_waited_for_when_chosen_free(bed):
    answers = [{1: ["use 98%", "KFD process(es) 40001"]}, {1: ["VRAM 60% used", "KFD process(es) 40001"]}, {}]
    asked = []

    def in_use(gpus, threshold):
        asked.append((sorted(gpus), threshold))
        return answers[min(len(asked), len(answers)) - 1]

    rc, polls, lines = wait(bed, {}, busy_threshold=10, in_use=in_use)
    assert rc is None and polls == 2 and asked == [([0, 1], 10)] * 3
    assert len(lines) == 1 and "GPU 1 is in use (use 98%, KFD process(es) 40001) by no tune-remote job" in lines[0]
    assert owner_of(bed, 1) == "mine"


def test_given_gpus_are_used_as_they_are_and_a_reservation_is_looked_at_before_the_use(bed):
    def in_use(gpus, threshold):
        raise AssertionError("asked about use")

    rc, polls, _ = wait(bed, {}, in_use=in_use)          # no busy_threshold: --gpus given or granted
    assert rc is None and polls == 0 and owner_of(bed, 0) == "mine"
    lock_file(bed, 0).unlink()
    lock_file(bed, 1).unlink()
    reserve(bed, 0, "other")
    rc, polls, lines = wait(bed, {1: lambda: lock_file(bed, 0).unlink()}, busy_threshold=10,
                            in_use=lambda gpus, threshold: {})
    assert rc is None and polls == 1 and "GPU 0 reserved by job other" in lines[0]


@pytest.mark.parametrize("how, rc", [("cancel", 128 + signal.SIGTERM), ("term", 128 + signal.SIGTERM),
                                     ("int", 128 + signal.SIGINT)])
def test_a_cancel_or_signal_while_it_waits_for_the_gpus_ends_it_without_them(bed, how, rc):
    reserve(bed, 0, "other")
    term = {"signal": None}
    act = {"cancel": lambda: (bed["run"] / "cancelled").write_text("{}"),
           "term": lambda: term.update(signal=signal.SIGTERM),
           "int": lambda: term.update(signal=signal.SIGINT)}[how]
    got, polls, lines = wait(bed, {2: act}, term=term)
    assert got == rc and polls == 2 and len(lines) == 1
    assert owner_of(bed, 0) == "other" and not lock_file(bed, 1).exists()   # nothing taken
