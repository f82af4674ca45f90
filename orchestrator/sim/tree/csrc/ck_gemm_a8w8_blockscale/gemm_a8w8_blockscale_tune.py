# SPDX-License-Identifier: MIT
# Simulated AITER tuner: CK a8w8 block-scale GEMM (and, with --preshuffle, its B-preshuffle form).
#@ if current
from aiter.jit.core import AITER_CONFIG_GEMM_A8W8_BLOCKSCALE, AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE
#@ endif
#@ if legacy
from aiter.jit.core import AITER_CONFIG_GEMM_A8W8_BLOCKSCALE
#@ endif
from aiter.utility.base_tuner import GemmCommonTuner

BLOCK_PER_CU_MAX = 4


class GemmA8W8BlockScaleTuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_GEMM_A8W8_BLOCKSCALE}",
        "untune_file": "aiter/configs/a8w8_blockscale_untuned_gemm.csv",
        "config_env_name": "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE",
    }
    sim_variant = "a8w8_blockscale"
    sim_tune_module = "module_gemm_a8w8_blockscale_tune"

    def _setup_specific_arguments(self):
#@ if current
        self.parser.add_argument(
            "--libtype", type=str, default="all", choices=["ck", "cktile", "asm", "opus", "all", "both"],
            required=False,
            help="CK gemm a8w8 blockscale type to tune: ck, cktile, asm, opus, both or all (covers all "
                 "supported backends across standard/preshuffleB modes)")
        self.parser.add_argument("--preshuffle", action="store_true",
                                 help="Enable B-matrix preshuffle for CK gemm a8w8 blockscale")
        self.parser.add_argument("--blockPerCu", nargs="+", type=int,
                                 default=list(range(1, BLOCK_PER_CU_MAX + 1)),
                                 help="List of BlockPerCu values to tune (CKTile only)")
#@ endif
#@ if legacy
        self.parser.add_argument(
            "--libtype", type=str, default="both", choices=["ck", "cktile", "both"], required=False,
            help="CK gemm a8w8 blockscale type to tune: ck, cktile or both")
#@ endif

#@ if current
    def variant(self, args):
        return "a8w8_blockscale_bpreshuffle" if args.preshuffle else "a8w8_blockscale"

    def tune_module(self, args):
        return "module_gemm_a8w8_blockscale_bpreshuffle_tune" if args.preshuffle else self.sim_tune_module

    def run(self, args, fast_mode=False):
        if args.preshuffle:
            # switched after argparse filled args.tune_file / args.untune_file (pass -i/-o explicitly)
            self.ARG_DEFAULTS["config_env_name"] = "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE"
            self.ARG_DEFAULTS["tune_file"] = f"{AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE}"
        return super().run(args, fast_mode)
#@ endif


if __name__ == "__main__":
#@ if current
    key = ["gfx", "cu_num", "M", "N", "K"]
#@ endif
#@ if legacy
    key = ["cu_num", "M", "N", "K"]
#@ endif
    resultList = ["libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    tuner = GemmA8W8BlockScaleTuner("GemmA8W8BlockScaleTuner", key=key, resultList=resultList,
                                    description="gen API for CK gemm a8w8 blockscale kernel")
    args = tuner.parse_args()
    tuner.run(args, False)
