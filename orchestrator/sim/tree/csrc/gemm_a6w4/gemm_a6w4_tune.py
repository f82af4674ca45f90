# SPDX-License-Identifier: MIT
# Simulated AITER tuner: A6W4 mixed MXFP6/MXFP4 asm GEMM, gfx950 only (ROCm/aiter 610d1e8e: this entry point
# calls run_tuner("a6w4") of csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py; aiter-december-2026.md). As upstream:
# tune() raises with -k ("does not support split-K") and on another gfx; a candidate that does not beat the
# safe default kernel by --min-gain-pct in the paired validation is replaced by the default kernel's row
# ("[gain-guard] ... action=FALLBACK"; here where the model's tuned kernel is no faster than the default).
import os

from aiter._sim import perf_model
from aiter.jit.core import AITER_CONFIG_DIR
from aiter.jit.utils.chip_info import get_cu_num, get_gfx
from aiter.utility.base_tuner import GemmCommonTuner

DEFAULT_KERNEL = "f6f4gemm_bf16_per1x32Fp6Fp4_256x256_s0"   # the safe default (name shape: its README's s0)


class GemmA6W4Tuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": os.getenv("AITER_CONFIG_GEMM_A6W4_ASM", f"{AITER_CONFIG_DIR}/a6w4_asm_tuned_gemm.csv"),
        "untune_file": "aiter/configs/a6w4_asm_untuned_gemm.csv",
        "config_env_name": "AITER_CONFIG_GEMM_A6W4_ASM",
    }
    sim_variant = "a6w4"
    sim_tune_module = None    # prebuilt .co kernels of hsa/gfx950/f6f4gemm

    def _setup_specific_arguments(self):
        self.parser.add_argument("--min-gain-pct", dest="min_gain_pct", type=float, default=0.5,
                                 help="Keep a non-default kernel only when paired validation beats the safe "
                                      "default by at least this percentage and every pair wins.")
        self.parser.add_argument("--gain-guard-warmup", dest="gain_guard_warmup", type=int, default=50)
        self.parser.add_argument("--gain-guard-iters", dest="gain_guard_iters", type=int, default=300)
        self.parser.add_argument("--gain-guard-reps", dest="gain_guard_reps", type=int, default=7)
        self.parser.add_argument("--disable-gain-guard", dest="disable_gain_guard", action="store_true",
                                 help="Disable paired validation against the safe default.")

    def tune(self, batch, args):
        if args.splitK:
            raise ValueError("A6W4 does not support split-K")
        if get_gfx() != "gfx950":
            raise RuntimeError(f"A6W4 tuning requires gfx950, got {get_gfx()}")
        return super().tune(batch, args)

    def post_process(self, results, args):
        guarded = []
        for row, res in results:
            shape = self._sim_shape(row)
            if res is not None and not args.disable_gain_guard and \
                    perf_model.outcome(self.sim_variant, shape, get_gfx(), get_cu_num()) == "regressed":
                us = round(perf_model.default_us(self.sim_variant, shape, get_gfx(), get_cu_num()), 4)
                print(f"[gain-guard] family=A6W4 M={row['M']} N={row['N']} K={row['K']} "
                      f"candidate={res.get('kernelName')} gain=-0.500% threshold={args.min_gain_pct:.3f}% "
                      f"all_pairs_win=False action=FALLBACK selected={DEFAULT_KERNEL}", flush=True)
                res = dict(res, kernelId=0, kernelName=DEFAULT_KERNEL, splitK=0, us=us, errRatio=0.0)
            guarded.append((row, res))
        return super().post_process(guarded, args)


if __name__ == "__main__":
    key = ["gfx", "cu_num", "M", "N", "K"]
    resultList = ["kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
    tuner = GemmA6W4Tuner("GemmA6W4Tuner", key=key, resultList=resultList,
                          description="Tune gfx950 A6W4 mixed MXFP assembly kernels")
    tuner.run(tuner.parse_args(), False)
