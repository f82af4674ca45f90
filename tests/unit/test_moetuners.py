"""steps/moetuners: the per-shape choice between the standard and the --mxfp4-flydsl MoE tuner (issue 30)."""

import pytest

from orchestrator.errors import UsageError
from orchestrator.steps import moetuners

KEYS = ("token", "model_dim")
FP4 = {"token": 16, "q_type": "QuantType.per_1x32", "q_dtype_a": "torch.float4_e2m1fn_x2",
       "q_dtype_w": "torch.float4_e2m1fn_x2"}


def _r(token, value):
    return {"key": {"token": token, "model_dim": 7168}, "value": value}


def test_pick_keeps_the_faster_median_per_shape():
    std = [_r(1, 10.0), _r(1, 11.0), _r(1, 30.0), _r(2, 5.0), _r(2, 5.2), _r(3, 7.0)]
    fly = [_r(1, 9.0), _r(1, 9.5), _r(2, 6.0), _r(2, 6.1), _r(4, 3.0)]
    after, choices = moetuners.pick(std, fly, KEYS, higher_is_better=False)
    by = {c["key"]["token"]: c for c in choices}
    assert {t: c["tuner"] for t, c in by.items()} == {1: "flydsl", 2: "standard", 3: "standard", 4: "flydsl"}
    assert by[1]["standard"] == 11.0 and by[1]["flydsl"] == 9.25
    assert sorted((r["key"]["token"], r["value"]) for r in after) == \
        [(1, 9.0), (1, 9.5), (2, 5.0), (2, 5.2), (3, 7.0), (4, 3.0)]
    _, hib = moetuners.pick(std, fly, KEYS, higher_is_better=True)
    assert {c["key"]["token"]: c["tuner"] for c in hib}[1] == "standard"


def test_merged_table_takes_the_flydsl_rows_of_the_shapes_it_won():
    std = "cu_num,token,model_dim,us,kernelName1\n256,1,7168,5,ck_a\n80,1,7168,5,ck_other\n256,2,7168,6,ck_b\n"
    fly = "cu_num,token,model_dim,us,kernelName1,extra\n256,1,7168,9,fly_a,x\n256,2,7168,9,fly_b,x\n" \
          "256,3,7168,9,fly_c,x\n"
    choices = [{"key": {"token": 1, "model_dim": 7168}, "tuner": "flydsl"},
               {"key": {"token": 2, "model_dim": 7168}, "tuner": "standard"},
               {"key": {"token": 3, "model_dim": 7168}, "tuner": "flydsl"}]
    text, taken = moetuners.merged_table(std, fly, choices, KEYS, cu_num=256)
    assert taken == 2
    assert text == ("cu_num,token,model_dim,us,kernelName1\n256,1,7168,9,fly_a\n80,1,7168,5,ck_other\n"
                    "256,2,7168,6,ck_b\n256,3,7168,9,fly_c\n")


def test_checks():
    moetuners.check_shapes("standard", [{"q_type": "QuantType.No"}])
    moetuners.check_shapes("both", [FP4])
    with pytest.raises(UsageError, match="FP4 MoE shapes only"):
        moetuners.check_shapes("flydsl", [FP4, {**FP4, "q_dtype_w": "torch.float8_e4m3fn"}])
    with pytest.raises(UsageError, match="applies to moe_2stages"):
        moetuners.check_request("both", ["moe_2stages", "a8w8"])
    with pytest.raises(UsageError, match="has no --mxfp4-flydsl"):
        moetuners.check_help("both", "usage: x [-h] [--last]\n  --last  only last\n", "gemm_moe_tune.py")
    moetuners.check_help("flydsl", "usage: x [-h] [--mxfp4-flydsl]\n  --mxfp4-flydsl  tune\n", "gemm_moe_tune.py")
    assert moetuners.flydsl_staging("/j/staging/tuned_fmoe.csv") == "/j/staging/flydsl/tuned_fmoe.csv"
