"""Planted table defects (``SimSpec.table_defects``): one row per audit finding kind (issue 30), so the
e2e test finds each kind in a node's live tables. Names are ``orchestrator.parsing.audit.KINDS``."""
from __future__ import annotations

from pathlib import Path

from .newest import _append_row

KINDS = ("copied_us", "unparsable_kernel", "duplicate_key", "foreign_cu_num", "err_ratio")
DUPLICATE_TABLE = "model_configs/sim_dup_a8w8_tuned_gemm.csv"
_GEMM = {"q_dtype_w": "torch.float8_e4m3fn", "kernelId": "12", "splitK": "0", "libtype": "ck", "tflops": "1.0",
         "bw": "1.0", "errRatio": "0.0",
         "kernelName": "a8w8_rowwise_256x64x64x256_16x16_1x1_16x16x1_16x16x1_1x16x1x16_4x4x1_1x1_intrawave_v3"}
_FMOE = {"model_dim": "7168", "inter_dim": "256", "expert": "257", "topk": "9", "act_type": "ActivationType.Silu",
         "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn",
         "q_type": "QuantType.per_1x128", "use_g1u1": "1", "doweight_stage1": "0", "block_m": "32", "ksplit": "0",
         "us1": "200.1", "kernelName1": "moe_stage1_sim", "err1": "0.0%", "us2": "159.3797",
         "kernelName2": "moe_stage2_sim", "err2": "0.0%", "us": "359.4797", "run_1stage": "0", "tflops": "1.0",
         "bw": "1.0"}
# a FlyDSL bpreshuffle name from before the #4151 rename: gemm_op_a8w8's regex rejects it (aiter#5069)
OLD_FLYDSL = "flydsl_bpreshuffle_32x64x512_F8_F8_B16_w4_default"


def plant(cfg_dir: Path, kinds, gfx: str, cu_num: int) -> None:
    cfg, node = Path(cfg_dir), {"gfx": gfx, "cu_num": str(cu_num)}
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown table defect(s) {sorted(unknown)}; choose from {KINDS}")
    gemm = cfg / "a8w8_tuned_gemm.csv"
    if "copied_us" in kinds:      # aiter#5641: five token buckets, one us
        for token in (1, 2, 4, 8, 16):
            _append_row(cfg / "tuned_fmoe.csv", {**_FMOE, **node, "token": str(token)})
    if "unparsable_kernel" in kinds:
        _append_row(cfg / "a8w8_bpreshuffle_tuned_gemm.csv",
                    {**_GEMM, **node, "M": "24", "N": "6144", "K": "4096", "libtype": "flydsl", "splitK": "2",
                     "us": "9.8213", "kernelName": OLD_FLYDSL})
    if "foreign_cu_num" in kinds:     # the node's gfx, another SKU's (or partition's) CU count
        _append_row(gemm, {**_GEMM, **node, "cu_num": str(cu_num // 2), "M": "96", "N": "5120", "K": "640",
                           "us": "6.5321"})
    if "err_ratio" in kinds:
        _append_row(gemm, {**_GEMM, **node, "M": "80", "N": "5120", "K": "640", "us": "6.1234", "errRatio": "0.5"})
    if "duplicate_key" in kinds:      # the same key in a model_configs table AITER merges with the main one
        row = {**_GEMM, **node, "M": "112", "N": "5120", "K": "640", "us": "7.0123"}
        _append_row(gemm, row)
        dup = cfg / DUPLICATE_TABLE
        dup.parent.mkdir(exist_ok=True)
        dup.write_text(gemm.read_text().split("\n", 1)[0] + "\n")
        _append_row(dup, {**row, "us": "6.9"})
