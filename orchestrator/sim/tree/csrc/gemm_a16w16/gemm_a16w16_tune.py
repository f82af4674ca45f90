# SPDX-License-Identifier: MIT
# Simulated AITER tuner: a16w16 (bf16) GEMM, the multi-backend tuner (csrc/gemm_a16w16 since v0.1.16;
# aiter-formats.md §1.2, aiter-late-2026.md §1). --libtype asm, flydsl, skinny, torch, triton, opus (default
# all); hipblaslt only with --with-hipblaslt. Its table says err_ratio and solidx, and spells booleans True/False.
import argparse
import os

from aiter.jit.core import AITER_CONFIG_GEMM_BF16
from aiter._sim import perf_model
from aiter.utility.base_tuner import GemmCommonTuner

ALL_LIBTYPES = ["all", "asm", "hipblaslt", "triton", "flydsl", "torch", "skinny", "opus"]
_BOOLS = ("bias", "scaleAB", "bpreshuffle")


def libtype_list(string):
    values = string.split(",")
    for value in values:
        if value not in ALL_LIBTYPES:
            raise argparse.ArgumentTypeError(f"Invalid libtype: {value}")
    return values


class GemmA16W16Tuner(GemmCommonTuner):
    ARG_DEFAULTS = {
        **GemmCommonTuner.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_GEMM_BF16}",
        "untune_file": "aiter/configs/bf16_untuned_gemm.csv",
        "errRatio": 0.05,
        "batch": 100,
        "profile_file": "",
        "config_env_name": "AITER_CONFIG_GEMM_BF16",
    }
    sim_variant = "a16w16"

    def _setup_specific_arguments(self):
        self.parser.add_argument("--tuned_file", type=str, default=os.getenv("GTUNE_TUNED", AITER_CONFIG_GEMM_BF16),
                                 dest="tune_file", help="output file for tuned gemm solutions")
        self.parser.add_argument("--input_file", type=str, default=os.getenv("GTUNE_INPUT", None),
                                 dest="untune_file", help="list of gemms to tune for, mutually exclusive with model_dir")
        self.parser.add_argument("--indtype", type=str, default=None, choices=["f32", "f16", "bf16", "fp8"],
                                 help="dtype override for all shapes")
        self.parser.add_argument("--outdtype", type=str, default=None, choices=["f32", "f16", "bf16", "fp8"],
                                 help="output dtype override")
        self.parser.add_argument("--all_bias", action="store_true", help="Tune for both bias and non-bias cases")
        self.parser.add_argument("--libtype", type=libtype_list, default=["all"], required=False,
                                 help="choose libtype to tune: all, asm, hipblaslt, triton, flydsl, torch, skinny, "
                                      "opus. hipblaslt requires --with-hipblaslt.")
        self.parser.add_argument("--with-hipblaslt", action="store_true", default=False, dest="with_hipblaslt",
                                 help="Include hipblaslt in tuning (disabled by default). hipblaslt tuning is also "
                                      "available standalone via gradlib/gradlib/gemm_tuner.py.")

    def get_untuned_list(self, untune_file):
        # pandas reads the True/False cells as booleans and writes them back so
        rows = super().get_untuned_list(untune_file)
        for r in rows:
            for c in _BOOLS:
                if c in r:
                    r[c] = bool(r[c])
        return rows

    def candidate_result(self, args, row):
        pool = [t for t in perf_model.A16W16_LIBTYPES if "all" in args.libtype or t in args.libtype]
        if args.with_hipblaslt and ("all" in args.libtype or "hipblaslt" in args.libtype):
            pool.append("hipblaslt")
        if not pool:
            return None
        res = perf_model.tune_result("a16w16", self._sim_shape(row), self.get_gfx(), self.get_cu_num(),
                                     libtypes=tuple(pool))
        if res is None:
            return None
        out = dict(res, solidx=res["kernelId"], err_ratio=res["errRatio"])
        if out["libtype"] != "asm":
            out["splitK"] = 0
        return {c: out.get(c) for c in self.resultList}

    def print_result(self, row):
        key_dict = {c: row[c] for c in self.keys}
        print(
            f"Tuning result for {str(key_dict).strip('{}')} is "
            f"libtype={row['libtype']} kernelId={row['solidx']} {row['kernelName']} "
            f"splitK={row['splitK']}, {row['us']}us, err_ratio={row['err_ratio']}, "
            f"tflops={row['tflops']} TFLOPS, bw={row['bw']} GB/s",
            flush=True,
        )


if __name__ == "__main__":
    key = ["gfx", "cu_num", "M", "N", "K", "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle"]
    resultList = ["libtype", "solidx", "splitK", "us", "kernelName", "err_ratio", "tflops", "bw"]
    tuner = GemmA16W16Tuner("GemmA16W16Tuner", key, resultList,
                            description="Tune a16w16 (bf16) GEMM across multiple backends")
    args = tuner.parse_args()
    tuner.run(args, False)
