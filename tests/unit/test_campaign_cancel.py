"""`cancel` of a campaign (issue 10, issue 8's cancel rows), as an audit found it missing: a target that had
already ended on its own keeps its results (the campaign stays running for `resume` to collect them, not
"cancelled" with that target stuck at "running"); processes that survived SIGKILL are named with exit 1."""

from __future__ import annotations

import pytest

from orchestrator.campaign import driver
from orchestrator.cli import main
from orchestrator.state import JobState, Workspace


class Runner:
    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    def cancel(self, sub, workspace, grace_s):
        self.asked.append(sub.node)
        return self.answers[sub.node]

    def runner(self):
        return self

    def close(self):
        pass


def _campaign(ws: Workspace, nodes=("n1", "n2")) -> JobState:
    job = JobState(job_id="c1", node=",".join(nodes), container="c", variant="a8w8", created=0.0,
                   request={"campaign": {"nodes": list(nodes), "container": "c", "sub_jobs": []}})
    subws = driver.sub_workspace(ws, job)
    for n in nodes:
        sub = JobState(job_id=f"c1.{n}.c.a8w8", node=n, container="c", variant="a8w8", created=0.0, request={},
                       state="running")
        sub.remote["run_dir"] = f"/r/{n}"
        subws.save(sub)
        job.request["campaign"]["sub_jobs"].append(sub.job_id)
    job.state = "running"
    ws.save(job)
    return job


def _states(ws, job):
    return {s.node: s.state for s in driver.sub_jobs(job, ws)}


def test_a_target_that_finished_first_keeps_its_results_and_the_campaign_waits_for_resume(tmp_path):
    ws = Workspace(tmp_path / "ws")
    job = _campaign(ws)
    runner = Runner({"n1": {"already_finished": True, "state": "succeeded"},
                     "n2": {"signalled": [11, 12], "killed": [12], "table": {"line": "[tune-remote] table: repaired"}}})
    res = driver.cancel(job, ws, runner, 1.0)
    assert _states(ws, job) == {"n1": "running", "n2": "cancelled"}
    assert ws.load("c1").state == "running"             # `resume` collects n1, then the campaign ends
    assert res["finished"] == ["n1/c a8w8 (succeeded)"] and (res["signalled"], res["killed"]) == (2, 1)
    assert res["tables"] == ["n2/c a8w8: [tune-remote] table: repaired"]
    assert driver.finish(ws.load("c1"), ws) == "running"


def test_every_target_cancelled_ends_the_campaign_cancelled(tmp_path):
    ws = Workspace(tmp_path / "ws")
    job = _campaign(ws)
    driver.cancel(job, ws, Runner({"n1": {}, "n2": {}}), 1.0)
    assert _states(ws, job) == {"n1": "cancelled", "n2": "cancelled"} and ws.load("c1").state == "cancelled"


def _cancel_cli(tmp_path, monkeypatch, capsys, answers) -> tuple[int, str, str]:
    """`tune-remote cancel c1` on a campaign of n1, n2 whose nodes answer ``answers``."""
    ws = Workspace(tmp_path / "ws")
    _campaign(ws)
    from orchestrator.campaign import lifecycle
    from orchestrator.campaign.targets import TargetSource

    class Source(TargetSource):          # per-target cancel through the runner (the inventory's way)
        def runner(self, accept_new_host_key=False):
            return Runner(answers)

    monkeypatch.setattr(lifecycle, "open_source", lambda env: Source())
    code = main(["--workspace", str(ws.root), "cancel", "c1"])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_names_survivors_with_exit_1_and_says_what_finished_first(tmp_path, monkeypatch, capsys):
    code, out, err = _cancel_cli(tmp_path, monkeypatch, capsys, {
        "n1": {"already_finished": True, "state": "failed"}, "n2": {"remaining": [4242]}})
    assert code == 1 and "n2:4242" in err and "survived SIGKILL" in err, err
    assert "had already ended on their own: n1/c a8w8 (failed)" in out and "resume c1" in out
    assert "job c1 cancelled" not in out       # n2 cancelled, n1 to collect: the job is not cancelled


def test_a_campaign_with_an_unreachable_target_is_failed_in_its_report_too(tmp_path, monkeypatch):
    """The state the report is written with is the one `status` shows (was: report "succeeded", job failed)."""
    from orchestrator.campaign import merge
    ws = Workspace(tmp_path / "ws")
    job = _campaign(ws)
    job.request["campaign"]["unreachable"] = ["n3/c: cannot connect"]
    subws = driver.sub_workspace(ws, job)
    for sub in driver.sub_jobs(job, ws):
        sub.state = "succeeded"
        subws.save(sub)
    written = []
    monkeypatch.setattr(merge, "write_outputs", lambda job, ws, subs: written.append((job.state, job.error)))
    assert driver.finish(job, ws) == "failed"
    assert written == [("failed", "unreachable: n3/c: cannot connect")]


@pytest.mark.parametrize("step,after", [("remote", "running"), ("compare", "failed")])
def test_a_bug_in_a_target_job_leaves_a_pipeline_that_may_run_re_attachable(tmp_path, step, after):
    """A reviewer found the campaign driver marked a target 'failed' on any bug, even while its pipeline may
    still run on the node (the engine leaves that one running for `resume`): GPUs held, nothing to cancel."""
    from types import SimpleNamespace
    ws = Workspace(tmp_path / "ws")
    job = _campaign(ws, nodes=("n1",))
    subws = driver.sub_workspace(ws, job)
    [sub] = driver.sub_jobs(job, ws)
    sub.step = step
    sub.request["shapes_csv"] = str(tmp_path / "shard.csv")
    (tmp_path / "shard.csv").write_text("M,N,K\n1,2,3\n")
    subws.save(sub)

    class Buggy(Runner):
        ui_for = None

        def run(self, sub, workspace, settings):
            raise KeyError("boom")

    ui = SimpleNamespace(event=lambda *a: None)
    job.request["promote"] = "none"
    driver.drive(job, ws, Buggy({}), SimpleNamespace(poll_s=1, reconnect_s=1, accept_new_host_key=False), ui)
    [sub] = driver.sub_jobs(job, ws)
    assert sub.state == after
    assert (after == "running") == (ws.load("c1").state == "running")
    if after == "failed":
        assert sub.error == "internal error: KeyError: 'boom'"


def test_the_cli_says_how_many_targets_it_cancelled_when_others_wait_to_be_collected(tmp_path, monkeypatch, capsys):
    code, out, _err = _cancel_cli(tmp_path, monkeypatch, capsys, {
        "n1": {"already_finished": True, "state": "succeeded"}, "n2": {"signalled": [7]}})
    assert code == 0
    assert "job c1: 1 target(s) cancelled (1 process(es) signalled, 0 killed)" in out and "resume c1" in out


def test_status_lists_a_campaigns_targets_and_node_narrows_them(tmp_path, capsys):
    """A user found `status C --node demo2` printed the same whole-job row as `status C` (only --json narrowed)."""
    ws = Workspace(tmp_path / "ws")
    _campaign(ws)
    capsys.readouterr()
    assert main(["--workspace", str(ws.root), "status", "c1"]) == 0
    out = capsys.readouterr().out
    assert "    n1/c  a8w8  running" in out and "    n2/c  a8w8  running" in out
    assert main(["--workspace", str(ws.root), "status", "c1", "--node", "n2"]) == 0
    out = capsys.readouterr().out
    assert "n2/c" in out and "n1/c" not in out
