# SPDX-License-Identifier: MIT
# Simulated AITER tuner: 2-stage fused MoE (FmoeTuner).
import os

from aiter import logger
from aiter._sim import LEGACY, flydsl_moe, perf_model
from aiter._sim.frame import norm, read_csv, write_csv, write_table
from aiter.jit.core import AITER_CONFIG_FMOE, AITER_ROOT_DIR
from aiter.utility.base_tuner import GFX_FROM_CU_NUM, TunerCommon


#@ if head
# Suffixes marking FlyDSL stage-1 kernels that fuse the intermediate quantization consumed by stage 2 (the
# objective of test_fmoe_tune_objective.py, 1c87c39f): every other stage-1 kernel is charged for its launch.
FUSED_INTERMEDIATE_SUFFIXES = flydsl_moe.FUSED_INTERMEDIATE_SUFFIXES


def add_intermediate_quant_cost(rows, suffix, us_by_block_m):
    """Charge non-fused stage-1 candidates (kernelName1 without ``suffix``) their block_m's quant+sort launch."""
    out = []
    for r in rows:
        r = dict(r)
        if not str(r.get("kernelName1", "")).endswith(suffix) and r.get("block_m") in us_by_block_m:
            r["us1"] = r["us1"] + us_by_block_m[r["block_m"]]
        out.append(r)
    return out


def select_fastest_stage_combination(rows):
    """The row with the shortest adjusted Stage1 + Stage2 latency, chosen before display rounding."""
    if not rows:
        raise ValueError("cannot select a stage combination from an empty frame")
    return min(rows, key=lambda r: r["us1"] + r["us2"])
#@ endif


class FmoeTuner(TunerCommon):
    ARG_DEFAULTS = {
        **TunerCommon.ARG_DEFAULTS,
        "tune_file": f"{AITER_CONFIG_FMOE}",
        "untune_file": f"{AITER_ROOT_DIR}/aiter/configs/untuned_fmoe.csv",
#@ if current
        "errRatio": 0.1,  # max accepted cosine_diff; 0.1 rejects broken kernels
#@ endif
#@ if legacy
        "errRatio": 0.5,
#@ endif
        "config_env_name": "AITER_CONFIG_FMOE",
    }
    sim_variant = "moe_2stages"
    sim_tune_module = "module_moe_ck2stages_tune"
    print_every_shape = True

    def _setup_specific_arguments(self):
        self.parser.add_argument(
            "--last", action="store_true",
            help="Only last kernel is tuned, if not, only kernels that are not in the tuned_fmoe.csv are tuned")
#@ if current
        self.parser.add_argument("--grouped-gemm", dest="grouped_gemm", action="store_true",
                                 help="tune grouped gemm MoE kernels (gfx1250 only)")
        self.parser.add_argument("--mxfp4-flydsl", dest="mxfp4_flydsl", action="store_true",
                                 help="tune mxfp4 flydsl kernels")

    def parse_args(self, argv=None):
        args = super().parse_args(argv)
        if args.grouped_gemm and self.get_gfx() != "gfx1250":
            raise SystemExit("--grouped-gemm is only supported on gfx1250")
        return args
#@ endif

    def pre_process(self, args):
        super().pre_process(args)
        if args.last:
            gfx, cu_num = self.get_gfx(), self.get_cu_num()
            shapes = self.get_untuned_list(args.untune_file)[-1:]
            self.untunedf = []
            for s in shapes:
                row = {c: (gfx if c == "gfx" else cu_num if c == "cu_num" else s[c]) for c in self.keys}
                self.untunedf.append(row)

    def candidate_result(self, args, row):
        if getattr(args, "mxfp4_flydsl", False):   # FlyDSL MXFP4 kernels, timed with the quant inline
            res = flydsl_moe.tune_result(self._sim_shape(row), self.get_gfx(), self.get_cu_num())
            return None if res is None else {c: res.get(c) for c in self.resultList}
        return super().candidate_result(args, row)

    def _objective(self, row, res):
        """The row the tuner keeps: us = us1 + us2; from v0.1.12 a non-fused stage-1 kernel of a per_1x32 row
        pays the quant launch stage 2 needs (printed as the real tuner does)."""
        shape = self._sim_shape(row)
        suffix = flydsl_moe.fused_suffix(shape)
        if res is None or suffix is None or LEGACY:
            return res
        bm = res["block_m"]
        us_qs = flydsl_moe.quant_launch_us(shape, bm)
        print(f"  quant_sort benchmark: blockM={bm}, us={us_qs}", flush=True)
#@ if head
        best = select_fastest_stage_combination(add_intermediate_quant_cost([res], suffix, {bm: us_qs}))
#@ endif
#@ if current !head
        best = dict(res)
        best["us_quant_sort"] = us_qs
        if not str(best.get("kernelName1", "")).endswith(suffix):
            best["us1"] = best["us1"] + best["us_quant_sort"]
        best.pop("us_quant_sort")
