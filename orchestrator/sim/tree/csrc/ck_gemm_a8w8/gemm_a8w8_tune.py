# SPDX-License-Identifier: MIT
# Simulated AITER tuner: CK a8w8 (per-token / per-tensor) GEMM.
#@ if newest
import os

from aiter import logger
#@ endif
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

#@ if !newest
    def _setup_specific_arguments(self):
        pass
#@ endif
#@ if newest
    # --backend ck|opus (aiter-december-2026.md; ROCm/aiter gemm_a8w8_tune.py at 89c51974): opus tunes the
    # a8w8 no-scale Opus kernel (fp8 only, one instance) and, when -o is the AITER_CONFIG_GEMM_A8W8 table,
    # writes /tmp/opus_a8w8_noscale_tuned_gemm.csv instead; it sets OPUS_A8W8_ONLY=1 for the module codegen
    OPUS_KERNEL = "opus_gemm_512x256x256x128_2x4_16x16x128_0x0x0<bf16_t>"

    def _setup_specific_arguments(self):
        self.parser.add_argument("--backend", choices=["ck", "opus"], default="ck",
                                 help="Backend to tune: 'ck' (existing path) or 'opus' (a8w8 no-scale).")

    def pre_process(self, args):
        self.backend = args.backend
        if self.backend == "opus" and args.tune_file == AITER_CONFIG_GEMM_A8W8:
            args.tune_file = "/tmp/opus_a8w8_noscale_tuned_gemm.csv"
            logger.warning("--backend opus selected; using /tmp/opus_a8w8_noscale_tuned_gemm.csv "
                           "to avoid mixing with CK tuned file.")
        if self.backend == "opus":
            os.environ["OPUS_A8W8_ONLY"] = "1"
        else:
            os.environ.pop("OPUS_A8W8_ONLY", None)
        super().pre_process(args)

    def candidate_result(self, args, row):
        if getattr(self, "backend", "ck") != "opus":
            return super().candidate_result(args, row)
        if "float8" not in str(row.get("q_dtype_w")):
            return None     # the opus backend has no candidate for int8 weights
        res = super().candidate_result(args, row)
        if res is not None:
            res.update(kernelId=10, splitK=0, kernelName=self.OPUS_KERNEL)
        return res
#@ endif


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
