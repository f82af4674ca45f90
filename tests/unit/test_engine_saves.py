"""run_job saves a job's state once per step (issue 26: each save is a JSON dump and an fsync): the save that
marks a step running also writes the step before it done, and a cancel that save reads keeps the step from
starting, as it did when the step before saved its own end."""

from __future__ import annotations

from types import SimpleNamespace

from orchestrator import engine
from orchestrator.state import JobState, Status
from orchestrator.workflow import STEPS


def _job():
    return JobState(job_id="j1", node="n", container="c", variant="a8w8", created=0.0, request={})


def _ctx(job, on_save=None):
    saved = []

    def save():
        saved.append((job.state, job.step, {n: job.step_state(n).status for n in STEPS}))
        if on_save is not None:
            on_save(job)
    return SimpleNamespace(job=job, save=save, ui=SimpleNamespace(step=lambda name: None, stop=lambda: None),
                           target=SimpleNamespace(since_mark=dict)), saved


def test_each_step_is_on_disk_done_before_the_next_one_runs(monkeypatch):
    job = _job()
    ctx, saved = _ctx(job)
    ran = []
    monkeypatch.setattr(engine, "step_func", lambda name: lambda c: ran.append((name, len(saved))))
    assert engine.run_job(ctx) == Status.SUCCEEDED
    assert [n for n, _ in ran] == list(STEPS)
    for i, (name, at) in enumerate(ran):
        _state, step, statuses = saved[at - 1]         # the last save before the step ran
        assert step == name and statuses[name] == Status.RUNNING
        assert all(statuses[n] == Status.DONE for n in STEPS[:i])
    assert saved[-1][0] == Status.SUCCEEDED and all(s == Status.DONE for s in saved[-1][2].values())
    assert len(saved) == len(STEPS) + 2              # one per step, the end, the round-trip figures


def test_a_cancel_read_by_a_steps_first_save_keeps_it_from_starting(monkeypatch):
    def cancel_at_compare(job):                       # what Workspace.save does when `cancel` wrote meanwhile
        if job.step == "compare" and job.state == Status.RUNNING:
            job.state = Status.CANCELLED
    job = _job()
    ctx, saved = _ctx(job, cancel_at_compare)
    ran = []
    monkeypatch.setattr(engine, "step_func", lambda name: lambda c: ran.append(name))
    assert engine.run_job(ctx) == Status.CANCELLED
    assert ran == list(STEPS[:STEPS.index("compare")])
    assert job.step_state("compare").status == Status.PENDING and job.step_state("compare").started is None
    assert job.step == STEPS[STEPS.index("compare") - 1]
    assert saved[-1][0] == Status.CANCELLED and saved[-1][2]["compare"] == Status.PENDING
