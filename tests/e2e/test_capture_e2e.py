"""AITER's own shape capture, end to end on the 'head' profile (issue 36): the simulated server, four vLLM
worker processes with AITER_TUNE_GEMM=1, writes a8w8_blockscale_untuned_gemm.csv and logs each miss once per
shape per process; `run --log <capture dir>` tunes exactly the captured shapes, and `run --log <server log>`
ranks them by the processes that missed (probed in the node's runtime source), not by their lookups."""

from __future__ import annotations

import json

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.sim import SimSpec

pytestmark = pytest.mark.e2e

# rank 0 alone looks (4096, 512) up 20 times (20 steps); every rank looks (1536, 7168) up once a step
SERVE = ("python3 -m aiter._sim.serve --workers 4 --nk 1536,7168 --nk0 4096,512 --steps 20 --m 64")


def test_the_simulated_servers_capture_is_what_run_tunes_and_misses_weigh_by_processes(make_node, tmp_path,
                                                                                         monkeypatch, capsys):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node(SimSpec(profile="head"))
    c = next(iter(node.containers.values()))
    cap_dir, log = f"{c.aiter_root}/tuning/m", f"{c.aiter_root}/serve.log"
    c.sh(f"cd {c.aiter_root} && AITER_TUNE_GEMM=1 AITER_TUNE_GEMM_DIR={cap_dir} {SERVE} >/dev/null 2>{log}")
    text = c.host_path(log).read_text()
    assert f"[AITER_TUNE_GEMM] recording untuned shapes to {cap_dir}/a8w8_blockscale_untuned_gemm.csv" in text
    assert text.count("M:64, N:4096, K:512, not found") == 1          # 20 lookups, one process: one line
    assert text.count("M:64, N:1536, K:7168, not found") == 4         # one line per rank
    rows = c.host_path(f"{cap_dir}/a8w8_blockscale_untuned_gemm.csv").read_text().splitlines()
    assert rows[0] == "M,N,K" and sorted(rows[1:]) == ["64,1536,7168"] * 4 + ["64,4096,512"]

    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    base = ["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "-q", "run", "--node", node.alias,
            "--container", c.name, "--variant", "a8w8_blockscale", "--m-preset", "logged", "--promote", "none",
            "--repeats", "1", "--yes"]
    capsys.readouterr()
    for job, source in (("capdir", cap_dir), ("caplog", log)):
        assert main([*base, "--log", source, "--job-id", job]) == 0, capsys.readouterr().err
        state = json.loads((tmp_path / "ws" / job / "state.json").read_text())
        # exactly the captured shapes, the one four processes missed first
        assert [(s["m"], s["n"], s["k"]) for s in state["shapes"]] == [(64, 1536, 7168), (64, 4096, 512)], job
    # the node's form was probed in its runtime source, and the report says how the log's shapes were weighed
    state = json.loads((tmp_path / "ws" / "caplog" / "state.json").read_text())
    assert "miss lines once per process (gemm_op_a8w8.py)" in state["facts"]["probed"]
    assert "a logged shape's weight is the processes that logged it" in \
        (tmp_path / "ws" / "caplog" / "report.md").read_text()


def test_a_serve_cmd_that_starts_vllm_without_aiters_path_is_named_in_the_plan_and_the_report(node, tmp_path,
                                                                                              capsys, monkeypatch):
    # the stock rocm/vllm image never sets VLLM_ROCM_USE_AITER (vllm#56945): the serving check would measure a
    # server that never reads the tuned rows
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    base = ["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--node", node.alias,
            "--container", c.name, "--variant", "a8w8_blockscale", "--nk", "7168,2048", "--m-preset", "16,64"]
    serve = "vllm serve /models/dsv3 --tensor-parallel-size 8 || python3 -m aiter._sim.serve --nk 7168,2048"
    capsys.readouterr()
    assert main([*base, "--serve-cmd", serve, "--dry-run"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines()
            if "the vLLM server --serve-cmd starts runs without VLLM_ROCM_USE_AITER=1" in line]
    assert len(said) == 1 and "vllm#56945" in said[0]
    assert main([*base, "--serve-cmd", "VLLM_ROCM_USE_AITER=1 " + serve, "--dry-run"]) == 0
    assert "--serve-cmd starts runs without" not in capsys.readouterr().err
    code = main([*base, "-q", "--serve-cmd", serve, "--serve-repeats", "1", "--repeats", "1", "--promote", "none",
                 "--yes", "--job-id", "sv"])
    assert code == 0, capsys.readouterr().err
    md = (tmp_path / "ws" / "sv" / "report.md").read_text()
    assert "the vLLM server --serve-cmd starts runs without VLLM_ROCM_USE_AITER=1" in md
