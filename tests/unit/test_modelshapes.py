"""parsing.modelshapes: shapes per model fixture, hand-computed from the module docstring's formulas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.parsing.modelshapes import linear_layers, model_quant, shapes_from_model
from orchestrator.shapelib import shapelog

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"


def cfg(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


def nk(shapes):
    return [(s["n"], s["k"]) for s in shapes]


def moe(model_dim, inter_dim, expert, topk, qa, qw, qt, doweight=0, dtype="torch.bfloat16"):
    return {"model_dim": model_dim, "inter_dim": inter_dim, "expert": expert, "topk": topk,
            "act_type": "ActivationType.Silu", "dtype": dtype, "q_dtype_a": qa, "q_dtype_w": qw,
            "q_type": qt, "use_g1u1": 1, "doweight_stage1": doweight}


FN, FNUZ = "torch.float8_e4m3fn", "torch.float8_e4m3fnuz"


def test_deepseek_v3_tp8_matches_real_vllm_log():
    out = shapes_from_model(cfg("deepseek_v3"), tp=8, m_preset=None)
    assert list(out) == ["a8w8_blockscale", "moe_2stages"]
    assert nk(out["a8w8_blockscale"]) == [
        (2112, 7168), (3072, 1536), (4096, 512), (7168, 2048),   # MLA: fused qkv_a, q_b, kv_b, o
        (4608, 7168), (7168, 2304),                              # dense MLP (first 3 layers)
        (512, 7168), (7168, 256),                                # shared expert
    ]
    assert out["moe_2stages"] == [moe(7168, 256, 256, 8, FN, FN, "QuantType.per_1x128")]
    # every (N, K) of the real DeepSeek-R1 TP8 log (vllm-project/vllm#39485) is predicted
    real = shapelog.parse_files([Path(__file__).resolve().parents[1] / "fixtures" / "logs" /
                                 "real_vllm_blockscale.log"]).shapes["a8w8_blockscale"]
    predicted = set(nk(out["a8w8_blockscale"]))
    assert {(s["n"], s["k"]) for s in real if s["m"] == 72} <= predicted


def test_deepseek_options():
    c = cfg("deepseek_v3")
    unfused = shapes_from_model(c, tp=8, m_preset=None, fuse_qkv_a=False, fuse_shared_experts=True,
                                gfx="gfx942", gemm_variant="a8w8_blockscale_bpreshuffle")
    assert list(unfused) == ["a8w8_blockscale_bpreshuffle", "moe_2stages"]
    assert nk(unfused["a8w8_blockscale_bpreshuffle"])[:2] == [(1536, 7168), (576, 7168)]
    assert (512, 7168) not in nk(unfused["a8w8_blockscale_bpreshuffle"])
    assert unfused["moe_2stages"] == [moe(7168, 256, 257, 9, FNUZ, FNUZ, "QuantType.per_1x128")]
    ep = shapes_from_model(c, tp=8, m_preset=None, ep=True)
    assert ep["moe_2stages"][0]["inter_dim"] == 2048
    # fused_moe looks an EP MoE up with topk-1 (`topk -= int(is_ep)`, aiter-formats §3.2, #3999): rows tuned at
    # the routed topk would never be found
    assert ep["moe_2stages"][0]["topk"] == 7 and shapes_from_model(c, tp=8, m_preset=None)["moe_2stages"][0]["topk"] == 8
    assert ep["moe_2stages"][0]["expert"] == 32          # the rank's local experts (w1.shape[0]), 256 / 8


def test_qwen3_moe_fp8_tp8_and_tp4():
    out = shapes_from_model(cfg("qwen3_235b_a22b_fp8"), tp=8, m_preset=None)
    assert nk(out["a8w8_blockscale"]) == [(1280, 4096), (4096, 1024)]    # kv heads 4 < tp 8: replicated
    assert out["moe_2stages"] == [moe(4096, 192, 128, 8, FN, FN, "QuantType.per_1x128")]
    out4 = shapes_from_model(cfg("qwen3_235b_a22b_fp8"), tp=4, m_preset=None)
    assert nk(out4["a8w8_blockscale"]) == [(2304, 4096), (4096, 2048)]
    assert out4["moe_2stages"][0]["inter_dim"] == 384


def test_qwen3_moe_unquantized_is_bf16():
    out = shapes_from_model(cfg("qwen3_30b_a3b"), tp=2, m_preset=None)
    assert out["a16w16"] == [
        {"n": 2560, "k": 2048, "bias": False, "dtype": "torch.bfloat16", "outdtype": "torch.bfloat16",
         "scaleab": False, "bpreshuffle": False},
        {"n": 2048, "k": 2048, "bias": False, "dtype": "torch.bfloat16", "outdtype": "torch.bfloat16",
         "scaleab": False, "bpreshuffle": False},
    ]
    b = "torch.bfloat16"
    assert out["moe_2stages"] == [moe(2048, 384, 128, 8, b, b, "QuantType.No")]


def test_llama_dense_bf16_tp1():
    layers = linear_layers(cfg("llama3_1_8b"), tp=1)
    assert [(e["layer"], e["n"], e["k"]) for e in layers] == [
        ("qkv_proj", 6144, 4096), ("o_proj", 4096, 4096),
        ("mlp.gate_up_proj", 28672, 4096), ("mlp.down_proj", 4096, 14336)]
    assert {e["variant"] for e in layers} == {"a16w16"}


def test_llama_70b_fp8_dynamic_tp8_is_a8w8_ptpc():
    out = shapes_from_model(cfg("llama3_1_70b_fp8_dynamic"), tp=8, m_preset=None, gfx="gfx942")
    assert list(out) == ["a8w8"]
    # (1280, 8192) and (8192, 1024) are AITER test_gemm_a8w8's qkv_proj / attn_out defaults
    assert out["a8w8"] == [{"n": 1280, "k": 8192, "q_dtype_w": FNUZ}, {"n": 8192, "k": 1024, "q_dtype_w": FNUZ},
                           {"n": 7168, "k": 8192, "q_dtype_w": FNUZ}, {"n": 8192, "k": 3584, "q_dtype_w": FNUZ}]
    assert model_quant(cfg("llama3_1_70b_fp8_dynamic"))["moe_q_type"] == "QuantType.per_Token"


def test_llama4_scout_text_config_tp8():
    out = shapes_from_model(cfg("llama4_scout"), tp=8, m_preset=None)
    assert nk(out["a16w16"]) == [(896, 5120), (5120, 640), (2048, 5120), (5120, 1024)]  # no dense layers
    b = "torch.bfloat16"
    assert out["moe_2stages"] == [moe(5120, 1024, 16, 1, b, b, "QuantType.No", doweight=1)]


def test_llama4_maverick_fp8_interleaved_attention_unquantized():
    layers = linear_layers(cfg("llama4_maverick_fp8"), tp=8, gfx="gfx942")
    got = [(e["layer"], e["variant"], e["n"], e["k"]) for e in layers]
    assert got == [
        ("qkv_proj", "a16w16", 896, 5120), ("o_proj", "a16w16", 5120, 640),
        ("mlp.gate_up_proj", "a8w8", 4096, 5120), ("mlp.down_proj", "a8w8", 5120, 2048),
        ("shared_experts.gate_up_proj", "a8w8", 2048, 5120), ("shared_experts.down_proj", "a8w8", 5120, 1024),
    ]
    out = shapes_from_model(cfg("llama4_maverick_fp8"), tp=8, m_preset=None, gfx="gfx942")
    assert out["moe_2stages"] == [moe(5120, 1024, 128, 1, FNUZ, FNUZ, "QuantType.per_Token", doweight=1)]


def test_m_expansion():
    out = shapes_from_model(cfg("qwen3_235b_a22b_fp8"), tp=8)
    assert len(out["a8w8_blockscale"]) == 2 * 16
    assert out["a8w8_blockscale"][0] == {"m": 1, "n": 1280, "k": 4096}
    assert [s["token"] for s in out["moe_2stages"]] == shapelog.moe_token_sweep()
    cg = shapes_from_model(cfg("qwen3_235b_a22b_fp8"), tp=8, m_preset="cudagraph")
    assert len(cg["a8w8_blockscale"]) == 2 * 67


def test_errors():
    with pytest.raises(ValueError, match="not divisible"):
        shapes_from_model(cfg("llama3_1_8b"), tp=3, m_preset=None)
    bad = dict(cfg("llama3_1_8b"), quantization_config={"quant_method": "awq"})
    with pytest.raises(ValueError, match="awq"):
        shapes_from_model(bad, tp=1)
