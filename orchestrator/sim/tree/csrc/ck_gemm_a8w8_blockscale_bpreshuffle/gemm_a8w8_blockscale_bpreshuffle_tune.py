# SPDX-License-Identifier: MIT
# Simulated AITER tuner: CK a8w8 block-scale GEMM with B preshuffle (own script up to v0.1.11).
import os

from aiter.jit.core import AITER_CONFIG_DIR
from aiter.utility.base_tuner import GemmCommonTuner

AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE = os.getenv(
    "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE", f"{AITER_CONFIG_DIR}/a8w8_blockscale_bpreshuffle_tuned_gemm.csv")


class GemmA8W8BlockScaleBpreShuffleTuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE}",
        "untune_file": "aiter/configs/a8w8_blockscale_bpreshuffle_untuned_gemm.csv",
        "config_env_name": "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE",
    }
    sim_variant = "a8w8_blockscale_bpreshuffle"
    sim_tune_module = "module_gemm_a8w8_blockscale_bpreshuffle_tune"

    def _setup_specific_arguments(self):
        self.parser.add_argument(
            "--libtype", type=str, default="both", choices=["ck", "cktile", "both"], required=False,
            help="CK gemm a8w8 blockscale bpreshuffle type to tune: ck, cktile or both")


if __name__ == "__main__":
    key = ["cu_num", "M", "N", "K"]
    resultList = ["libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    tuner = GemmA8W8BlockScaleBpreShuffleTuner(
        "GemmA8W8BlockScaleBpreShuffleTuner", key=key, resultList=resultList,
        description="gen API for CK gemm a8w8 blockscale bpreshuffle kernel")
    args = tuner.parse_args()
    tuner.run(args, False)
