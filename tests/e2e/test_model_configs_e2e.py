"""Shapes already tuned in aiter/configs/model_configs/ are not tuned again into the default CSV:
AITER >= 0.1.12 merges those tables and raises on duplicate keys (aiter-formats.md §5.1)."""

import json

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.parsing.csvtools import read_tuned_csv

pytestmark = pytest.mark.e2e

MODEL_CSV = """gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio
gfx950,256,64,4096,512,ck,8,0,4.1,a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16_1x1_16x16x1_16x16x1_1x16x1x16_4_1x1_intrawave_v1,1.0,1.0,0.0
gfx942,304,1,4096,512,ck,8,0,4.1,other_gpu_row,1.0,1.0,0.0
"""


def test_shapes_in_model_configs_are_not_tuned_twice(node, tmp_path, monkeypatch):
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    c = next(iter(node.containers.values()))
    mc = c.host_path(f"{c.aiter_root}/aiter/configs/model_configs")
    mc.mkdir(parents=True, exist_ok=True)
    (mc / "mymodel_a8w8_blockscale_tuned_gemm.csv").write_text(MODEL_CSV)
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    ws = tmp_path / "ws"
    code = main(["--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
                 "--container", c.name, "--variant", "a8w8_blockscale", "--nk", "4096,512",
                 "--m-preset", "1,64,1024", "--yes", "--job-id", "mc1"])
    assert code == 0
    state = json.loads((ws / "mc1" / "state.json").read_text())
    # M=64 is tuned in model_configs for this GPU: dropped; M=1 is only tuned there for another GPU: kept
    assert [s["m"] for s in state["shapes"]] == [1, 1024]
    assert any("model_configs" in n and "mymodel_a8w8_blockscale_tuned_gemm.csv (1)" in n for n in state["notes"])
    tuned = read_tuned_csv(str(ws / "mc1" / "a8w8_blockscale_tuned_gemm.csv"))
    mine = tuned[(tuned["gfx"] == "gfx950") & (tuned["N"] == 4096) & (tuned["K"] == 512)]
    assert 64 not in set(mine["M"])  # no duplicate key across the merged tables
