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


def test_csv_follows_the_m_preset_and_snaps_moe_tokens_as_the_runtime_looks_them_up(tmp_path, capsys):
    """An audit found `shapes --csv` wrote tokens 96/200 (never looked up: #5125) and swept 1..32768 whatever
    --m-preset said; and a bf16 model's --csv with --m-preset failed with 'unknown variant bf16'."""
    moe = tmp_path / "moe.csv"
    assert main(["shapes", "--model", DSV3, "--tp", "8", "--m-preset", "96,200,40000", "--variant", "moe_2stages",
                 "--csv", str(moe)]) == 0
    assert [r.split(",")[0] for r in moe.read_text().splitlines()[1:]] == ["128", "256", "40000"]
    assert "96->128, 200->256" in capsys.readouterr().err
    gemm = tmp_path / "g.csv"
    assert main(["shapes", "--model", DSV3, "--tp", "8", "--m-preset", "1,8,64", "--variant", "a8w8_blockscale",
                 "--csv", str(gemm)]) == 0
    assert {r.split(",")[0] for r in gemm.read_text().splitlines()[1:]} == {"1", "8", "64"}
    bf16 = tmp_path / "b.csv"
    llama = DSV3.replace("deepseek_v3", "llama3_1_8b")
    assert main(["shapes", "--model", llama, "--csv", str(bf16), "--m-preset", "1,8"]) == 0
    assert bf16.read_text().startswith("M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle\n1,")


def test_a6w6_lines_missing_from_a_log_are_explained(tmp_path, capsys):
    """Issue 12: A6W6 prints its lookups only with AITER_LOG_TUNED_CONFIG=1 -- "say so when mining a log that
    lacks them" (run did; the offline `shapes` did not)."""
    log = tmp_path / "s.log"
    log.write_text("INFO 11-26 10:00:00 server started\n")
    assert main(["shapes", str(log), "--variant", "a6w6", "--json"]) == 0
    assert "AITER_LOG_TUNED_CONFIG=1" in capsys.readouterr().err


def test_bf16_shapes_are_the_a16w16_variant_and_its_untuned_csv(capsys, tmp_path):
    """Issue 30: bf16 misses are a16w16 shapes (tuned like the others); `--variant bf16` names it too. The JSON
    also lists them under "bf16", where earlier releases did (a script reading that key keeps working)."""
    log = Path(DSV3).parents[1] / "logs" / "bf16.log"
    assert main(["shapes", str(log), "--json"]) == 0
    out, err = capsys.readouterr()
    found = json.loads(out)
    assert found["a16w16"] and found["bf16"] == found["a16w16"] and "does not tune" not in err
    csv = tmp_path / "u.csv"
    assert main(["shapes", str(log), "--variant", "bf16", "--csv", str(csv)]) == 0
    lines = csv.read_text().splitlines()
    assert lines[0] == "M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle"
    assert len(lines) > 1 and all(line.split(",")[3] in ("True", "False") for line in lines[1:])

