"""Fused-MoE on today's AITER (issue 36), end to end on the test bed: the node's tuner objective and its runtime's
token tiers are probed (head: v0.1.30 with the named-helper objective of 1c87c39f), recorded with the job, the
plan tunes the tier the runtime looks a large token up by (163840 -> 131072, never 163840), and the tuner's rows
carry the charged stage-1 quant launch."""

import csv
import json

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.sim import flydsl_moe, perf_model as pm

pytestmark = pytest.mark.e2e

HEAD = "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1\n"
FP4 = ("7168,256,257,8,ActivationType.Silu,torch.bfloat16,torch.float4_e2m1fn_x2,torch.float4_e2m1fn_x2,"
       "QuantType.per_1x32,1,0")


def test_head_node_probes_objective_and_tiers_and_tunes_what_the_runtime_looks_up(make_node, tmp_path, capsys,
                                                                                     monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node({"profile": "head"})
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    shapes = tmp_path / "fp4.csv"
    shapes.write_text(HEAD + f"256,{FP4}\n163840,{FP4}\n")
    ws = tmp_path / "ws"
    code = main(["--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "moe_2stages", "--shapes-csv", str(shapes), "--yes",
                 "--promote", "none", "--job-id", "h1"])
    err = capsys.readouterr().err
    assert code == 0, err
    state = json.loads((ws / "h1" / "state.json").read_text())
    probes = state["facts"]["probes"]
    assert probes["moe_objective"] == "stage_sum+quant" and probes["moe_padded_tiers"] == [32768, 131072]
    assert "MoE tuner objective (tuner source)" in state["facts"]["probed"]
    assert "MoE token lookup (fused_moe.py get_padded_M)" in state["facts"]["probed"]
    assert sorted(s["token"] for s in state["shapes"]) == [256, 131072]
    assert any("163840->131072" in n for n in state["notes"])
    tuned = state["steps"]["compare"]["info"]["tuned"]
    assert tuned["moe_objective"] == "stage_sum+quant"
    assert {k["objective"] for k in tuned["kernels"]} == {"stage_sum+quant"}
    rows = {int(r["token"]): r for r in csv.DictReader((ws / "h1" / "tuned_fmoe.csv").open())}
    assert 163840 not in rows and 131072 in rows
    for t in (256, 131072):
        shape = {k: (int(v) if v.isdigit() else v)
                 for k, v in zip(HEAD.strip().split(","), [str(t), *FP4.split(",")])}
        want = flydsl_moe.charged(pm.tune_result("moe_2stages", shape), shape)
        assert float(rows[t]["us"]) == want["us"] > pm.tune_result("moe_2stages", shape)["us"]


def test_recheck_says_a_promoted_moe_rows_us_was_measured_under_another_objective(make_node, tmp_path, capsys,
                                                                                   monkeypatch):
    """A job that promoted MoE rows recorded its tuner's objective; when the node's tuner now has another (as
    after an upgrade from v0.1.11: the recorded probe is set back to what a v0.1.11 tuner answers), recheck
    says so in one line and judges by its end-to-end benchmark only."""
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node("current")
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    shapes = tmp_path / "fp4.csv"
    shapes.write_text(HEAD + f"256,{FP4}\n1024,{FP4}\n")
    ws = tmp_path / "ws"
    base = ["--inventory", str(inv), "--workspace", str(ws), "-q"]
    code = main([*base, "run", "--node", node.alias, "--container", c.name, "--variant", "moe_2stages",
                 "--shapes-csv", str(shapes), "--yes", "--promote", "all", "--job-id", "m1"])
    assert code == 0, capsys.readouterr().err
    path = ws / "m1" / "state.json"
    state = json.loads(path.read_text())
    assert state["facts"]["probes"]["moe_objective"] == "stage_sum+quant"
    assert state["remote"]["promotion"]["promoted"]
    state["facts"]["probes"]["moe_objective"] = "stage_sum"
    path.write_text(json.dumps(state))
    capsys.readouterr()
    code = main([*base, "recheck", "--node", node.alias, "--container", c.name, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads((ws / json.loads(out.out)["recheck"] / "recheck.json").read_text())
    lines = [n for n in doc["notes"] if "us measured under another objective: not compared" in n]
    assert len(lines) == 1 and "promoted by job m1" in lines[0] and "(stage_sum then, stage_sum+quant now)" in lines[0]
    assert {r.get("objective_then") for r in doc["rows"]} == {"stage_sum"}
