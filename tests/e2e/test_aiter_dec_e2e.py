"""AITER as of December 2026 (issue 36): the runtime's own shape capture (`AITER_TUNE_GEMM=1`,
aiter/utility/untuned_shapes.py) is a shape source that `--log` reads inside the container."""

import json

import pytest
import yaml

from orchestrator.cli import main

pytestmark = pytest.mark.e2e


def test_a_capture_directory_in_the_container_is_a_shape_source_weighted_by_processes(node, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    c = next(iter(node.containers.values()))
    cap_dir = f"{c.aiter_root}/tune_capture"
    cap = c.host_path(cap_dir)
    cap.mkdir(parents=True, exist_ok=True)
    # one shard per serving process (the later #5268 form): M=64 missed by three ranks, M=8 by one
    (cap / "a8w8_blockscale_untuned_gemm.host.101.csv").write_text("M,N,K\n8,4096,512\n64,4096,512\n")
    (cap / "a8w8_blockscale_untuned_gemm.host.102.csv").write_text("M,N,K\n64,4096,512\n")
    (cap / "a8w8_blockscale_untuned_gemm.host.103.csv").write_text("M,N,K\n64,4096,512\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    ws = tmp_path / "ws"
    code = main(["--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "a8w8_blockscale", "--log", cap_dir,
                 "--m-preset", "logged", "--promote", "none", "--yes", "--job-id", "cap1"])
    assert code == 0
    state = json.loads((ws / "cap1" / "state.json").read_text())
    assert [(s["m"], s["n"], s["k"]) for s in state["shapes"]] == [(64, 4096, 512), (8, 4096, 512)]
    # a capture file that is not there is refused before anything runs
    code = main(["--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "a8w8_blockscale", "--log", cap_dir + "/nope_untuned_gemm.csv",
                 "--yes", "--job-id", "cap2"])
    assert code == 2
