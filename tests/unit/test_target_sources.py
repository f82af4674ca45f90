"""One seam for where a campaign's targets come from (issue 25): the source is found by the kind saved in the
job; a job saved before the kind was still resumes, cancels and shows its status through its own source."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.campaign import driver, lifecycle, sources
from orchestrator.campaign.demo import DemoSource
from orchestrator.campaign.slurm import SlurmRunner, SlurmSource
from orchestrator.campaign.targets import (InventoryRunner, InventorySource, PooledRunner, SourceEnv, TargetRef,
                                           TargetSource)
from orchestrator.cli import main
from orchestrator.context import Settings
from orchestrator.errors import JobError, UsageError
from orchestrator.inventory import load_inventory
from orchestrator.state import JobState, Workspace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "state"

INV = """nodes:
  n1:
    local: true
    containers:
      c1: {}
  n2:
    local: true
    containers:
      c1: {}
slurm:
  gpu:
    login: 127.0.0.1
    port: 1
    container: "tr-{node}"
"""


@pytest.fixture
def ws(tmp_path, monkeypatch) -> Workspace:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INV)
    monkeypatch.setenv("TUNE_REMOTE_INVENTORY", str(inv))
    monkeypatch.setenv("TUNE_REMOTE_WORKSPACE", str(tmp_path / "ws"))
    return Workspace(tmp_path / "ws")


def _old_job(ws: Workspace, name: str) -> JobState:
    """A campaign's state.json as the code before the saved kind wrote it (no request.campaign.source)."""
    data = json.loads((FIXTURES / name).read_text())
    assert "source" not in data["request"]["campaign"]
    d = ws.root / data["job_id"]
    d.mkdir(parents=True)
    shutil.copy(FIXTURES / name, d / "state.json")
    return ws.load(data["job_id"])


def _env(ws: Workspace, job: JobState) -> SourceEnv:
    return lifecycle.source_env(ws, job, lambda: load_inventory(str(ws.root.parent / "inv.yaml")), None)


@pytest.mark.parametrize("name,kind,cls", [("campaign_slurm_before_source_kind.json", "slurm", SlurmSource),
                                           ("campaign_inventory_before_source_kind.json", "inventory",
                                            InventorySource)])
def test_a_campaign_saved_before_the_kind_finds_its_source_from_its_keys(ws, name, kind, cls):
    job = _old_job(ws, name)
    assert sources.source_kind(job) == kind
    source = sources.open_source(_env(ws, job))
    assert type(source) is cls and source.kind == kind
    if kind == "slurm":
        assert source.state is job.request["campaign"]["slurm"] and source.spec.name == "gpu"
        assert source.targets.__func__ is SlurmSource.targets     # not the inventory's
    else:
        assert source.targets() == [TargetRef("n1", "c1"), TargetRef("n2", "c1")]


