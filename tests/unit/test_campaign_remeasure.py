"""The merged `after` is what the GPU kind serves (issue 28): which shapes of a target are measured again after
the promotion across its kind, how the value lands in the merged comparison, and a lost target whose shapes the
survivors tuned leaves the campaign succeeded."""

from __future__ import annotations

import pandas as pd

from orchestrator.campaign import driver
from orchestrator.campaign.remeasure import apply, wanted
from orchestrator.state import JobState, Workspace

COLS = ["m", "n", "k"]


def _sub(peer_keys, no_kernel) -> JobState:
    sub = JobState(job_id="c.n2.c.v", node="n2", container="c", variant="a8w8_blockscale", created=0.0, request={})
    sub.shapes = [{"m": m, "n": 3584, "k": 1792} for m in (100, 116, 256)]
    sub.step_state("compare").info["tuned"] = {"no_kernel": [{"m": m, "n": 3584, "k": 1792} for m in no_kernel]}
    sub.remote["peer_promotions"] = [{"from": "c.n1.c.v", "promoted": [["gfx950", "256", *k] for k in peer_keys]}]
    return sub


def test_only_no_kernel_shapes_and_replaced_rows_of_a_target_that_received_rows_are_measured_again():
    sub = _sub([["256", "3584", "1792"], ["128", "3584", "1792"]], [116])
    assert wanted(sub, COLS) == {(116, 3584, 1792): "no kernel found on its own target",
                                 (256, 3584, 1792): "its row replaced by another target's"}
    assert wanted(_sub([], [116]), COLS) == {}        # nothing promoted onto it: what it measured is served
    rolled = _sub([["128", "3584", "1792"]], [116])
    rolled.remote.peer_promotions[0]["rolled_back"] = True
    assert wanted(rolled, COLS) == {}


def _frame() -> pd.DataFrame:
    return pd.DataFrame([
        {"m": "116", "n": "3584", "k": "1792", "metric": "ck TFLOPS", "before": "265.7", "after": "266.0",
         "speedup_pct": "0.11", "verdict": "within_noise", "after_n": "3", "p_value": "0.65", "threshold_pct": "1.0",
         "node": "n2"},
        {"m": "116", "n": "3584", "k": "1792", "metric": "ck TFLOPS", "before": "265.7", "after": "266.0",
         "speedup_pct": "0.11", "verdict": "within_noise", "after_n": "3", "p_value": "0.65", "threshold_pct": "1.0",
         "node": "n1"}]).astype(str)


def test_a_value_measured_again_replaces_after_speedup_and_verdict_of_that_node_only():
    df = _frame()
    lines = apply(df, "n2", [{"key": {"m": "116", "n": "3584", "k": "1792"}, "why": "no kernel found on its own target",
                              "value": 403.451, "served": "the padded-M row M=128"}], higher_is_better=True)
    assert df.loc[0, ["after", "speedup_pct", "verdict", "after_n", "p_value"]].tolist() == [
        "403.451", "51.84", "improved", "1", ""]
    assert df.loc[1, "after"] == "266.0" and df.loc[1, "verdict"] == "within_noise"    # n1's row is its own
    assert lines == ["n2 m=116 n=3584 k=1792: no kernel found on its own target; served by the padded-M row M=128: "
                     "after 266.0 -> 403.451 (measured again after the promotion across its kind)"]


def test_a_shape_not_measured_again_keeps_after_and_its_verdict_says_why():
    df = _frame()
    apply(df, "n2", [{"key": {"m": "116", "n": "3584", "k": "1792"}, "why": "no kernel found on its own target",
                      "not_measured": "connection refused"}], higher_is_better=True)
    assert df.loc[0, "after"] == "266.0"
    assert df.loc[0, "verdict"] == ("not measured again after the promotion across its GPU kind (no kernel found on "
                                    "its own target): connection refused")


