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
