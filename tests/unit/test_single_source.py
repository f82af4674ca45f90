"""A single job is a campaign of one from the one-node source (issue 35): it goes through the lifecycle every
campaign goes through, and stays the job of old (its own directory and state, connected before it is owned,
its verdict its own)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.campaign import driver, lifecycle, sources
from orchestrator.campaign.console import Console
from orchestrator.campaign.single import SingleRunner, SingleSource
from orchestrator.campaign.targets import TargetRef
from orchestrator.context import Settings
from orchestrator.errors import ConnectError, ExitCode
from orchestrator.state import JobState, Workspace
from orchestrator.ui import Ui

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "state"


class Refusing:
    """A target whose node refuses the connection."""
    closed = 0

    def connect(self):
        raise ConnectError("connection refused by n1", hint="is sshd running?")

    def close(self):
        self.closed += 1


def _no_inventory():
    raise AssertionError("the target was given: no inventory is read")


def _carry(ws: Workspace, job: JobState, target, owner: str = "run"):
    ui = Ui(quiet=True)
    lifecycle.carry(ws, job, _no_inventory, Settings(yes=True), Console(ui=ui, show=ui.event), target=target,
                    owner=owner)


def test_an_old_single_job_is_a_campaign_of_one_planned_as_it_stands(tmp_path):
    data = json.loads((FIXTURES / "single.json").read_text())
    ws = Workspace(tmp_path / "ws")
    (ws.root / data["job_id"]).mkdir(parents=True)
    shutil.copy(FIXTURES / "single.json", ws.root / data["job_id"] / "state.json")
    job = ws.load(data["job_id"])
    assert sources.source_kind(job) == "single" and driver.planned(job)
    given = object()
    source = sources.open_source(lifecycle.source_env(ws, job, _no_inventory, None, target=given))
    assert type(source) is SingleSource
    assert source.targets() == [TargetRef(data["node"], data["container"])]
    runner = source.runner()
    assert isinstance(runner, SingleRunner) and runner.open(source.targets()[0]) is given   # used as it comes


def test_a_refused_connection_leaves_no_job_behind(tmp_path):
    ws = Workspace(tmp_path / "ws")
    job = JobState(job_id="j1", node="n1", container="c1", variant="a8w8", created=0.0, request={})
    target = Refusing()
    with pytest.raises(ConnectError) as err:
        _carry(ws, job, target)
    assert err.value.exit_code == ExitCode.CONNECT and target.closed == 1
    assert not ws.job_dir("j1").exists()            # owned only once connected: nothing half-made


def test_a_running_single_job_whose_node_refuses_a_resume_stays_running_as_it_was(tmp_path):
    ws = Workspace(tmp_path / "ws")
    job = JobState(job_id="j2", node="n1", container="c1", variant="a8w8", created=0.0, request={},
                   state="running", step="remote")
    ws.save(job)
    before = (ws.job_dir("j2") / "state.json").read_text()
    job = ws.load("j2")
    with pytest.raises(ConnectError):
        _carry(ws, job, Refusing(), owner="resume")
    assert (ws.job_dir("j2") / "state.json").read_text() == before     # no campaign verdict over it
    assert job.state == "running"
