"""The `newest` simulated profile (AITER 0.1.29): what the reference shows changed after v0.1.20.

Per ../shared/reference/aiter-after-v0.1.20.md:
* §2.1 #4410: the tuner's ``--timeout`` counts from task start (help text says so; tree: base_tuner.py);
* §2.2 #5007: a8w8_bpreshuffle with ``-k`` puts FlyDSL split-K kernels in the search space, rows named
  ``flydsl_bpreshuflle_…`` (upstream spelling) with ``splitK > 0`` (tree: gemm_a8w8_bpreshuffle_tune.py);
* §2.2 #4620: ``ActivationType.GeluTanh`` in fmoe tables and in the MoE test's ``-a`` choices;
* §5: ``op_tests/tuning_tests/test_csv_validation.py`` and ``test_config_shape_collision.py``;
* §3: the A6W6 (MXFP6) tuner ``csrc/gemm_a6w6/gemm_a6w6_tune.py`` (gfx950).
Per aiter-december-2026.md (v0.1.30 ships it): the MXFP8 bpreshuffle tuner (FlyDSL, gfx950) and its op_test;
the MXFP8 BMM bpreshuffle tables (its README at ROCm/aiter fb06b88c).
The tree files carry the code under ``#@ if newest`` / ``#@ if !newest``; this module adjusts the data.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

# shipped rows that only a post-0.1.20 table has (key values chosen away from the test shapes)
_FMOE_GELUTANH = {
    "gfx": "gfx950", "cu_num": "256", "token": "64", "model_dim": "4096", "inter_dim": "1536", "expert": "128",
    "topk": "8", "act_type": "ActivationType.GeluTanh", "dtype": "torch.bfloat16",
    "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn", "q_type": "QuantType.per_Token",
    "use_g1u1": "1", "doweight_stage1": "0", "block_m": "32", "ksplit": "0", "us1": "20.1",
    "kernelName1": "moe_ck2stages_gemm1_256x32x64x128_1x4_MulABScaleExpertWeight_v1_Nswizzle0_Quant2_gelutanh_B16",
    "err1": "0.0%", "us2": "16.2",
    "kernelName2": "moe_ck2stages_gemm2_256x32x64x128_1x4_MulABScale_v1_Nswizzle0_Quant2_MulRoutedWeight1_B16",
    "err2": "0.0%", "us": "36.3", "run_1stage": "0", "tflops": "5.1", "bw": "2500.0", "_tag": "",
}
_BPRESHUFFLE_FLYDSL = {
    "gfx": "gfx950", "cu_num": "256", "M": "48", "N": "6144", "K": "4096", "q_dtype_w": "torch.float8_e4m3fn",
    "libtype": "flydsl", "kernelId": "7", "splitK": "2", "us": "9.8213",
    "kernelName": "flydsl_bpreshuflle_32x64x512_F8_F8_B16_0x1x4x2_default", "tflops": "246.1", "bw": "2612.5",
    "errRatio": "0.0",
}
_ADD = {"tuned_fmoe.csv": _FMOE_GELUTANH, "a8w8_bpreshuffle_tuned_gemm.csv": _BPRESHUFFLE_FLYDSL}


def flydsl_name(tile: str, splitk: int) -> str:
    """A FlyDSL bpreshuffle kernel name that gemm_op_a8w8's regex parses (after-v0.1.20 §2.2)."""
    return "flydsl_bpreshuflle_%s_F8_F8_B16_0x1x4x%d_default" % (tile, max(1, splitk))


def _append_row(path: Path, values: dict) -> None:
    text = path.read_text()
    header = next(csv.reader(io.StringIO(text)))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([values.get(c, "") for c in header])
    path.write_text(text if text.endswith("\n") else text + "\n")
    with open(path, "a") as fh:
        fh.write(buf.getvalue())


# A6W6 tables (aiter-after-v0.1.20.md §3; the example row is the reference's)
_A6W6_TUNED = ("gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
               "gfx950,256,14850,2048,2048,2,0,48.6717,f6gemm_dmabig_grp16_kernel_func,2559.4,1559.2,0.0\n")
_A6W6_UNTUNED = "M,N,K\n14850,2048,2048\n"


