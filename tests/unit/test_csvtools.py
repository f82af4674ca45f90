"""parsing.csvtools against every real sample CSV in /work/shared/aiter-samples/configs/ (all versions)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.parsing import csvtools as ct
from orchestrator.parsing import untuned as ut
from orchestrator.variants import get_variant, profile_for

SAMPLES = Path("/work/shared/aiter-samples/configs")
ALL = sorted(SAMPLES.glob("*/*.csv")) if SAMPLES.exists() else []
needs_samples = pytest.mark.skipif(not ALL, reason="aiter sample CSVs not available")


def _data_lines(p: Path) -> int:
    return sum(1 for line in p.read_text().splitlines()[1:] if line.strip(" \t,"))


@needs_samples
@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_sample_reads_by_header(path):
    df = ct.read_tuned_csv(path)
    header = [h.strip() for h in path.read_text().splitlines()[0].split(",")]
    assert list(df.columns) == header
    assert len(df) == _data_lines(path)
    keys = ct.key_columns(df)
    if "token" in header:
        assert keys[-1] in ("doweight_stage1", "_tag")
        assert len([k for k in keys if k != "_tag"]) in (12, 13, 14)
    else:
        assert [k for k in ("M", "N", "K") if k in header] == [k for k in keys if k in ("M", "N", "K")]
    for c in ("M", "N", "K", "cu_num", "token", "B"):
        if c in df.columns and len(df):
            assert df[c].dtype == "int64", c
    merged, rep = ct.merge_tuned_report([df])
    assert rep["input_rows"] == len(df)
    assert rep["kept"] + rep["invalid_us"] + rep["err_too_high"] + rep["duplicates"] == len(df)


@needs_samples
def test_whitespace_and_tabs_are_stripped():
    df = ct.read_tuned_csv(SAMPLES / "head-e4048607" / "a8w8_bpreshuffle_untuned_gemm.csv")
    assert set(df["q_dtype_w"]) <= {"torch.int8", "torch.float8_e4m3fnuz", "torch.float8_e4m3fn"}
    df = ct.read_tuned_csv(SAMPLES / "head-e4048607" / "a4w4_blockscale_untuned_gemm.csv")
    assert df.loc[0, ["M", "N", "K"]].tolist() == [1, 16384, 16384]


def test_header_only_and_text_input():
    assert len(ct.read_tuned_csv("M,N,K")) == 0
    df = ct.read_tuned_csv("M, N ,K,Unnamed: 3\n1, 2 ,3,\n\n")
    assert list(df.columns) == ["M", "N", "K"] and df.iloc[0].tolist() == [1, 2, 3]


LEGACY = """cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio
256,16,512,7168,7,0,18.1359,kA,6.48,209.59,0
256,32,512,7168,7,0,-1.0,kBroken,-1,-1,1.0
256,64,512,7168,7,0,9.0,kErr,1,1,0.2
304,16,512,7168,1,0,5.0,kMI300,1,1,0
"""
HEAD = """gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio
gfx950,256,16,512,7168,ck,8,0,12.0,kB,1,1,0.0
gfx950,256,32,512,7168,asm,9,7,inf,kInf,1,1,0.0
gfx950,256,128,512,7168,asm,9,7,Null,kNull,1,1,0.0
gfx950,256,16,512,7168,cktile,3,0,12.0,kTieLater,1,1,0.01
"""


def test_merge_keeps_best_valid_row_and_reports():
    merged, rep = ct.merge_tuned_report([LEGACY, HEAD])
    assert list(merged.columns[:5]) == ["gfx", "cu_num", "M", "N", "K"]
    rows = {(r.gfx, r.cu_num, r.M): r.kernelName for r in merged.itertuples()}
    assert rows == {("gfx950", 256, 16): "kTieLater", ("gfx942", 304, 16): "kMI300"}
    assert rep["invalid_us"] == 3         # -1, inf, Null
    assert rep["err_too_high"] == 1       # errRatio 0.2 > 0.05
    assert rep["duplicates"] == 2         # 16x512x7168 on gfx950 had 3 valid rows
    assert {"gfx": "gfx950", "cu_num": "256", "M": "32", "N": "512", "K": "7168"} in rep["keys_without_valid_row"]
    assert merged.attrs["merge_report"] == rep
    assert (merged["us"] > 0).all()
    loose = ct.merge_tuned([LEGACY, HEAD], err_bound=0.5)
    assert "kErr" in set(loose["kernelName"])


@needs_samples
def test_merge_fmoe_percent_errors_and_legacy_gfx():
    legacy = SAMPLES / "v0.1.12-legacy" / "model_configs__a8w8_blockscale_tuned_fmoe_qwen3_235b.csv"
    head = SAMPLES / "head-e4048607" / "model_configs__a8w8_blockscale_tuned_fmoe_qwen3_5_397b.csv"
    merged, rep = ct.merge_tuned_report([legacy, head])
    assert rep["kept"] == 11 + 16 and rep["err_too_high"] == 0
    strict, rep2 = ct.merge_tuned_report([legacy], moe_err_bound=0.1)
    assert rep2["err_too_high"] > 0                       # err2 = 15.7% rows
    assert ct.key_columns(merged)[:3] == ["cu_num", "token", "model_dim"]
    mimo = SAMPLES / "head-e4048607" / "model_configs__mimo_v2_5_pro_tuned_fmoe.csv"
    mixed = ct.merge_tuned([legacy, mimo])                # legacy rows get gfx from cu_num 256
    assert ct.key_columns(mixed)[:3] == ["gfx", "cu_num", "token"]
    assert mixed.groupby("gfx").size().to_dict() == {"gfx942": 5, "gfx950": 11}


@needs_samples
def test_diff_tuned():
    a = ct.read_tuned_csv(SAMPLES / "v0.1.12-legacy" / "model_configs__dsv3_a8w8_bpreshuffle_tuned_gemm.csv")
    b = a.copy()
    b.loc[0, "us"] = a.loc[0, "us"] / 2          # b twice as fast, same kernel
    b.loc[1, "kernelName"] = "other_kernel"
    b = b.drop(index=2)
    extra = b.iloc[[0]].copy()
    extra["M"] = 99999
    b = pd.concat([b, extra], ignore_index=True)
    d = ct.diff_tuned(a, b)
    assert list(d.columns) == ["cu_num", "M", "N", "K", "q_dtype_w", "kernelName_a", "kernelName_b",
                               "us_a", "us_b", "speedup_pct", "status"]
    assert d.loc[0, "status"] == "same" and math.isclose(d.loc[0, "speedup_pct"], 100.0)
    assert d.loc[1, "status"] == "changed"
    assert d.loc[2, "status"] == "only_a" and math.isnan(d.loc[2, "speedup_pct"])
    only_b = d[d["status"] == "only_b"]
    assert only_b["M"].tolist() == [99999] and only_b["N"].tolist() == [a.loc[0, "N"]]
    assert (d["status"] == "same").sum() == len(a) - 2


@needs_samples
def test_diff_legacy_vs_head_infers_gfx():
    legacy = SAMPLES / "v0.1.12-legacy" / "a8w8_tuned_batched_gemm.csv"
    head = SAMPLES / "head-e4048607" / "a8w8_tuned_batched_gemm.csv"
    d = ct.diff_tuned(legacy, head)
    assert list(d.columns[:6]) == ["gfx", "cu_num", "B", "M", "N", "K"]
    assert set(d["status"]) <= {"same", "changed", "only_a", "only_b"}
    assert (d["status"] == "same").sum() >= 20


@needs_samples
@pytest.mark.parametrize("name,variant", [
    ("head-e4048607/untuned_fmoe.csv", "moe_2stages"),
    ("head-e4048607/model_configs__mimo_v2_5_pro_untuned_fmoe.csv", "moe_2stages"),
    ("head-e4048607/a8w8_untuned_gemm.csv", "a8w8"),
    ("head-e4048607/a8w8_bpreshuffle_untuned_gemm.csv", "a8w8_bpreshuffle"),
    ("head-e4048607/a8w8_blockscale_untuned_gemm.csv", "a8w8_blockscale"),
    ("head-e4048607/a4w4_blockscale_untuned_gemm.csv", "a4w4_blockscale"),
    ("head-e4048607/a8w8_untuned_batched_gemm.csv", "batched_a8w8"),
    ("head-e4048607/bf16_untuned_batched_gemm.csv", "batched_bf16"),
])
def test_untuned_roundtrip_matches_aiter_format(name, variant):
    path = SAMPLES / name
    shapes = ut.read_shapes_csv(path, variant)
    text = ut.write_untuned_csv(shapes, variant)
    original = [",".join(c.strip() for c in line.split(",")) for line in path.read_text().splitlines()
                if line.strip()]
    expected = list(dict.fromkeys(original))             # AITER drop_duplicates()
    assert text.splitlines() == expected


def test_write_untuned_moe_rendering():
    shape = {"token": 64, "model_dim": 4096, "inter_dim": 256, "expert": 288, "topk": 8,
             "act_type": "<ActivationType.Silu: 0>", "dtype": "torch.bfloat16",
             "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn",
             "q_type": "QuantType.per_1x128", "use_g1u1": True, "doweight_stage1": False}
    assert ut.write_untuned_csv([shape, shape], "moe_2stages").splitlines() == [
        "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1",
        "64,4096,256,288,8,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,torch.float8_e4m3fn,"
        "QuantType.per_1x128,1,0",
    ]


def test_write_untuned_versioned_columns_and_errors():
    legacy_a8w8 = get_variant("a8w8").resolve(profile_for((0, 1, 9)))
    assert ut.write_untuned_csv([{"m": 1, "n": 2, "k": 3}], legacy_a8w8) == "M,N,K\n1,2,3\n"
    with pytest.raises(ValueError, match="q_dtype_w"):
        ut.write_untuned_csv([{"m": 1, "n": 2, "k": 3}], "a8w8")
    bf16 = {"m": 1, "n": 2, "k": 3, "bias": False, "dtype": "torch.bfloat16", "outdtype": "torch.float32",
            "scaleab": False, "bpreshuffle": True}
    assert ut.write_untuned_csv([bf16], "bf16").splitlines()[1] == "1,2,3,False,torch.bfloat16,torch.float32,False,True"


def test_read_shapes_csv_case_and_missing(tmp_path):
    p = tmp_path / "mine.csv"
    p.write_text("m,n,k,q_dtype_w,gfx\n16, 1280, 8192 ,torch.int8,gfx942\n16,1280,8192,torch.int8,gfx942\n")
    assert ut.read_shapes_csv(p, "a8w8") == [{"m": 16, "n": 1280, "k": 8192, "q_dtype_w": "torch.int8"}]
    with pytest.raises(ValueError, match=r"missing column\(s\) B for variant batched_a8w8"):
        ut.read_shapes_csv(p, "batched_a8w8")
    q = tmp_path / "moe.csv"
    q.write_text("TOKEN,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
                 "doweight_stage1\n1,7168,256,256,8,Silu,bfloat16,float8_e4m3fn,float8_e4m3fn,per_1x128,True,0\n")
    assert ut.read_shapes_csv(q, "moe_2stages") == [{
        "token": 1, "model_dim": 7168, "inter_dim": 256, "expert": 256, "topk": 8,
        "act_type": "ActivationType.Silu", "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn",
        "q_dtype_w": "torch.float8_e4m3fn", "q_type": "QuantType.per_1x128", "use_g1u1": 1,
        "doweight_stage1": 0}]
    bad = tmp_path / "bad.csv"
    bad.write_text("M,N,K\n1,x,3\n")
    with pytest.raises(ValueError, match="line 2: bad N"):
        ut.read_shapes_csv(bad, "a8w8_blockscale")


def test_git_conflict_markers_refused_like_aiters_csv_validation(tmp_path):
    # op_tests/tuning_tests/test_csv_validation (AITER after v0.1.20) fails a table with conflict markers;
    # pandas alone would read '<<<<<<< HEAD' as a row of a one-column-filled key
    from orchestrator.errors import ExitCode, UsageError
    p = tmp_path / "a8w8_tuned_gemm.csv"
    p.write_text("cu_num,M,N,K,kernelId,splitK,us,kernelName\n"
                 "<<<<<<< HEAD\n256,16,1280,8192,3,0,10.5,k3\n=======\n256,16,1280,8192,4,0,9.5,k4\n"
                 ">>>>>>> theirs\n")
    with pytest.raises(UsageError) as exc:
        ct.read_tuned_csv(p)
    assert "line 2" in str(exc.value) and exc.value.exit_code == ExitCode.USAGE
    # '=======' inside a cell is no marker
    assert len(ct.read_tuned_csv("cu_num,M,N,K,us,kernelName\n256,1,2,3,4.0,a=======b\n")) == 1
