# SPDX-License-Identifier: MIT
# Simulated AITER tuner: A6W6 (MXFP6) GEMM, gfx950 only (ROCm/aiter #4859, after v0.1.20;
# aiter-after-v0.1.20.md §3). ASM candidates from hsa/gfx950/f6gemm/f6gemm_bf16_per1x32Fp6.csv.
from aiter.jit.core import AITER_CONFIG_GEMM_A6W6
from aiter.jit.utils.chip_info import get_gfx
from aiter.utility.base_tuner import GemmCommonTuner


class GemmA6W6Tuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_GEMM_A6W6}",
        "untune_file": "aiter/configs/a6w6_blockscale_untuned_gemm.csv",
        "config_env_name": "AITER_CONFIG_GEMM_A6W6",
    }
    sim_variant = "a6w6"
    sim_tune_module = "module_gemm_a6w6_tune"

    def _setup_specific_arguments(self):
        self.parser.add_argument(
            "--min-gain-pct", dest="min_gain_pct", type=float, default=0.5,
            help="Keep a non-default kernel only when paired validation beats the safe default by at "
                 "least this percentage and every pair wins")
        self.parser.add_argument("--gain-guard-warmup", dest="gain_guard_warmup", type=int, default=50)
        self.parser.add_argument("--gain-guard-iters", dest="gain_guard_iters", type=int, default=300)
        self.parser.add_argument("--gain-guard-reps", dest="gain_guard_reps", type=int, default=7)
        self.parser.add_argument("--disable-gain-guard", dest="disable_gain_guard", action="store_true")

    def tune(self, batch, args):
        if get_gfx() not in ["gfx950"]:
            print(f"tuning is not supported in this chip {get_gfx()}")
            return [(row, None) for row in batch]
        return super().tune(batch, args)


if __name__ == "__main__":
    key = ["gfx", "cu_num", "M", "N", "K"]
    resultList = ["kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    tuner = GemmA6W6Tuner("GemmA6W6Tuner", key=key, resultList=resultList,
                          description="gen API for asm gemm a6w6 (MXFP6) kernel")
    args = tuner.parse_args()
    tuner.run(args, False)
