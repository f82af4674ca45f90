"""A server in the container that would never read what the job tunes is named in the plan and the report
(issue 36: vLLM without VLLM_ROCM_USE_AITER=1, vllm#56945; a server whose AITER_CONFIG_* lists other files,
sglang#37072). What counts is the server's own environment (/proc/PID/environ), not the helper's."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.variant_spec import MOE_KEY

pytestmark = pytest.mark.e2e

SLEEPER = "python3 -c 'import time; time.sleep(300)'"


def _start(c, env: str, args: str) -> None:
    c.sh(f"nohup env -u VLLM_ROCM_USE_AITER {env} {SLEEPER} {args} >/dev/null 2>&1 &")


def _stop(c) -> None:
    c.sh("pkill -f 'time.sleep(300)' || true")


def _node(make_node, tmp_path, monkeypatch):
    """A current node, its one container and an inventory naming them."""
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    node = make_node("current")
    c = next(iter(node.containers.values()))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                          "containers": {c.name: {}}}}}))
    return node, c, inv


def test_servers_that_would_never_read_the_rows_are_named(make_node, tmp_path, capsys, monkeypatch):
    node, c, inv = _node(make_node, tmp_path, monkeypatch)
    base = ["--inventory", str(inv), "--workspace", str(tmp_path / "ws")]
    run = [*base, "run", "--node", node.alias, "--container", c.name, "--variant", "a8w8_blockscale",
           "--nk", "7168,2048", "--m-preset", "16,64"]
    try:
        assert main([*run, "--dry-run"]) == 0
        assert "server in this container" not in capsys.readouterr().err        # no server: nothing said

        _start(c, "", "vllm serve /models/dsv3 --tensor-parallel-size 8")
        assert main([*run, "--dry-run"]) == 0
        err = capsys.readouterr().err
        said = [line for line in err.splitlines() if "runs without VLLM_ROCM_USE_AITER=1" in line]
        assert len(said) == 1 and "vLLM server in this container (pid " in said[0] and "vllm#56945" in said[0], err
        _stop(c)

        _start(c, "VLLM_ROCM_USE_AITER=1 AITER_CONFIG_GEMM_A8W8_BLOCKSCALE=/data/mine.csv",
               "-m sglang.launch_server --model /models/dsv3")
        code = main([*run, "--yes", "--repeats", "1", "--promote", "none", "--job-id", "s"])
        err = capsys.readouterr().err
        assert code == 0, err
        said = [line for line in err.splitlines() if "sets AITER_CONFIG_GEMM_A8W8_BLOCKSCALE=/data/mine.csv" in line]
        assert said and "SGLang server" in said[0] and "sglang#37072" in said[0], err
        md = (tmp_path / "ws" / "s" / "report.md").read_text()
        assert "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE=/data/mine.csv" in md, md
    finally:
        _stop(c)


MOE_HEAD = ",".join(MOE_KEY) + "\n"       # the untuned MoE header (the MoE key, in its order)
MOE_ROW = ("64,7168,256,256,8,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,torch.float8_e4m3fn,"
           "QuantType.per_1x128,1,0\n")


def test_a_server_that_tunes_moe_misses_into_the_live_table_itself_is_named(make_node, tmp_path, capsys,
                                                                            monkeypatch):
    node, c, inv = _node(make_node, tmp_path, monkeypatch)
    shapes = tmp_path / "moe.csv"
    shapes.write_text(MOE_HEAD + MOE_ROW)
    run = ["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--node", node.alias,
           "--container", c.name, "--variant", "moe_2stages", "--shapes-csv", str(shapes), "--dry-run"]
    try:
        _start(c, "VLLM_ROCM_USE_AITER=1", "vllm serve /models/dsv3")
        assert main(run) == 0
        assert "AITER_ONLINE_TUNE" not in capsys.readouterr().err      # a server that only reads the table
        _stop(c)
        _start(c, "VLLM_ROCM_USE_AITER=1 AITER_ONLINE_TUNE=1", "vllm serve /models/dsv3")
        assert main(run) == 0
        err = capsys.readouterr().err
        said = [line for line in err.splitlines() if "runs with AITER_ONLINE_TUNE=1" in line]
        assert len(said) == 1 and "vLLM server in this container (pid " in said[0], err
        assert "tuned_fmoe.csv" in said[0] and "overwritten" in said[0], err
    finally:
        _stop(c)
