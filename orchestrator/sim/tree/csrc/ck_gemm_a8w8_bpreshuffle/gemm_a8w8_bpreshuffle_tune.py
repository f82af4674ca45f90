# SPDX-License-Identifier: MIT
# Simulated AITER tuner: a8w8 GEMM with B preshuffle (CK / CKTile / ASM).
import argparse

from aiter.jit.core import AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE
from aiter.utility.base_tuner import GemmCommonTuner

LIBTYPES = ["all", "asm", "ck", "cktile", "flydsl"]


def libtype_list(value):
    out = []
    for v in value.split(","):
        v = v.strip()
        if v not in LIBTYPES:
            raise argparse.ArgumentTypeError(f"Invalid libtype: {value}")
        out.append(v)
    return out


class GemmA8W8BpreShuffleTuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE}",
        "untune_file": "aiter/configs/a8w8_bpreshuffle_untuned_gemm.csv",
        "config_env_name": "AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE",
    }
    sim_variant = "a8w8_bpreshuffle"
    sim_tune_module = "module_gemm_a8w8_bpreshuffle_tune"

    def _setup_specific_arguments(self):
        self.parser.add_argument("--libtype", type=libtype_list, default=["all"],
                                 help="comma-separated subset of " + ", ".join(LIBTYPES))
        self.parser.add_argument("--blockPerCu", nargs="+", type=int, default=[1, 2, 3, 4],
                                 help="List of BlockPerCu values to tune (CKTile only)")
#@ if newest

    def candidate_result(self, args, row):
        # ROCm/aiter #5007: one-stage FlyDSL split-K is in the search space, but only with -k; the
        # winning split-K CK candidate is then a FlyDSL kernel (same time in the perf model)
        res = super().candidate_result(args, row)
        libs = getattr(args, "libtype", ["all"])
        if res and args.splitK and ("all" in libs or "flydsl" in libs) \
                and res.get("libtype") == "ck" and int(res.get("splitK") or 0) > 0:
            tile = "x".join(str(res["kernelName"]).split("_")[2].split("x")[:3])
            res["libtype"] = "flydsl"
            res["kernelName"] = "flydsl_bpreshuflle_%s_F8_F8_B16_0x1x4x%d_default" % (tile, res["splitK"])
        return res
#@ endif


if __name__ == "__main__":
#@ if current
    key = ["gfx", "cu_num", "M", "N", "K", "q_dtype_w"]
#@ endif
#@ if legacy
    key = ["cu_num", "M", "N", "K", "q_dtype_w"]
#@ endif
    resultList = ["libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    tuner = GemmA8W8BpreShuffleTuner("GemmA8W8BpreShuffleTuner", key=key, resultList=resultList,
                                     description="gen API for CK gemm a8w8 bpreshuffle kernel")
    args = tuner.parse_args()
    tuner.run(args, False)
