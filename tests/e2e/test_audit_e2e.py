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


def test_audit_node_reads_the_tables_aiter_config_vars_name(make_node, tmp_path, capsys):
    """`audit --node` audits the tables named by AITER_CONFIG_* in the container as AITER reads them: a `:` list
    merged on its own (not with the default table and model_configs/), a path that is not there said in a note."""
    import csv
    import io
    from pathlib import Path
    node = make_node(SimSpec(profile="newest"))
    c = next(iter(node.containers.values()))
    shipped = Path(c.host_path(f"{c.aiter_root}/aiter/configs/tuned_fmoe.csv")).read_text()
    header, first = list(csv.reader(io.StringIO(shipped)))[:2]
    row = dict(zip(header, first))

    def table(rows):
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return buf.getvalue()

    mine = Path(c.host_path(f"{c.aiter_root}/user_tables/my_tuned_fmoe.csv"))
    mine.parent.mkdir(parents=True, exist_ok=True)
    # the shipped row's key (a duplicate only if this file were merged with the default table) + a copied us
    mine.write_text(table([row] + [{**row, "token": t, "us": "123.4567"} for t in ("3000", "5000", "7000")]))
    extra = mine.parent / "extra_tuned_fmoe.csv"
    extra.write_text(table([{**row, "token": "3000", "us": "99.0"}]))
    value = ":".join([f"{c.aiter_root}/user_tables/my_tuned_fmoe.csv", "user_tables/extra_tuned_fmoe.csv",
                      "/nowhere/gone_fmoe.csv"])
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {"env": {"AITER_CONFIG_FMOE": value}}}}}}))
    code = main(["--inventory", str(inv), "audit", "--node", node.alias, "--json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    found = [f for f in json.loads(captured.out) if f["file"].startswith("user_tables/")]
    kinds = sorted((f["kind"], f["file"], f["key"]["token"]) for f in found)
    assert kinds == [("copied_us", "user_tables/my_tuned_fmoe.csv", t) for t in ("3000", "5000", "7000")] + \
        [("duplicate_key", "user_tables/extra_tuned_fmoe.csv", "3000")], kinds
    assert "also in user_tables/my_tuned_fmoe.csv" in [f for f in found if f["kind"] == "duplicate_key"][0]["detail"]
    assert "AITER_CONFIG_FMOE names /nowhere/gone_fmoe.csv, which is not in the container" in captured.err
    assert "user_tables/extra_tuned_fmoe.csv is relative" in captured.err


def test_audit_node_err_ratio_bound_is_the_nodes_level0_guard(make_node, tmp_path, capsys):
    """issue 36 defect 1: the shipped errRatio 0.182 rows are not findings (upstream's guard flags only > 0.2);
    the planted 0.5 row is; the bound is read from the node's own test_csv_validation.py."""
    from pathlib import Path
    node = make_node(SimSpec(profile="newest", table_defects=("err_ratio",)))
    c = next(iter(node.containers.values()))
    cfg = Path(c.host_path(f"{c.aiter_root}/aiter/configs"))
    assert ",0.182\n" in (cfg / "a8w8_bpreshuffle_tuned_gemm.csv").read_text()
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))

    def err_rows():
        code = main(["--inventory", str(inv), "audit", "--node", node.alias, "--json"])
        found = json.loads(capsys.readouterr().out)
        return code, [(f["file"], f["key"]["M"], f["detail"]) for f in found if f["kind"] == "err_ratio"]

    code, rows = err_rows()
    assert code == 1 and [r[:2] for r in rows] == [("aiter/configs/a8w8_tuned_gemm.csv", "80")], rows
    assert "the node's level-0 guard bound 0.2" in rows[0][2]
    guard = Path(c.host_path(f"{c.aiter_root}/op_tests/tuning_tests/test_csv_validation.py"))
    guard.write_text(guard.read_text().replace("err_col > 0.2", "err_col > 0.6"))
    assert err_rows()[1] == []


def test_audit_node_reads_fused_moe_kernel_names(make_node, tmp_path, capsys):
    """issue 36 defect 2: a live tuned_fmoe.csv row whose kernelName2 AITER's MoE runtime rejects ('Invalid FlyDSL
    kernel name') is an unparsable_kernel finding; the shipped rows are clean."""
    import csv
    import io
    from pathlib import Path
    node = make_node(SimSpec(profile="newest"))
    c = next(iter(node.containers.values()))
    fmoe = Path(c.host_path(f"{c.aiter_root}/aiter/configs/tuned_fmoe.csv"))
    header, first = list(csv.reader(io.StringIO(fmoe.read_text())))[:2]
    row = {**dict(zip(header, first)), "token": "4099",
           "kernelName2": "flydsl_moe2_afp4_wfp4_bf16_256x256x256_atomic"}
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=header, lineterminator="\n").writerow(row)
    fmoe.write_text(fmoe.read_text().rstrip("\n") + "\n" + buf.getvalue())
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    code = main(["--inventory", str(inv), "audit", "--node", node.alias, "--json"])
    found = [f for f in json.loads(capsys.readouterr().out) if f["kind"] == "unparsable_kernel"]
    assert code == 1 and [(f["file"], f["key"]["token"]) for f in found] == [("aiter/configs/tuned_fmoe.csv", "4099")]
    assert "Invalid FlyDSL kernel name" in found[0]["detail"]
