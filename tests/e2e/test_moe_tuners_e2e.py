"""Two MoE tuner paths chosen per point (issue 30, aiter#5625): `run --moe-tuners both` tunes FP4 MoE shapes with
the standard fused-MoE tuner and with --mxfp4-flydsl (each with explicit -i/-o into its own staging table),
benchmarks both tables end to end, and keeps per shape the row whose benchmark is faster."""

import csv
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.sim import flydsl_moe

pytestmark = pytest.mark.e2e

COLS = ("token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
        "doweight_stage1")
FP4 = ("7168,256,256,8,ActivationType.Silu,torch.bfloat16,torch.float4_e2m1fn_x2,torch.float4_e2m1fn_x2,"
       "QuantType.per_1x32,1,0")
TOKENS = (2, 16, 32, 128)     # the simulated flydsl path wins at 2 and 128, the standard one at 16 and 32


def _inv(tmp_path, node):
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    return inv, c


def test_both_tuners_keep_the_faster_row_per_shape(make_node, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node("newest")
    inv, c = _inv(tmp_path, node)
    shapes = tmp_path / "fp4.csv"
    shapes.write_text(COLS + "\n" + "".join(f"{t},{FP4}\n" for t in TOKENS))
    ws = tmp_path / "ws"
    code = main(["--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "moe_2stages", "--shapes-csv", str(shapes), "--yes",
                 "--moe-tuners", "both", "--repeats", "2", "--job-id", "two"])
    err = capsys.readouterr().err
    assert code == 0, err
    job = ws / "two"
    state = json.loads((job / "state.json").read_text())
    fly = state["remote"]["moe_flydsl"]
    argv = fly["tune_argv"]
    assert "--mxfp4-flydsl" in argv and argv[argv.index("-o") + 1] == fly["staging"]
    assert argv[argv.index("-i") + 1] == state["remote"]["untuned_csv"]     # never its defaults
    assert "--mxfp4-flydsl" not in state["remote"]["tune_argv"]
    [tune] = [s for s in state["remote"]["pipeline"] if s["name"] == "tune"]
    assert tune["line"].count("_stall") == 2

    keys = dict(zip(COLS.split(","), ["0", *FP4.split(",")]))
    expect = {}
    for t in TOKENS:
        shape = {**keys, "token": t}
        expect[str(t)] = "flydsl" if flydsl_moe.e2e_factor(shape) < 1 else "standard"
    assert sorted(set(expect.values())) == ["flydsl", "standard"]        # the shapes exercise both choices
    choices = {r["token"]: r for r in csv.DictReader((job / "moe_tuners.csv").open())}
    assert {t: r["tuner"] for t, r in choices.items()} == expect
    for r in choices.values():           # each choice is the faster end-to-end median
        assert float(r[r["tuner"]]) == min(float(r["standard"]), float(r["flydsl"]))
    merged = sum(math.log(min(float(r["standard"]), float(r["flydsl"]))) for r in choices.values())
    for path in ("standard", "flydsl"):
        assert merged < sum(math.log(float(r[path])) for r in choices.values())   # the merge beats either path

    table = {r["token"]: r for r in csv.DictReader((job / "tuned_fmoe.csv").open())
             if r["q_type"] == "QuantType.per_1x32" and r["model_dim"] == "7168"}
    for t, tuner in expect.items():
        assert table[t]["kernelName1"].startswith("flydsl_") == (tuner == "flydsl"), table[t]
    # the node's staging table is the merged one too (promotion reads it)
    node_table = Path(c.host_path(state["remote"]["tuned_csv"])).read_text()
    assert node_table == (job / "tuned_fmoe.csv").read_text()
    cmp = {r["token"]: r for r in csv.DictReader((job / "comparison.csv").open())}
    for t, r in choices.items():
        assert float(cmp[t]["after"]) == pytest.approx(float(r[r["tuner"]]))
    html = (job / "report.html").read_text()
    assert 'id="moe-tuners"' in html and "flydsl_moe_mxfp4" in html      # the choice and the kernels kept
    md = (job / "report.md").read_text()
    section = md.split("## MoE tuner per shape", 1)[1].split("\n## ", 1)[0]
    for t, tuner in expect.items():
        assert re.search(rf"\|\s*{t} \| {tuner} \|", section), section


def test_moe_tuners_refusals(make_node, tmp_path, capsys):
    node = make_node("newest")
    inv, c = _inv(tmp_path, node)
    shapes = tmp_path / "bf16.csv"
    shapes.write_text(COLS + "\n16,7168,256,256,8,ActivationType.Silu,torch.bfloat16,torch.bfloat16,"
                      "torch.bfloat16,QuantType.No,1,0\n")
    ws = tmp_path / "ws"
    base = ["--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
            "--container", c.name, "--yes", "--moe-tuners", "both"]
    code = main([*base, "--variant", "a8w8", "--nk", "4096,4096", "--job-id", "r1"])
    err = capsys.readouterr().err
    assert code == 2 and "--moe-tuners both applies to moe_2stages" in err and len(err.strip().splitlines()) == 1
    code = main([*base, "--variant", "moe_2stages", "--shapes-csv", str(shapes), "--job-id", "r2"])
    err = capsys.readouterr().err
    assert code == 2 and "tunes FP4 MoE shapes only" in err, err
    assert len(err.strip().splitlines()) == 1
