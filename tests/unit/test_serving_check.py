"""The serving check that can say no (issue 37): repeated serve runs judged with the benchmarks' statistics,
a failed run named and left out, an accuracy score, and a promotion that made serving slower rolled back."""

from __future__ import annotations

import csv
import json
import sys
import time

import pytest

from orchestrator.steps import serving_check as sc

FIG = "Output token throughput (tok/s):          {v}\nMean TPOT (ms):                          {t}\n"


def _log(values, mark=sc.RUN_MARK):
    return "".join(f"{mark} {i}\n" + FIG.format(v=v, t=1000 / v) + "[tune-remote] serve command exit status 0\n"
                   for i, v in enumerate(values, 1))


def test_runs_are_split_and_judged_per_metric():
    runs, acc = sc.split(_log([100, 101, 99]) + f"{sc.ACCURACY_MARK} 1\n|gsm8k|3|flexible|5|exact_match|↑|0.9492|±|0.0060|\n")
    assert len(runs) == 3 and sc.score(acc) == pytest.approx(0.9492)
    failed = []
    before = sc._figures(runs, "before", failed)
    after = sc._figures(sc.split(_log([90, 91, 89]))[0], "after", failed)
    rows = {r["metric"]: r for r in sc.judge(before, after)}
    tok = rows["Output token throughput (tok/s)"]
    assert tok["before"] == 100 and tok["after"] == 90 and tok["verdict"] == "regressed" and not failed
    assert rows["Mean TPOT (ms)"]["verdict"] == "regressed"          # latency: higher is worse
    assert sc.primary(list(rows.values())) is tok


def test_a_failed_run_is_named_never_a_zero():
    text = _log([100, 101]) + f"{sc.RUN_MARK} 3\nRuntimeError: engine core failed\n[tune-remote] serve command exit status 1\n"
    failed = []
    got = sc._figures(sc.split(text)[0], "after", failed)
    assert len(got) == 2 and failed == ["after run 3: exit status 1"]
    assert sc.split("no marks at all")[0] == ["no marks at all"]        # an older job's log: one run


def test_one_run_a_side_is_not_judged():
    rows = sc.judge([{"x (req/s)": 10.0}], [{"x (req/s)": 5.0}])
    assert rows[0]["verdict"] is None and rows[0]["change_pct"] == -50.0


@pytest.fixture()
def demo(tmp_path):
    from orchestrator.cli.base import Env
    from orchestrator.demo import prepare_demo
    env = Env(None, str(tmp_path / "ws"), True)
    demo_dir, log = prepare_demo(tmp_path / "node", variant="a8w8_blockscale")
    return env, demo_dir, log


def _job(env, demo_dir, log, serve, **extra):
    from orchestrator.campaign.runs import one
    from orchestrator.context import Settings
    from orchestrator.demo import demo_target
    from orchestrator.state import JobState
    job = JobState(job_id="srv", node="demo", container="simulated", variant="a8w8_blockscale", created=time.time(),
                   request={"logs": [log], "demo_dir": str(demo_dir), "detach": False, "m_preset": None,
                            "nk": ["7168,2048"], "shapes_csv": None, "gpus": None, "batch": None, "timeout": None,
                            "repeats": 1, "promote": "all", "serve_cmd": serve, **extra})
    one(env.workspace, job, demo_target(str(demo_dir)), Settings(yes=True, poll_s=0.2), env.ui())
    return env.workspace.load("srv")


def _serve(extra=""):
    return f"{sys.executable} -m aiter._sim.serve --nk 7168,2048 --m 1,64,1024 {extra}"


def test_a_promotion_whose_serving_is_proven_slower_is_rolled_back(demo):
    env, demo_dir, log = demo
    # the serve command sees its own runs: slower after promotion (a stand-in for a server whose tuned rows
    # regress end to end), so the verdict is "regressed" and the promotion is undone
    counter = demo_dir / "serve_count"
    slow = (f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; "
            f"if [ $n -ge 3 ]; then {_serve('--other-us 400')}; else {_serve()}; fi")
    done = _job(env, demo_dir, log, slow, serve_repeats=3)
    info = done.steps["promote"].info
    v = info["serving_verdict"]
    assert v["verdict"] == "regressed" and v["runs"] == [3, 3] and v.get("rolled_back") is True, v
    assert any(n.startswith("promotion rolled back: serving Output token throughput (tok/s) proven slower")
               for n in done.notes), done.notes
    jd = env.workspace.job_dir("srv")
    assert list(csv.DictReader(open(jd / "serving.csv")))[0].keys() == {"metric", "before", "after", "change_pct"}
    assert sum(1 for r in csv.DictReader(open(jd / "serving_runs.csv")) if r["arm"] == "after") >= 3 * 2
    assert (done.remote.promotion or {}).get("rolled_back") or (done.remote.promotion or {}).get("rounds_undone")
    report = (jd / "report.md").read_text()
    assert "Output token throughput (tok/s): proven slower over 3 run(s) before and 3 after" in report
    assert "The promotion was rolled back: serving Output token throughput (tok/s) proven slower" in report


def test_keep_says_so_and_keeps_the_rows(demo):
    env, demo_dir, log = demo
    counter = demo_dir / "serve_count"
    slow = (f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; "
            f"if [ $n -ge 3 ]; then {_serve('--other-us 400')}; else {_serve()}; fi")
    done = _job(env, demo_dir, log, slow, serve_repeats=3, on_serving_regression="keep")
    assert "rolled_back" not in done.steps["promote"].info["serving_verdict"]
    assert any(n.startswith("promotion kept although serving") for n in done.notes)


def test_an_accuracy_drop_beyond_the_bound_rolls_back(demo):
    env, demo_dir, log = demo
    counter = demo_dir / "acc_count"
    acc = (f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; "
           "if [ $n -ge 1 ]; then echo '|gsm8k|3|strict|5|exact_match|^|0.9000|+-|0.006|'; "
           "else echo '|gsm8k|3|strict|5|exact_match|^|0.9500|+-|0.006|'; fi")
    done = _job(env, demo_dir, log, _serve(), serve_repeats=2, accuracy_cmd=acc)
    v = done.steps["promote"].info["serving_verdict"]
    assert v["accuracy_before"] == 0.95 and v["accuracy_after"] == 0.9 and v.get("rolled_back") is True, v
    assert any("accuracy 0.95 -> 0.9 (more than 1 % lower)" in n for n in done.notes)
    json.dumps(v)
