# SPDX-License-Identifier: MIT
# Simulated AITER tuner: a4w4 (MXFP4) block-scale GEMM, CK + ASM candidates.
from aiter.jit.core import AITER_CONFIG_GEMM_A4W4
from aiter.jit.utils.chip_info import get_gfx
from aiter.utility.base_tuner import GemmCommonTuner


class GemmA4W4BlockScaleTuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_GEMM_A4W4}",
        "untune_file": "aiter/configs/a4w4_blockscale_untuned_gemm.csv",
        "config_env_name": "AITER_CONFIG_GEMM_A4W4",
    }
    sim_variant = "a4w4_blockscale"
    sim_tune_module = "module_gemm_a4w4_blockscale_tune"

    def _setup_specific_arguments(self):
        pass

    def tune(self, batch, args):
        if get_gfx() not in ["gfx950"]:
            print(f"tuning is not supported in this chip {get_gfx()}")
            return [(row, None) for row in batch]
        return super().tune(batch, args)


if __name__ == "__main__":
#@ if current
    key = ["gfx", "cu_num", "M", "N", "K"]
#@ endif
#@ if legacy
    key = ["cu_num", "M", "N", "K"]
#@ endif
    resultList = ["kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    tuner = GemmA4W4BlockScaleTuner("GemmA4W4BlockScaleTuner", key=key, resultList=resultList,
                                    description="gen API for CK gemm a4w4 kernel")
    args = tuner.parse_args()
    tuner.run(args, False)
