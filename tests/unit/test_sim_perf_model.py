"""The simulated node's performance model and its pandas/tabulate stand-ins."""

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.sim import perf_model as pm

FRAME = Path(pm.__file__).parent / "tree" / "aiter_pkg" / "aiter" / "_sim" / "frame.py"


def _frame():
    spec = importlib.util.spec_from_file_location("sim_frame", FRAME)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_deterministic_and_pure():
    s = {"m": 64, "n": 1536, "k": 7168}
    assert pm.default_us("a8w8_blockscale", s) == pm.default_us("a8w8_blockscale", dict(s))
    assert pm.tune_result("a8w8_blockscale", s) == pm.tune_result("a8w8_blockscale", s)
    # keys are case-insensitive and accept CSV strings
    assert pm.outcome("a8w8_blockscale", {"M": "64", "N": "1536", "K": "7168"}) == pm.outcome("a8w8_blockscale", s)
    # gfx / cu_num are part of the key
    assert pm.default_us("a8w8_blockscale", s, "gfx942", 304) != pm.default_us("a8w8_blockscale", s)


@pytest.mark.parametrize("variant", pm.ALL_VARIANTS)
def test_outcome_mix_and_tuned_rows(variant):
    if variant == "moe_2stages":
        base = {"model_dim": 7168, "inter_dim": 256, "expert": 257, "topk": 8, "act_type": "ActivationType.Silu",
                "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn",
                "q_type": "QuantType.per_1x128", "use_g1u1": 1, "doweight_stage1": 0}
        vary = "token"
    elif pm.family(variant) == "batched":
        base, vary = {"b": 16, "n": 1280, "k": 8192}, "m"
    else:
        base, vary = {"n": 1536, "k": 7168}, "m"
    if variant == "a16w16":
        base.update(bias=False, dtype="torch.bfloat16", outdtype="torch.bfloat16", scaleab=False, bpreshuffle=False)
    outs = [pm.outcome(variant, dict(base, **{vary: v})) for v in range(1, 401)]
    assert 20 < outs.count("failed") < 80 and 20 < outs.count("regressed") < 80
    for want in ("improved", "regressed"):
        shape = pm.shapes_with_outcome(variant, want, base, vary)[0]
        res = pm.tune_result(variant, shape)
        default = pm.default_us(variant, shape)
        assert res["us"] < default                      # the tuner always sees a gain
        bench = pm.bench_us(variant, shape, tuned_from=shape)
        assert (bench < default) == (want == "improved")  # the op_test may not
    failed = pm.shapes_with_outcome(variant, "failed", base, vary)[0]
    assert pm.tune_result(variant, failed) is None and pm.tuned_us(variant, failed) is None


def test_bench_value_columns():
    s = {"m": 32, "n": 1536, "k": 7168}
    us = pm.bench_value("a8w8_blockscale", s, "ck us")
    assert us == pm.round_sig(pm.default_us("a8w8_blockscale", s))
    flops, _ = pm.flops_and_bytes("a8w8_blockscale", s)
    assert pm.bench_value("a8w8_blockscale", s, "ck TFLOPS") == pm.round_sig(flops / us / 1e6)
    b = {"b": 16, "m": 32, "n": 1280, "k": 8192}
    assert pm.bench_value("batched_a8w8", b, "ck avg") == round(pm.default_us("batched_a8w8", b), 2)
    # the asm reference does not move with tuning
    assert pm.bench_value("a8w8_blockscale", s, "asm us", tuned_from=s) == pm.bench_value("a8w8_blockscale", s, "asm us")


def test_padding_rules():
    assert pm.padded_m_candidates(20, 2048, 3072) == [20, 32, 32]
    assert pm.padded_m_candidates(300, 2048, 3072) == [300, 320, 512]
    assert pm.padded_m_candidates(9000, 8192, 1024) == [9000, 9088, 8192]
    assert pm.moe_padded_token(3) == 4 and pm.moe_padded_token(163840) == 131072
    assert pm.moe_padded_token(163840, "legacy") == 16384 and pm.moe_padded_token(1500, "legacy") == 1024
    assert pm.moe_padded_token(1000, "legacy") == 1024 and pm.moe_padded_token(4096, "legacy") == 2048


def test_markdown_matches_pandas_tabulate():
    fr = _frame()
    rows = [
        {"dtype": "torch.bfloat16", "m": 1, "ck_preshuffle": True, "ck us": 5.3891, "ck TFLOPS": 65.3767, "x": 1},
        {"dtype": "torch.bfloat16", "m": 16384, "ck_preshuffle": False, "ck us": 1234.5678, "ck TFLOPS": 0.0123456789,
         "x": 2.5, "triton us": 3.0},
        {"dtype": "torch.float16", "m": 3, "ck_preshuffle": False, "ck us": 12.0, "ck TFLOPS": 1e-7, "x": math.nan},
    ]
    cols = fr.columns_of(rows)
    assert fr.to_markdown(cols, rows) == pd.DataFrame(rows).to_markdown(index=False)