def test_an_old_slurm_campaign_shows_its_saved_slurm_rows_when_the_login_node_is_unreachable(ws, capsys):
    """`status --json` of a campaign saved before the kind: the Slurm source answers (its login node, port 1
    here, cannot be reached: the rows last saved)."""
    _old_job(ws, "campaign_slurm_before_source_kind.json")
    assert main(["status", "old-slurm", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["targets"] == []
    assert row["slurm"] == [{"job": "tr-old-slurm-0", "id": "101", "state": "RUNNING", "reason": None, "node": "c1"}]


def test_an_old_slurm_campaign_is_still_cancelled_as_a_whole(ws, capsys):
    _old_job(ws, "campaign_slurm_before_source_kind.json")
    job = ws.load("old-slurm")
    job.request["campaign"]["sub_jobs"] = ["x"]
    with pytest.raises(UsageError, match="a Slurm campaign is cancelled as a whole"):
        lifecycle.cancel(ws, job, lambda: load_inventory(str(ws.root.parent / "inv.yaml")), None, 1.0,
                         nodes=("c1",))


def test_the_kind_is_derived_for_a_demo_and_the_saved_kind_wins():
    job = JobState(job_id="j", node="demo1", container="simulated", variant="v", created=0.0,
                   request={"demo_nodes": {"demo1": "/d"}, "campaign": {"nodes": ["demo1"], "sub_jobs": []}})
    assert sources.source_kind(job) == "demo"
    assert type(sources.open_source(SourceEnv(job, lambda: None, lambda: None))) is DemoSource
    job.request["campaign"]["source"] = "inventory"
    assert sources.source_kind(job) == "inventory"


def test_a_new_campaign_saves_its_kind_and_the_source_its_state(ws):
    job = JobState(job_id="new", node="", container="", variant="a8w8_blockscale", created=0.0,
                   request={"campaign": {"nodes": [], "container": None, "sub_jobs": []}})
    env = _env(ws, job)
    assert sources.begin("slurm", env, {"cluster": "gpu", "nodes": 2, "dry_run": True})[0].startswith(
        "submit 2 Slurm job(s) to gpu through 127.0.0.1")
    assert "slurm" not in job.request["campaign"]          # a dry run keeps nothing
    assert sources.begin("slurm", env, {"cluster": "gpu", "nodes": 2}) is None
    ws.save(job)
    again = ws.load("new")
    assert again.request["campaign"]["source"] == "slurm" and again.request["campaign"]["slurm"]["nodes"] == 2
    assert (again.node, again.container, again.step) == ("slurm:gpu", "tr-{node}", "submit")
    assert sources.begin("inventory", env, {}) is None and job.request["campaign"]["source"] == "inventory"


def test_an_unknown_kind_is_one_line_naming_the_known_ones():
    job = JobState(job_id="j", node="n", container="c", variant="v", created=0.0,
                   request={"campaign": {"source": "k8s", "sub_jobs": []}})
    with pytest.raises(JobError) as err:
        sources.open_source(SourceEnv(job, lambda: None, lambda: None))
    assert "unknown target source 'k8s'" in err.value.one_line() and "inventory, slurm, demo" in err.value.hint
    with pytest.raises(UsageError):
        sources.begin("k8s", SourceEnv(job, lambda: None, lambda: None), {})


def test_every_registered_source_is_a_target_source_of_its_kind():
    for kind in sources.SOURCES:
        cls = sources.source_class(kind)
        assert issubclass(cls, TargetSource) and cls.kind == kind


def test_a_source_has_no_op_defaults():
    class Bare(TargetSource):
        pass
    s = Bare()
    assert s.release() is None and s.release(keep={"n1"}) is None and s.close() is None
    assert s.cancel(1.0) is None and s.ended_by_cancel(RuntimeError(), True) is False
    assert Bare.status(None, [], True) == {} and Bare.acquires is False and Bare.cancelled_whole is None


def test_runners_share_the_pooled_base_and_none_is_an_inventory_runner_without_an_inventory():
    assert issubclass(SlurmRunner, PooledRunner) and not issubclass(SlurmRunner, InventoryRunner)
    runner = DemoSource({"demo1": "/d"}).runner()
    assert isinstance(runner, PooledRunner) and not isinstance(runner, InventoryRunner)
    assert not hasattr(runner, "inventory")


class ToySource(TargetSource):
    """A source registered with one line (as a Kubernetes one would be): it ends its targets its own way."""
    kind = "toy"
    cancelled_whole = "a toy campaign is cancelled as a whole"
    seen: list = []

    @classmethod
    def from_job(cls, env):
        return cls()

    def runner(self, accept_new_host_key=False):
        return ToyRunner()

    def cancel(self, grace_s):
        self.seen.append(grace_s)
        return 3, 1

    def close(self):
        self.seen.append("closed")


class ToyRunner:
    def cancel(self, sub, workspace, grace_s):
        raise AssertionError("the source ended the processes: no per-target cancel")

    def close(self):
        pass


def test_one_registry_line_makes_a_source_that_cancel_uses(ws, monkeypatch):
    monkeypatch.setitem(sources.SOURCES, "toy", f"{__name__}:ToySource")
    ToySource.seen.clear()
    job = JobState(job_id="t1", node="a", container="c", variant="v", created=0.0, state="running",
                   request={"campaign": {"source": "toy", "sub_jobs": []}})
    subws = driver.sub_workspace(ws, job)
    sub = JobState(job_id="t1.a.c.v", node="a", container="c", variant="v", created=0.0, request={}, state="running")
    sub.remote["run_dir"] = "/r"
    subws.save(sub)
    job.request["campaign"]["sub_jobs"].append(sub.job_id)
    ws.save(job)
    with pytest.raises(UsageError, match="toy campaign is cancelled as a whole"):
        lifecycle.cancel(ws, job, lambda: None, None, 2.0, nodes=("a",))
    res = lifecycle.cancel(ws, job, lambda: None, None, 2.0)
    assert (res["signalled"], res["killed"]) == (3, 1) and ToySource.seen == [2.0, "closed"]
    assert ws.load("t1").state == "cancelled" and subws.load(sub.job_id).state == "cancelled"


class HeldSource(TargetSource):
    """A source that holds something until it is released (as Slurm holds its nodes)."""
    kind = "held"
    log: list = []

    @classmethod
    def from_job(cls, env):
        return cls()

    def targets(self):
        return [TargetRef("a", "c")]

    def runner(self, accept_new_host_key=False):
        log = self.log

        class R:
            def keep_only(self, nodes):
                log.append(("keep_only", nodes))

            def close(self):
                log.append("runner closed")
        return R()

    def release(self, keep=None):
        self.log.append(("release", keep))

    def close(self):
        self.log.append("source closed")


def test_a_no_at_the_confirmation_launches_nothing_and_the_source_gives_back_what_it_held(ws, monkeypatch):
    monkeypatch.setitem(sources.SOURCES, "held", f"{__name__}:HeldSource")
    HeldSource.log.clear()
    plan = {"variants": {"v": {"gfx942": {"a/c": ["1,2,3"]}}}, "unreachable": []}
    monkeypatch.setattr(driver, "make_plan", lambda *a, **k: plan)
    monkeypatch.setattr(lifecycle, "plan_lines", lambda p: ["v: 1 shape on a/c"])
    monkeypatch.setattr(driver, "create_sub_jobs", lambda *a: pytest.fail("a sub-job was made"))
    job = JobState(job_id="h1", node="a", container="c", variant="v", created=0.0,
                   request={"variants": ["v"], "campaign": {"sub_jobs": []}})
    shown, asked = [], []
    console = lifecycle.Console(ui=None, show=shown.append, confirm=lambda q: asked.append(q) or False)
    with pytest.raises(lifecycle.Declined):
        lifecycle.start(ws, job, "held", {}, lambda: None, Settings(), console)
    assert shown == ["plan:\n  v: 1 shape on a/c"] and asked == ["Run this campaign (1 targets)?"]
    assert (job.state, job.error) == ("cancelled", "cancelled at the plan confirmation")
    assert job.request["campaign"]["source"] == "held" and not ws.exists("h1")    # nothing saved
    assert HeldSource.log == ["runner closed", ("release", None), "source closed"]