#@ endif
        out = flydsl_moe.charged(res, shape)
        assert round(best["us1"], 4) == out["us1"]
        return out

    def _line(self, row):
        return "[" + " ".join(str(row[c]) for c in self.keys if c not in ("gfx", "cu_num")) + "]"

    def _info_key(self, row):
        return "(" + ", ".join(repr(row[c]) for c in self.keys) + ")"

    def tune(self, batch, args):
        print(f"Distributing {len(batch)} task groups across {args.mp} GPUs", flush=True)
        results = []
        for row in batch:
            self._pace_and_faults(self._done_in_run)
            print("\nStart tuning", self._line(row), flush=True)
            ncand = perf_model.candidates(self.sim_variant)
            print(f"stage1 asm tasks is {ncand // 3}, tasks_ck is {ncand - ncand // 3}, task_1stage is 0", flush=True)
            res = self.candidate_result(args, row)
            if not getattr(args, "mxfp4_flydsl", False):
                res = self._objective(row, res)
            self._done_in_run += 1
            if res is None:
                print(f"\n[tune] {ncand} of {ncand} tasks failed:", flush=True)
                print(f"  task 0: stage1 moe_ck2stages_gemm1_256x32x64x128 blockM=32 -> crash/error", flush=True)
            else:
                print(f"\n[tune] all {ncand} tasks completed successfully", flush=True)
            results.append((row, res))
        return results

    def post_process(self, results, args):
        rows = super().post_process(results, args)
        for r in rows:
            key = tuple(r[c] for c in self.keys)
            best = (r["block_m"], r["kernelName1"], r["kernelName2"], r["err1"], r["err2"], r["run_1stage"])
            print(f"Tuning result for {key} is {best} {r['us']} us, {r['tflops']} TFLOPS, {r['bw']} GB/s",
                  flush=True)
        return rows

    def write_profile(self, results, profile_file):
        super().write_profile(results, profile_file)
        # FmoeTuner always appends every candidate to aiter/configs/profile_fmoe.csv
        path = f"{AITER_ROOT_DIR}/aiter/configs/profile_fmoe.csv"
        cols, old = read_csv(path)
        if not cols:
            cols = list(self.columns)
        rows = list(old)
        for row, res in results:
            r = dict(row)
            r.update(res or {"us": -1, "err1": "100.0%", "err2": "100.0%"})
            rows.append(r)
        write_csv(path, cols, rows, na_rep="Null")

    def result_to_csv(self, new_rows, output_file, concat=True):
        cols, old = read_csv(output_file)
#@ if current
        for r in old:
            if not r.get("gfx"):
                r["gfx"] = GFX_FROM_CU_NUM.get(norm(r.get("cu_num", 0)), self.get_gfx())
        old = [r for r in old if not r.get("_tag")]
        for c in ("xbf16", "flat", "run_1stage", "ksplit"):
            for r in old:
                if r.get(c, "") == "":
                    r[c] = 0
#@ endif
        keys = {self._key_of(r): r for r in new_rows}
        rows, used = [], set()
        for r in old:
            k = self._key_of(r)
            if k in keys:
                rows.append(keys[k])
                used.add(k)
            else:
                rows.append(r)
        rows += [r for r in new_rows if self._key_of(r) not in used]
        last = {}
        for i, r in enumerate(rows):
            last[self._key_of(r)] = i
        rows = [r for i, r in enumerate(rows) if last[self._key_of(r)] == i]
#@ if current
        out_cols = list(self.columns)
#@ endif
#@ if legacy
        out_cols = list(cols) if cols else list(self.columns)
        for c in self.columns:
            if c not in out_cols:
                out_cols.append(c)
#@ endif
        write_table(output_file, out_cols, rows, torn=self._torn_write_due())

    def sortResults(self, output_file, sort, keys):
        cols, rows = read_csv(output_file)
        if not cols or not sort:
            return
        super().sortResults(output_file, sort, keys)


if __name__ == "__main__":
#@ if current
    key = ["gfx", "cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
           "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1"]
    resultList = ["block_m", "ksplit", "us1", "kernelName1", "err1", "us2", "kernelName2", "err2", "us",
                  "run_1stage", "xbf16", "flat", "tflops", "bw"]
#@ endif
#@ if legacy
    key = ["cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
           "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1"]
    resultList = ["block_m", "ksplit", "us1", "kernelName1", "err1", "us2", "kernelName2", "err2", "us",
                  "run_1stage", "tflops", "bw"]
#@ endif
    tuner = FmoeTuner("fmoeTuner", key=key, resultList=resultList, description="fused moe 2-stage tuner")
    args = tuner.parse_args()
    tuner.run(args, False)
