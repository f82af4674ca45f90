"""Upstream's level-0 guards at export (issue 30): where the node's AITER ships op_tests/tuning_tests, `export`
runs test_csv_validation and test_config_shape_collision there on a temporary copy of its configs with the
exported file added, and the summary's provenance says how each ended (a planted cross-file collision fails)."""

import io
import json
from pathlib import Path

import pytest
import yaml

from rich.console import Console

from orchestrator.cli import main
from orchestrator.cli.views import export_words
from orchestrator.sim import SimSpec

pytestmark = pytest.mark.e2e


def test_export_runs_the_nodes_level0_guards_with_the_file_added(make_node, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node(SimSpec(profile="newest", table_defects=("duplicate_key",)))
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    ws = tmp_path / "ws"
    base = ["--inventory", str(inv), "--workspace", str(ws)]
    code = main([*base, "-q", "run", "--node", node.alias, "--container", c.name, "--variant", "a8w8_blockscale",
                 "--nk", "7168,2048", "--m-preset", "1,16,64,256", "--yes", "--repeats", "2", "--promote", "none",
                 "--job-id", "g"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    code = main([*base, "--json", "export", "g", "--model-config", "dsv3"])
    out = capsys.readouterr().out
    assert code == 0, out
    res = json.loads(out)
    assert res["rows"] > 0
    assert {t: g["status"] for t, g in res["guards"].items()} == {"test_csv_validation": "passed",
                                                                  "test_config_shape_collision": "failed"}
    assert "sim_dup_a8w8_tuned_gemm.csv" in res["guards"]["test_config_shape_collision"]["tail"]
    md = Path(res["summary"]).read_text()
    assert f"run by tune-remote on {node.alias}/{c.name}" in md
    assert "model_configs/dsv3_a8w8_blockscale_tuned_gemm.csv" in md
    assert "`test_csv_validation` passed" in md and "`test_config_shape_collision` **FAILED**" in md
    assert "duplicate shapes" in md
    # the node's AITER is untouched: the guards ran on a copy, and the copy is gone
    mc = Path(c.host_path(f"{c.aiter_root}/aiter/configs/model_configs"))
    assert not (mc / "dsv3_a8w8_blockscale_tuned_gemm.csv").exists()
    assert "tune_remote_guards_" not in c.sh("ls -a /tmp ${TMPDIR:-/tmp}").stdout


def test_a_campaign_export_runs_the_guards_on_one_of_its_targets_and_says_which(make_node, tmp_path, capsys,
                                                                               monkeypatch):
    """A campaign's file holds rows of several targets: the guards run once, on the first target of the variant
    whose AITER ships them, and the summary and the words name that target (they said "not run" before)."""
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    nodes = [make_node(SimSpec(profile="newest")), make_node(SimSpec(profile="newest"))]
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {n.alias: {"ssh_config": str(n.ssh_config_file),
                                                       "containers": {c: {} for c in n.containers}}
                                             for n in nodes}}))
    ws = tmp_path / "ws"
    base = ["--inventory", str(inv), "--workspace", str(ws)]
    code = main([*base, "-q", "run", "--node", nodes[0].alias, "--node", nodes[1].alias, "--variant",
                 "a8w8_blockscale", "--nk", "7168,2048", "--m-preset", "1,16,64,256", "--yes", "--repeats", "1",
                 "--promote", "none", "--job-id", "cg"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    code = main([*base, "--json", "export", "cg", "--model-config", "dsv3"])
    out = capsys.readouterr().out
    assert code == 0, out
    res = json.loads(out)["variants"]["a8w8_blockscale"]
    buf = io.StringIO()                                                # the words say where
    export_words("cg", {"a8w8_blockscale": res}, True)(Console(file=buf, width=200))
    on = res["guards"].pop("on")
    assert on in {f"{n.alias}/{c}" for n in nodes for c in n.containers}, on
    assert {t: g["status"] for t, g in res["guards"].items()} == {"test_csv_validation": "passed",
                                                                  "test_config_shape_collision": "passed"}
    md = Path(res["summary"]).read_text()
    assert f"run by tune-remote on {on}" in md and "not run by tune-remote" not in md
    assert f"level-0 guard test_csv_validation: passed (on {on})" in buf.getvalue()
