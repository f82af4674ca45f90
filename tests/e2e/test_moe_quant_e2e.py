"""MoE shapes keyed by quant type (issue 30): MXFP8 (l_quant 9) is benchmarked with -q 9 where the node's
MoE test has it (newest profile) and refused in one line where its -q stops at 7 (current profile)."""

import csv
import json

import pytest
import yaml

from orchestrator.cli import main

pytestmark = pytest.mark.e2e

MXFP8 = ("token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1\n"
         "16,7168,256,257,9,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,torch.float8_e4m3fn,"
         "QuantType.per_1x32,1,0\n")


@pytest.mark.parametrize("profile", ["current", "newest"])
def test_mxfp8_moe_shape_runs_with_its_quant_index_or_is_refused(make_node, tmp_path, capsys, monkeypatch, profile):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node(profile)
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    shapes = tmp_path / "mxfp8.csv"
    shapes.write_text(MXFP8)
    ws = tmp_path / "ws"
    code = main(["--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "moe_2stages", "--shapes-csv", str(shapes), "--yes",
                 "--job-id", "q9"])
    err = capsys.readouterr().err
    if profile == "current":
        assert code == 2, err
        assert "cannot benchmark QuantType.per_1x32" in err and "-q stops at 7" in err
        assert len(err.strip().splitlines()) == 1
        return
    assert code == 0, err
    state = json.loads((ws / "q9" / "state.json").read_text())
    for arm in ("before", "after"):
        [cmd] = state["remote"]["bench_display"][arm]
        assert "test_moe_2stage.py -t 16 -dim 7168,256 -e 257 -k 9 -q 9 " in cmd, cmd
    rows = list(csv.DictReader((ws / "q9" / "comparison.csv").open()))
    assert [(r["q_type"], r["q_dtype_a"], r["metric"]) for r in rows] == \
        [("QuantType.per_1x32", "torch.float8_e4m3fn", "us")]
    assert rows[0]["before"] and rows[0]["after"]      # measured: the shape's own rows matched
