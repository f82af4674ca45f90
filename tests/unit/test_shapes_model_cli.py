"""`tune-remote shapes --model` takes the serving GPU and parallelism (issue 12, review C-10)."""

import json
from pathlib import Path

from orchestrator.cli import main
from orchestrator.errors import ExitCode

DSV3 = str(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "deepseek_v3.json")


def _shapes(capsys, *extra):
    capsys.readouterr()
    assert main(["shapes", "--model", DSV3, "--tp", "8", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_gfx942_uses_fnuz_fp8_and_ep_splits_experts(capsys):
    default = _shapes(capsys)
    mi300 = _shapes(capsys, "--gfx", "gfx942")
    assert {s["q_dtype_w"] for s in default["moe_2stages"]} == {"torch.float8_e4m3fn"}
    assert {s["q_dtype_w"] for s in mi300["moe_2stages"]} == {"torch.float8_e4m3fnuz"}
    ep = _shapes(capsys, "--ep")
    assert ep["moe_2stages"] != default["moe_2stages"]
    assert {s["expert"] for s in ep["moe_2stages"]} != {s["expert"] for s in default["moe_2stages"]} or \
        {s["inter_dim"] for s in ep["moe_2stages"]} != {s["inter_dim"] for s in default["moe_2stages"]}
    bp = _shapes(capsys, "--gemm-variant", "a8w8_blockscale_bpreshuffle")
    assert "a8w8_blockscale_bpreshuffle" in bp and "a8w8_blockscale" not in bp


def test_bad_gfx_and_variant_refused(capsys):
    capsys.readouterr()
    assert main(["shapes", "--model", DSV3, "--gfx", "mi300"]) == ExitCode.USAGE
    assert "--gfx 'mi300' is not a gfx name" in capsys.readouterr().err
    assert main(["shapes", "--model", DSV3, "--gemm-variant", "nope"]) == ExitCode.USAGE
