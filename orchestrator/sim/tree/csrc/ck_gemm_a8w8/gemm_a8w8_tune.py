# SPDX-License-Identifier: MIT
# Simulated AITER tuner: CK a8w8 (per-token / per-tensor) GEMM.
from aiter.jit.core import AITER_CONFIG_GEMM_A8W8
from aiter.utility.base_tuner import GemmCommonTuner


class GemmA8W8Tuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_GEMM_A8W8}",
        "untune_file": "aiter/configs/a8w8_untuned_gemm.csv",
        "config_env_name": "AITER_CONFIG_GEMM_A8W8",
    }
    sim_variant = "a8w8"
    sim_tune_module = "module_gemm_a8w8_tune"

    def _setup_specific_arguments(self):
        pass


if __name__ == "__main__":
#@ if current
    key = ["gfx", "cu_num", "M", "N", "K", "q_dtype_w"]
#@ endif
#@ if legacy
    key = ["cu_num", "M", "N", "K", "q_dtype_w"]
#@ endif
    resultList = ["kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    tuner = GemmA8W8Tuner("GemmA8W8Tuner", key=key, resultList=resultList,
                          description="gen API for CK gemm a8w8 kernel")
    args = tuner.parse_args()
    tuner.run(args, False)
