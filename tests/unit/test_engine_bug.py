"""A bug in a step (an exception that is not a TuneRemoteError) ends in a job that says so, not one left
"running" for ever (an audit of issue 3's exit-code contract found `run --m-preset foo` did that)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator import engine
from orchestrator.state import JobState


def _ctx(job):
    saved = []
    return SimpleNamespace(job=job, save=lambda: saved.append((job.state, job.step)),
                           ui=SimpleNamespace(step=lambda name: None, stop=lambda: None),
                           target=SimpleNamespace(since_mark=lambda: {})), saved


def _job():
    return JobState(job_id="j1", node="n", container="c", variant="a8w8", created=0.0, request={})


def _bug_in(step, monkeypatch):
    def func(name):
        def run(ctx):
            if name == step:
                raise KeyError("hidden_size")
        return run
    monkeypatch.setattr(engine, "step_func", func)


def test_a_bug_in_a_laptop_step_fails_the_job_with_the_reason(monkeypatch):
    _bug_in("shapes", monkeypatch)
    job = _job()
    ctx, saved = _ctx(job)
    with pytest.raises(KeyError):
        engine.run_job(ctx)
    assert job.state == "failed" and job.step_state("shapes").status == "failed"
    assert job.error == "internal error in step shapes: KeyError: 'hidden_size'"
    assert saved[-1][0] == "failed"


def test_a_bug_while_the_node_pipeline_runs_leaves_the_job_re_attachable(monkeypatch):
    _bug_in("remote", monkeypatch)
    job = _job()
    ctx, saved = _ctx(job)
    with pytest.raises(KeyError):
        engine.run_job(ctx)
    assert job.state == "running" and job.step == "remote"      # `resume` re-attaches
    assert any("internal error in step remote" in n and "resume" in n for n in job.notes)
