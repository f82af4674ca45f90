"""A fused-MoE shape AITER's own online tuner found no config for ('Fmoe tuning not support for (...)',
aiter#3202; issue 36) is a miss with a reason: the plan names it as one this AITER cannot tune, leaves it out
(the tuner would only burn its time on it) and tunes the rest."""

from __future__ import annotations

import csv

import pytest
import yaml

from orchestrator.cli import main

pytestmark = pytest.mark.e2e

TUPLE = ("(256, {t}, 7168, 256, 256, 8, 'ActivationType.Silu', 'torch.bfloat16', 'torch.float8_e4m3fn', "
         "'torch.float8_e4m3fn', 'QuantType.per_Token', True, False)")
LOG = "".join(
    [f"[aiter] [fused_moe] using 2stage default for {TUPLE.format(t=t)} \n" for t in (4, 32)]
    + [f"[aiter] Fmoe tuning not support for {TUPLE.format(t=4)}\n"])


def test_a_shape_aiters_online_tuner_could_not_tune_is_named_and_left_out(make_node, tmp_path, capsys):
    node = make_node("current")
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    log = tmp_path / "server.log"
    log.write_text(LOG)
    base = ["--inventory", str(inv), "--workspace", str(tmp_path / "ws")]
    code = main([*base, "run", "--node", node.alias, "--container", c.name, "--variant", "moe_2stages",
                 "--log", f"local:{log}", "--dry-run"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    said = [line for line in cap.err.splitlines() if "cannot be tuned by this AITER" in line]
    assert len(said) == 1 and "token 4" in said[0] and "aiter#3202" in said[0], cap.err
    assert "note: 1 moe_2stages shape(s) cannot be tuned by this AITER" in cap.err     # the plan's line
    assert "(1 target(s), 1 shapes)" in cap.err, cap.err

    code = main([*base, "-q", "run", "--node", node.alias, "--container", c.name, "--variant", "moe_2stages",
                 "--log", f"local:{log}", "--yes", "--repeats", "1", "--promote", "none", "--job-id", "u"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    job = tmp_path / "ws" / "u"
    rows = list(csv.DictReader((job / "comparison.csv").open()))
    assert sorted(r["token"] for r in rows) == ["32"], rows          # token 4 was never tuned
    md = (job / "report.md").read_text()
    assert "cannot be tuned by this AITER" in md and "aiter#3202" in md, md