# MXFP8 bpreshuffle tables (aiter-december-2026.md, gemm_a8w8_mxfp8_bpreshuffle_tune.py at aaf7a35e): the
# runtime's table, its untuned list, and the shipped DSv4 model table (gfx1250 rows) that the tuner's
# default -o names
_MXFP8_HEADER = "gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
_MXFP8_TUNED = _MXFP8_HEADER + ("gfx950,256,4096,24576,1536,flydsl,3,0,171.52,"
                                "flydsl_mxpsh_64x256x128_F8_F8_B16_w2_x4_sk1,1803.1,1024.6,0.0\n")
_MXFP8_UNTUNED = "M,N,K\n4096,24576,1536\n"
_MXFP8_MODEL = _MXFP8_HEADER + (
    "gfx1250,256,64,7168,2048,flydsl,1,0,11.02,flydsl_mxpsh_32x128x128_F8_F8_B16_w0_x0_sk1,170.5,1480.2,0.0\n"
    "gfx1250,256,128,2112,7168,flydsl,2,0,12.77,flydsl_mxpsh_64x128x128_F8_F8_B16_w1_x4_sk1,303.4,1322.9,0.0\n")
MXFP8_MODEL_TABLE = "model_configs/dsv4_a8w8_mxfp8_bpreshuffle_tuned_gemm.csv"


# MXFP8 BMM bpreshuffle tables (csrc/bmm_a8w8_mxscale/README.md at fb06b88c): the runtime's table and its
# untuned template ship header only; the DSV4 model table its tuner takes shapes from without -i and writes
# without -o (rows: DSV4 wo_a's g16 n1024 k4096, kernel names in the simulator's generic grammar)
_BMM = "batched_gemm_a8w8_blockscale_mxscale_bpreshuffle"
_BMM_HEADER = "gfx,b,m,n,k,w_scale_block,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
_BMM_MODEL = _BMM_HEADER + (
    "gfx950,16,1,1024,4096,128x128,opus,8640,2,9.41,bmm_a8w8_mxscale_bpreshuffle_opus_256x16x64x256_intrawave_v1,"
    "14.3,7145.2,0.0\n"
    "gfx950,16,256,1024,4096,128x128,flydsl,-1,4,30.12,bmm_a8w8_mxscale_bpreshuffle_flydsl_256x64x128x128_intrawave_v2,"
    "1140.7,3063.2,0.0\n")
BMM_MODEL_TABLE = f"model_configs/dsv4_{_BMM}_tuned.csv"


def adjust_configs(cfg_dir: Path) -> None:
    (Path(cfg_dir) / "a8w8_mxfp8_bpreshuffle_tuned_gemm.csv").write_text(_MXFP8_TUNED)
    (Path(cfg_dir) / "a8w8_mxfp8_bpreshuffle_untuned_gemm.csv").write_text(_MXFP8_UNTUNED)
    (Path(cfg_dir) / "model_configs").mkdir(exist_ok=True)
    (Path(cfg_dir) / MXFP8_MODEL_TABLE).write_text(_MXFP8_MODEL)
    (Path(cfg_dir) / "a6w6_blockscale_tuned_gemm.csv").write_text(_A6W6_TUNED)
    (Path(cfg_dir) / "a6w6_blockscale_untuned_gemm.csv").write_text(_A6W6_UNTUNED)
    for name, row in _ADD.items():
        p = Path(cfg_dir) / name
        if p.is_file():
            _append_row(p, row)
    # the A16W8 MXFP8 asm GEMM's runtime table ships header only (variants_mx.py, 59663079); its lookup raises
    # FileNotFoundError without it (gemm_op_a16w8_mxfp8.py, index id 70186384978)
    (Path(cfg_dir) / "a16w8_mxfp8_asm_tuned_gemm.csv").write_text(
        "gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n")
    (Path(cfg_dir) / f"{_BMM}_tuned.csv").write_text(_BMM_HEADER)
    (Path(cfg_dir) / f"{_BMM}_untuned.csv").write_text("b,m,n,k,w_scale_block\n")
    (Path(cfg_dir) / BMM_MODEL_TABLE).write_text(_BMM_MODEL)
