"""A campaign's plan probes what a single run probes (issue 36): a node whose fused_moe.py pads MoE tokens
unlike its version (AITER 0.1.11 carrying v0.1.12's get_padded_M, ROCm/aiter 0d38e26f: a cherry-pick, or an
editable install pulled past its dist-info version) gets a plan whose MoE buckets are the node's: nextPow2 below
32768, not v0.1.11's 1024/2048/16384 buckets."""

from __future__ import annotations

import csv
import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from orchestrator.aiter_profiles import moe_tiers_for
from orchestrator.cli import main
from orchestrator.nodeside import probe as nodeprobe
from orchestrator.shapelib.shapefmt import moe_bucket

pytestmark = pytest.mark.e2e

# ROCm/aiter v0.1.12 aiter/fused_moe.py:607-613 (git show v0.1.12:aiter/fused_moe.py)
V0112 = ("def get_padded_M(M):\n    padded_m = M\n    if M < 32768:\n        padded_m = nextPow2(padded_m)\n"
         "    else:\n        padded_m = 32768\n    return padded_m\n")
TUPLE = ("(256, {t}, 7168, 256, 257, 8, 'ActivationType.Silu', 'torch.bfloat16', 'torch.float8_e4m3fn', "
         "'torch.float8_e4m3fn', 'QuantType.per_1x128', True, False)")
TOKENS = (1500, 4096, 20000)


@pytest.fixture(scope="module")
def node(testbed):
    n = testbed.create_node(("legacy",), proxy=False)
    for c in n.containers.values():
        path = Path(c.host_path(f"{c.aiter_root}/aiter/fused_moe.py"))
        src, count = re.subn(r"^def get_padded_M\(M\):\n(?:[ \t]+.*\n|[ \t]*\n)+", V0112 + "\n\n",
                             path.read_text(), flags=re.M)
        assert count == 1 and nodeprobe.moe_padded_tiers(src) == [32768]
        path.write_text(src)
    yield n
    testbed.destroy_node(n)


def _run(node, tmp_path, capsys, *argv) -> tuple[int, str]:
    log = tmp_path / "server.log"
    log.write_text("".join(f"[aiter] [fused_moe] using 2stage default for {TUPLE.format(t=t)} \n" for t in TOKENS))
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c: {} for c in node.containers}}}}))
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--node", node.alias,
                   "--log", f"local:{log}", *argv])
    return rc, out.getvalue() + capsys.readouterr().err


def test_the_plans_moe_buckets_follow_the_nodes_fused_moe_not_its_version(node, tmp_path, capsys):
    rc, text = _run(node, tmp_path, capsys, "--variant", "moe_2stages", "--dry-run", "--job-id", "plan1")
    assert rc == 0, text
    node_buckets = {t: moe_bucket(t, tiers=(32768,)) for t in TOKENS}
    version_buckets = {t: moe_bucket(t, tiers=moe_tiers_for((0, 1, 11))) for t in TOKENS}
    assert node_buckets == {1500: 2048, 4096: 4096, 20000: 32768} != version_buckets
    (snapped,) = [line for line in text.splitlines() if "MoE token value(s) snapped" in line]
    assert "1500->2048" in snapped and "20000->32768" in snapped and "4096->" not in snapped, snapped
    (profile,) = [line for line in text.splitlines() if "MoE token tiers" in line]
    assert profile.strip().startswith("MoE token tiers 32768; probed on the node: ")
    assert "MoE token lookup (fused_moe.py get_padded_M)" in profile and "tuner flags" in profile
    assert f"{len(TOKENS)} shapes" in text


def test_the_campaigns_target_job_tunes_the_plans_buckets_under_the_same_probe(node, tmp_path, capsys,
                                                                               monkeypatch):
    """The target's job probes again in its own discover (steps/discover.py): the same tiers, so the shard the
    plan bucketed is tuned as it is (nothing re-snapped, nothing contradicted)."""
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    rc, text = _run(node, tmp_path, capsys, "--variant", "auto", "--yes", "--job-id", "camp2")   # a campaign
    assert rc == 0, text
    (sub,) = (tmp_path / "ws" / "camp2" / "targets").iterdir()
    state = json.loads((sub / "state.json").read_text())
    assert state["state"] == "succeeded"
    assert state["facts"]["probes"]["moe_padded_tiers"] == [32768]
    assert "MoE token lookup (fused_moe.py get_padded_M)" in state["facts"]["probed"]
    tokens = sorted(int(r["token"]) for r in csv.DictReader((sub / "untuned" / "untuned_fmoe.csv").open()))
    assert tokens == [2048, 4096, 32768]
    assert not [n for n in state.get("notes") or [] if "snapped" in n], state.get("notes")
    assert "MoE token tiers 32768; probed on the node" in text
