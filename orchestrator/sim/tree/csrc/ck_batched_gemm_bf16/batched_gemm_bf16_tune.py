# SPDX-License-Identifier: MIT
# Simulated AITER tuner: CK batched bf16 GEMM.
from aiter.jit.core import AITER_CONFIG_BF16_BATCHED_GEMM
from aiter.utility.base_tuner import GemmCommonTuner


class BatchedGemmBf16Tuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_BF16_BATCHED_GEMM}",
        "untune_file": "aiter/configs/bf16_untuned_batched_gemm.csv",
        "config_env_name": "AITER_CONFIG_BF16_BATCHED_GEMM",
    }
    sim_variant = "batched_bf16"
    sim_tune_module = "module_batched_gemm_bf16_tune"

    def _setup_specific_arguments(self):
        pass


if __name__ == "__main__":
#@ if current
    key = ["gfx", "cu_num", "B", "M", "N", "K"]
#@ endif
#@ if legacy
    key = ["cu_num", "B", "M", "N", "K"]
#@ endif
    resultList = ["kernelId", "splitK", "us", "kernelName", "errRatio", "tflops", "bw"]
    tuner = BatchedGemmBf16Tuner("BatchedGemmBf16Tuner", key=key, resultList=resultList,
                 description="gen API for CK batched gemm bf16 kernel")
    args = tuner.parse_args()
    tuner.run(args, False)
