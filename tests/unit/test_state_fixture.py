"""state.json files written by the code at 7b370c2 (tests/fixtures/state/: a demo job, a 3-node demo campaign
and one of its targets) load, resume and save with today's code, and keys it does not know survive."""

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.state import Workspace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state"
SINGLE, CAMPAIGN, TARGET = (json.loads((FIXTURES / f).read_text())
                            for f in ("single.json", "campaign.json", "campaign-target.json"))


def _workspace(tmp_path) -> Workspace:
    ws = tmp_path / "ws"
    for data in (SINGLE, CAMPAIGN):
        (ws / data["job_id"]).mkdir(parents=True)
        (ws / data["job_id"] / "state.json").write_text(json.dumps(data))
    sub = ws / CAMPAIGN["job_id"] / "targets" / TARGET["job_id"]
    sub.mkdir(parents=True)
    (sub / "state.json").write_text(json.dumps(TARGET))
    return Workspace(ws)


def _load(tmp_path, data):
    (tmp_path / data["job_id"]).mkdir()
    (tmp_path / data["job_id"] / "state.json").write_text(json.dumps(data))
    return Workspace(tmp_path).load(data["job_id"])


def _without_rev(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "rev"}


@pytest.mark.parametrize("data", [SINGLE, CAMPAIGN, TARGET], ids=["single", "campaign", "target"])
def test_an_old_state_saves_back_to_the_same_json(tmp_path, data):
    ws = Workspace(tmp_path)
    path = tmp_path / data["job_id"] / "state.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    job = ws.load(data["job_id"])
    assert ws.save(job)
    saved = json.loads(path.read_text())
    assert saved["rev"] == data["rev"] + 1
    assert _without_rev(saved) == _without_rev(data)


def test_keys_this_code_does_not_know_survive_a_load_and_save(tmp_path):
    data = json.loads(json.dumps(SINGLE))
    data["request"]["from_the_future"] = {"x": 1}
    data["facts"]["from_the_future"] = [1, 2]
    data["remote"]["from_the_future"] = "/tmp/x"
    path = tmp_path / data["job_id"] / "state.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    ws = Workspace(tmp_path)
    assert ws.save(ws.load(data["job_id"]))
    saved = json.loads(path.read_text())
    assert saved["request"]["from_the_future"] == {"x": 1}
    assert saved["facts"]["from_the_future"] == [1, 2]
    assert saved["remote"]["from_the_future"] == "/tmp/x"


def test_old_jobs_resume_and_report_their_state(tmp_path, capsys):
    ws = _workspace(tmp_path)
    for job_id in (SINGLE["job_id"], CAMPAIGN["job_id"]):
        assert main(["--workspace", str(ws.root), "resume", job_id, "--yes"]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert out["job_id"] == job_id and out["state"] == "succeeded"
        assert main(["--workspace", str(ws.root), "status", job_id]) == 0
    assert "demo1/simulated  a8w8_blockscale  succeeded" in capsys.readouterr().out   # the old target, read
    job = ws.load(SINGLE["job_id"])
    assert job.step_state("remote").status == "done" and job.state == "succeeded"
    assert ws.save(job)


def test_a_lost_old_job_is_refused_a_plain_resume_and_relaunch_is_offered(tmp_path, capsys):
    ws = _workspace(tmp_path)
    path = ws.job_dir(SINGLE["job_id"]) / "state.json"
    data = json.loads(path.read_text())
    data.update(state="lost", error="its process on the node is gone")
    path.write_text(json.dumps(data))
    assert main(["--workspace", str(ws.root), "resume", SINGLE["job_id"]]) != 0
    assert "--relaunch" in capsys.readouterr().err


def test_the_fixtures_are_what_the_old_code_wrote():
    assert SINGLE["state"] == "succeeded" and SINGLE["request"]["demo_dir"]
    assert {s["status"] for s in SINGLE["steps"].values()} == {"done"}
    assert CAMPAIGN["request"]["campaign"] and TARGET["request"]["parent"] == CAMPAIGN["job_id"]
    assert len(SINGLE["remote"]) >= 21 and len(SINGLE["facts"]) >= 16 and len(SINGLE["request"]) >= 12


def test_the_records_are_typed_and_read_through_attributes(tmp_path):
    from orchestrator.records import Facts, JobRequest, NodePaths
    job = _load(tmp_path, TARGET)
    assert isinstance(job.request, JobRequest) and isinstance(job.facts, Facts) and isinstance(job.remote, NodePaths)
    assert job.request.parent == CAMPAIGN["job_id"] and job.request.serve_cmd is None    # absent: None, as .get was
    assert job.facts.gfx == TARGET["facts"]["gfx"] and job.remote.run_dir == TARGET["remote"]["run_dir"]
    assert "serve_cmd" not in job.request and "serve_cmd" not in json.loads(job.to_json())["request"]
    job.remote.relaunches = 1                      # set through an attribute: written
    assert json.loads(job.to_json())["remote"]["relaunches"] == 1
    assert dict(NodePaths()) == {} and dict(JobRequest(detach=False)) == {"detach": False}


def test_a_top_level_key_this_code_does_not_know_survives(tmp_path):
    data = dict(SINGLE, from_the_future={"a": 1})
    (tmp_path / data["job_id"]).mkdir()
    (tmp_path / data["job_id"] / "state.json").write_text(json.dumps(data))
    ws = Workspace(tmp_path)
    assert ws.save(ws.load(data["job_id"]))
    assert json.loads((tmp_path / data["job_id"] / "state.json").read_text())["from_the_future"] == {"a": 1}