def test_after_a_rollback_of_the_rows_it_received_the_merged_after_is_its_own_again(tmp_path):
    from orchestrator.campaign import merge
    ws = Workspace(tmp_path / "ws")
    job = JobState(job_id="c1", node="n1,n2", container="c", variant="a8w8_blockscale", created=0.0,
                   request={"campaign": {"sub_jobs": ["c1.n2"], "remeasured": {"c1.n2": [
                       {"key": {"m": "116", "n": "3584", "k": "1792"}, "why": "no kernel found on its own target",
                        "value": 403.451, "served": "the padded-M row M=128"}]}}})
    sub = _sub([["128", "3584", "1792"]], [116])
    sub.job_id = "c1.n2"
    subws = driver.sub_workspace(ws, job)
    (subws.job_dir("c1.n2")).mkdir(parents=True)
    _frame().iloc[[0]].drop(columns=["node"]).to_csv(subws.job_dir("c1.n2") / "comparison.csv", index=False)

    def merged_after():
        out = merge.merged_comparisons(job, ws, [sub])["a8w8_blockscale"]
        return pd.read_csv(out, dtype=str)["after"].tolist()
    assert merged_after() == ["403.451"]
    sub.remote.peer_promotions[0]["rolled_back"] = True
    assert merged_after() == ["266.0"]


def _campaign(ws: Workspace, states: dict, resharded: dict) -> JobState:
    job = JobState(job_id="c1", node="n1,n2", container="c", variant="a8w8", created=0.0,
                   request={"campaign": {"nodes": ["n1", "n2"], "container": "c", "sub_jobs": [],
                                         "resharded": resharded}})
    subws = driver.sub_workspace(ws, job)
    for sid, state in states.items():
        subws.save(JobState(job_id=sid, node=sid.split(".")[1], container="c", variant="a8w8", created=0.0,
                            request={}, state=state))
        job.request["campaign"]["sub_jobs"].append(sid)
    ws.save(job)
    return job


def test_a_lost_target_whose_shapes_the_survivor_tuned_leaves_the_campaign_succeeded(tmp_path, monkeypatch):
    from orchestrator.campaign import merge
    monkeypatch.setattr(merge, "write_outputs", lambda job, ws, subs: None)
    ws = Workspace(tmp_path / "ws")
    job = _campaign(ws, {"c1.n1": "succeeded", "c1.n2": "lost", "c1.n1.r1": "succeeded"}, {"c1.n2": ["c1.n1.r1"]})
    assert driver.finish(job, ws) == "succeeded" and job.error is None
    job = _campaign(Workspace(tmp_path / "w2"), {"c1.n1": "succeeded", "c1.n2": "lost"}, {"c1.n2": []})
    assert driver.finish(job, Workspace(tmp_path / "w2")) == "failed" and "lost" in job.error   # nobody tuned them
    job = _campaign(Workspace(tmp_path / "w3"), {"c1.n1": "succeeded", "c1.n2": "lost", "c1.n1.r1": "failed"},
                    {"c1.n2": ["c1.n1.r1"]})
    assert driver.finish(job, Workspace(tmp_path / "w3")) == "failed"
    job = _campaign(Workspace(tmp_path / "w4"), {"c1.n1": "succeeded", "c1.n2": "lost"},
                    {"c1.n2": ["(nothing left to tune)"]})
    assert driver.finish(job, Workspace(tmp_path / "w4")) == "succeeded"


def test_what_served_a_shape_is_read_from_its_lookup_line():
    from orchestrator.campaign.remeasure import served
    from orchestrator.steps.engage import lookup_hits
    text = ("[aiter] A6W4 shape M:256 N:4000 K:4096 matched padded config M:256 N:4096 K:4096 in /t.csv: k1\n"
            "[aiter] A6W4 shape M:512 N:4096 K:4096 matched exact config M:512 N:4096 K:4096 in /t.csv: k2\n")
    hits = lookup_hits(text)
    # the same M, padded in N: not its own row (it read as one before: only padded_m was looked at)
    assert served(hits[(256, 4000, 4096)], 256) == "the padded row M:256 N:4096 K:4096"
    assert served(hits[(512, 4096, 4096)], 512) == "its own row"
    assert served({"hit": True, "padded_m": 128}, 116) == "the padded-M row M=128"
    assert served({"hit": False, "padded_m": None}, 1) == "the default kernel (no tuned row matched)"
    assert served(None, 1) == "the live table"
    assert served(None, None) == "the live table"       # a MoE key: token, no M and no lookup line
