# SPDX-License-Identifier: MIT
# Simulated AITER shared tuner of the gfx950 mixed-MXFP asm GEMMs A6W4 and A4W6 (ROCm/aiter 610d1e8e,
# csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py): no __main__; the entry points csrc/gemm_a6w4/gemm_a6w4_tune.py
# and csrc/gemm_a4w6/gemm_a4w6_tune.py call run_tuner(family). As upstream: one _FAMILY_SPECS entry per family
# (display name, tuned/untuned defaults, config variable), key gfx,cu_num,M,N,K; tune() raises with -k
# ("<A6W4|A4W6> does not support split-K") and on another gfx; a candidate that does not beat the safe default
# kernel by --min-gain-pct in the paired validation is replaced by the default kernel's row ("[gain-guard] ...
# action=FALLBACK"; here where the model's tuned kernel is no faster than the default).
import os

from aiter._sim import perf_model
from aiter.jit.core import AITER_CONFIG_DIR
from aiter.jit.utils.chip_info import get_cu_num, get_gfx
from aiter.utility.base_tuner import GemmCommonTuner

# upstream 610d1e8e _FAMILY_SPECS (tune_file = aiter.jit.core's AITER_CONFIG_GEMM_<FAMILY>_ASM); the safe
# default kernel's name shape is its README's s0 (the manifests' knl_name are mangled _ZN5aiter<n>...E)
_FAMILY_SPECS = {
    "a6w4": {"display_name": "A6W4", "config_env_name": "AITER_CONFIG_GEMM_A6W4_ASM",
             "tune_file": "a6w4_asm_tuned_gemm.csv", "untune_file": "aiter/configs/a6w4_asm_untuned_gemm.csv",
             "default_kernel": "f6f4gemm_bf16_per1x32Fp6Fp4_256x256_s0"},
    "a4w6": {"display_name": "A4W6", "config_env_name": "AITER_CONFIG_GEMM_A4W6_ASM",
             "tune_file": "a4w6_asm_tuned_gemm.csv", "untune_file": "aiter/configs/a4w6_asm_untuned_gemm.csv",
             "default_kernel": "f4f6gemm_bf16_per1x32Fp4Fp6_256x256_s0"},
}
KEY = ["gfx", "cu_num", "M", "N", "K"]
RESULTS = ["kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]


def _get_spec(family):
    try:
        return _FAMILY_SPECS[family.lower()]
    except KeyError as error:
        raise ValueError(f"unsupported mixed MXFP family {family!r}; "
                         f"expected one of {sorted(_FAMILY_SPECS)}") from error


class GemmMixedMxfpTuner(GemmCommonTuner):
    sim_tune_module = None    # prebuilt .co kernels of hsa/gfx950/f6f4gemm | f4f6gemm

    def __init__(self, family, name, description=None):
        self.family = family.lower()
        self.spec = _get_spec(self.family)
        self.sim_variant = self.family
        env = self.spec["config_env_name"]
        self.ARG_DEFAULTS = {
            **GemmCommonTuner.ARG_DEFAULTS,
            "tune_file": os.getenv(env, f"{AITER_CONFIG_DIR}/{self.spec['tune_file']}"),
            "untune_file": self.spec["untune_file"],
            "config_env_name": env,
        }
        super().__init__(name, key=KEY, resultList=RESULTS, description=description)

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
        name = self.spec["display_name"]
        if args.splitK:
            raise ValueError(f"{name} does not support split-K")
        if get_gfx() != "gfx950":
            raise RuntimeError(f"{name} tuning requires gfx950, got {get_gfx()}")
        return super().tune(batch, args)

    def post_process(self, results, args):
        guarded, default = [], self.spec["default_kernel"]
        for row, res in results:
            shape = self._sim_shape(row)
            if res is not None and not args.disable_gain_guard and \
                    perf_model.outcome(self.sim_variant, shape, get_gfx(), get_cu_num()) == "regressed":
                us = round(perf_model.default_us(self.sim_variant, shape, get_gfx(), get_cu_num()), 4)
                print(f"[gain-guard] family={self.spec['display_name']} M={row['M']} N={row['N']} K={row['K']} "
                      f"candidate={res.get('kernelName')} gain=-0.500% threshold={args.min_gain_pct:.3f}% "
                      f"all_pairs_win=False action=FALLBACK selected={default}", flush=True)
                res = dict(res, kernelId=0, kernelName=default, splitK=0, us=us, errRatio=0.0)
            guarded.append((row, res))
        return super().post_process(guarded, args)


def run_tuner(family):
    spec = _get_spec(family)
    tuner = GemmMixedMxfpTuner(family, f"Gemm{spec['display_name']}Tuner",
                               description=f"Tune gfx950 {spec['display_name']} mixed MXFP assembly kernels")
    tuner.run(tuner.parse_args(), False)
