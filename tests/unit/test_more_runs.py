"""The sequential design (issue 37): with --max-repeats, runs are added for the undecided shapes only, each
round's output is kept, and a compare run again reads the rounds it ran instead of running them twice."""

from __future__ import annotations

import csv
import time

import pytest

from orchestrator.cli.base import Env
from orchestrator.campaign.runs import one
from orchestrator.context import Settings
from orchestrator.demo import demo_target, prepare_demo
from orchestrator.outcome.intervals import job_k
from orchestrator.state import JobState
from orchestrator.steps import more_runs


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seq")
    env = Env(None, str(tmp / "ws"), True)
    demo_dir, log = prepare_demo(tmp / "node", variant="a8w8_blockscale", noise_model="measured", noise_seed=3)
    j = JobState(job_id="seq", node="demo", container="simulated", variant="a8w8_blockscale", created=time.time(),
                 request={"logs": [log], "demo_dir": str(demo_dir), "detach": False, "m_preset": None, "nk": [],
                          "shapes_csv": None, "gpus": None, "batch": None, "timeout": None, "repeats": 2,
                          "max_repeats": 6, "promote": "none"})
    one(env.workspace, j, demo_target(str(demo_dir)), Settings(yes=True, poll_s=0.2), env.ui())
    return env, env.workspace.load("seq"), demo_dir


def test_only_undecided_shapes_get_more_runs_up_to_the_bound(job):
    env, done, _ = job
    assert done.state == "succeeded", done.error
    info = done.steps["compare"].info
    seq = info["sequential"]
    assert seq["start"] == 2 and seq["max"] == 6 and seq["looks"] == 3 and 1 <= seq["rounds"] <= 2
    rows = list(csv.DictReader(open(env.workspace.job_dir("seq") / "comparison.csv")))
    runs = [int(r["before_n"]) for r in rows]
    assert set(runs) <= {2, 4, 6} and max(runs) > 2 and min(runs) == 2       # some shapes only, never past 6
    assert all(r["before_n"] == r["after_n"] for r in rows)
    assert seq["runs_added"] == sum(n - 2 for n in runs)
    for r in rows:                           # a shape with runs added was undecided at each earlier look
        if int(r["before_n"]) == 2:
            continue
        assert [int(r["m"]), int(r["n"]), int(r["k"])] in info["more_runs"][0]["keys"]
    # the bar covers every look of the design: the job's K is the union bound's over shapes x looks
    assert info["summary"]["verdict_k"] == job_k(len(rows), 3)
    report = (env.workspace.job_dir("seq") / "report.md").read_text()
    assert (f"Sequential design: 2 run(s) per arm first, then 2 more at a time for the undecided shapes only, up "
            f"to 6: {seq['rounds']} round(s) added {seq['runs_added']} run(s)") in report


def test_a_compare_run_again_reads_its_rounds_and_runs_none(job, monkeypatch):
    env, done, demo_dir = job
    from orchestrator.context import Ctx
    from orchestrator.steps import compare
    before = list(csv.DictReader(open(env.workspace.job_dir("seq") / "comparison.csv")))
    ctx = Ctx(job=done, workspace=env.workspace, target=demo_target(str(demo_dir)), settings=Settings(yes=True),
              ui=env.ui())
    calls = []
    real = ctx.call
    monkeypatch.setattr(ctx, "call", lambda op, *a, **k: calls.append(op) or real(op, *a, **k))
    compare.run(ctx)
    assert "run" not in calls
    again = list(csv.DictReader(open(env.workspace.job_dir("seq") / "comparison.csv")))
    assert [(r["m"], r["before_n"], r["verdict"]) for r in again] == [(r["m"], r["before_n"], r["verdict"])
                                                                      for r in before]


def test_a_fixed_run_count_has_no_design():
    job = JobState(job_id="x", node="n", container="c", variant="a8w8_blockscale", created=0.0,
                   request={"repeats": 3})
    assert more_runs.design(job) is None and more_runs.looks(None) == 1
    job.request["max_repeats"] = 3
    assert more_runs.design(job) is None
    job.request["max_repeats"] = 30
    assert more_runs.design(job) == (3, 3, 30) and more_runs.looks((3, 3, 30)) == 10


def test_run_asks_for_the_sequential_design_unless_repeats_is_given():
    """run without --repeats: 5, then more for the undecided, up to 30; --repeats N alone forces N (the old
    contract); the serving check's keys only where they are not off, so other jobs write the keys they did."""
    from orchestrator.campaign.checks import outcome_options
    assert outcome_options(None, None, None, 3, None, 1.0, "rollback") == {"max_repeats": 30}
    assert outcome_options(3, None, None, 3, None, 1.0, "rollback") == {}
    assert outcome_options(3, 12, None, 3, None, 1.0, "rollback") == {"max_repeats": 12}
    assert outcome_options(5, 5, None, 3, None, 1.0, "rollback") == {}
    assert outcome_options(3, None, "serve", 3, "acc", 2.0, "keep") == {
        "serve_repeats": 3, "accuracy_cmd": "acc", "max_accuracy_drop": 2.0, "on_serving_regression": "keep"}
    assert outcome_options(3, None, "serve", 1, None, 1.0, "rollback") == {}


@pytest.mark.parametrize("extra,needle", [(["--accuracy-cmd", "lm_eval"], "--serve-cmd"),
                                          (["--repeats", "5", "--max-repeats", "3"], "--max-repeats 3")])
def test_bad_outcome_flags_are_one_line_exit_2(tmp_path, monkeypatch, capsys, extra, needle):
    from orchestrator.cli import main
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  n1:\n    host: 127.0.0.1\n    containers:\n      c: {}\n")
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--node", "n1",
                 "--variant", "a8w8_blockscale", "--nk", "7168,2048", *extra])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
