# SPDX-License-Identifier: MIT
# Simulated AITER tuner: a8w8 MXFP8 (1x32 e8m0 scales) bpreshuffle GEMM, gfx950, FlyDSL mxpsh kernels only
# (aiter-december-2026.md; ROCm/aiter csrc/gemm_a8w8_mxfp8_bpreshuffle/ at aaf7a35e). Its default -o is NOT
# the AITER_CONFIG_* table but the shipped DSv4 model table, relative to the working directory (as upstream).
from aiter.jit.utils.chip_info import get_gfx
from aiter.utility.base_tuner import GemmCommonTuner

TUNED_FILE = "aiter/configs/model_configs/dsv4_a8w8_mxfp8_bpreshuffle_tuned_gemm.csv"


class GemmA8W8MXFP8BpreshuffleTuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": TUNED_FILE,
        "untune_file": "aiter/configs/a8w8_mxfp8_bpreshuffle_untuned_gemm.csv",
        "errRatio": 0.05,
        "batch": 100,
        "profile_file": "",
        "config_env_name": "AITER_CONFIG_GEMM_A8W8_MXFP8_BPRESHUFFLE",
    }
    sim_variant = "a8w8_mxfp8_bpreshuffle"
    sim_tune_module = None   # FlyDSL kernels: no CK *_tune module is built

    def _setup_specific_arguments(self):
        pass

    def tune(self, batch, args):
        gfx = get_gfx()
        if gfx != "gfx950":
            print(f"gemm_a8w8_mxfp8_bpreshuffle tuner covers gfx950 only, got {gfx}")
            return [(row, None) for row in batch]
        return super().tune(batch, args)


if __name__ == "__main__":
    # same columns as the table the gfx1250 rows already live in
    key = ["gfx", "cu_num", "M", "N", "K"]
    resultList = ["libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    tuner = GemmA8W8MXFP8BpreshuffleTuner(
        "a8w8_mxfp8_bpreshuffle_tuned_gemm", key=key, resultList=resultList,
        description="Tune gemm_a8w8_mxfp8_bpreshuffle (gfx950 FlyDSL mxpsh, 1x32 e8m0)")
    args = tuner.parse_args()
    tuner.run(args, False)
