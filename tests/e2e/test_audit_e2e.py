"""`tune-remote audit --node`: a node whose live tables hold one planted defect of each kind (issue 30)."""

import json

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.parsing.audit import KINDS
from orchestrator.sim import SimSpec

pytestmark = pytest.mark.e2e


def test_audit_finds_each_planted_defect_in_the_live_tables(make_node, tmp_path, capsys):
    node = make_node(SimSpec(profile="newest", table_defects=KINDS))
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    code = main(["--inventory", str(inv), "audit", "--node", node.alias, "--json"])
    out = capsys.readouterr().out
    assert code == 1
    found = json.loads(out)
    assert {f["kind"] for f in found} == set(KINDS)
    by_kind = {f["kind"]: f for f in found}
    assert by_kind["duplicate_key"]["file"] == "aiter/configs/model_configs/sim_dup_a8w8_tuned_gemm.csv"
    assert by_kind["foreign_cu_num"]["key"] == {"gfx": "gfx950", "cu_num": "128", "M": "96", "N": "5120",
                                                "K": "640", "q_dtype_w": "torch.float8_e4m3fn"}
    assert by_kind["unparsable_kernel"]["key"]["M"] == "24"
    assert sorted(f["key"]["token"] for f in found if f["kind"] == "copied_us") == ["1", "16", "2", "4", "8"]
    code = main(["--inventory", str(inv), "audit", "--node", node.alias, "--container", "nope"])
    assert code == 2
