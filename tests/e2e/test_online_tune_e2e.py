"""AITER_ONLINE_TUNE in the simulated AITER (issue 36, aiter#3202): a server run with AITER_ONLINE_TUNE=1 tunes
each fused-MoE miss on the spot (AITER's own MoE tuner, --last, into the tuned table) and logs
'Fmoe tuning not support for (...)' for the shape its tuner found no valid kernel for; `run --log` on that log
lists that shape as one this AITER cannot tune and does not tune it, and the shape tuned online is no miss."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.sim import SimSpec

pytestmark = pytest.mark.e2e

# token 32 of this shape has no valid kernel on the simulated gfx950 (perf_model outcome 'failed'); 64 has one
SERVE = "python3 -m aiter._sim.serve --moe 32,7168,256,256,8 --moe 64,7168,256,256,8"


@pytest.mark.parametrize("profile", ["current", "legacy"])
def test_online_tune_logs_what_it_could_not_tune_and_run_lists_it_untuned(profile, make_node, tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node(SimSpec(profile=profile))
    c = next(iter(node.containers.values()))
    log = f"{c.aiter_root}/serve.log"
    c.sh(f"cd {c.aiter_root} && AITER_ONLINE_TUNE=1 {SERVE} >/dev/null 2>{log}")
    text = c.host_path(log).read_text()
    assert text.count("\x1b[34m Start tuning fmoe") == 2, text        # both misses went to AITER's tuner
    refused = [ln for ln in text.splitlines() if "Fmoe tuning not support for" in ln]
    assert len(refused) == 1 and ", 32, 7168, 256, 256, 8, " in refused[0], text
    assert "[fused_moe] using 2stage (kernelName1=" in text                # token 64 was tuned and is used
    untuned = c.host_path(f"{c.aiter_root}/aiter/configs/untuned_fmoe.csv").read_text().splitlines()
    assert [ln.split(",")[0] for ln in untuned[-2:]] == ["32", "64"], untuned

    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    capsys.readouterr()
    code = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--node", node.alias,
                 "--container", c.name, "--variant", "moe_2stages", "--log", log, "--dry-run"])
    cap = capsys.readouterr()
    # the only miss left is the one AITER could not tune: nothing to tune, and the one line says why
    assert code == 2, cap.err
    said = [line for line in cap.err.splitlines() if "no shapes to tune for moe_2stages" in line]
    assert len(said) == 1 and "1 moe_2stages shape(s) cannot be tuned by this AITER" in said[0], cap.err
    assert "token 32" in said[0] and "aiter#3202" in said[0] and "token 64" not in cap.err, cap.err
