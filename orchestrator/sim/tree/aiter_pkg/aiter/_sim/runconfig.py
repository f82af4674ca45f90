"""aiter/utility/base_tuner.py's --run_config (simulated; a mixin of TunerCommon to keep that file short).

ROCm/aiter aiter/utility/base_tuner.py: TunerCommon.run's --run_config branch, run_config,
_set_config_env_for_run_config and _print_benchmark_results are the same at v0.1.13 (without the gfx filter),
v0.1.20 and the newest stored commit (3886b0a8); they follow those line for line. ``production`` models the
run_config the tuners override it with (their production ops, aiter/ops/gemm_op_<variant>.py, timed by perf_model).
"""

import importlib
import os

from .. import logger
from .frame import df_repr, norm, read_csv

# the tuners whose upstream file overrides run_config with their production operator, and the JIT modules
# that operator loads (rebuilt in every --run_config CSV call: AITER_REBUILD = 2):
#   a6w4: csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py GemmMixedMxfpTuner.run_config (610d1e8e), aiter.gemm_a6w4
#     -> aiter/ops/gemm_op_a6w4.py quant (module_quant) + module_gemm_a6w4_asm (2df7776a); a4w6: the same shared
#     run_config, aiter.gemm_a4w6 -> aiter/ops/gemm_op_a4w6.py module_gemm_a4w6_asm (its @compile_ops in the index)
#   a16w8_mxfp8: csrc/gemm_a16w8_mxfp8/gemm_a16w8_mxfp8_tune.py run_config (59663079), aiter.gemm_a16w8_mxfp8_asm
#     -> aiter/ops/gemm_op_a16w8_mxfp8.py module_gemm_a16w8_mxfp8_asm
# Both pass kernelName = the default selector's kernel when --run_config has no CSV (args.run_config is True),
# and nothing (the op reads AITER_CONFIG_*, now the CSV) with one.
PRODUCTION_OPS = {
    "a6w4": ("module_quant", "module_gemm_a6w4_asm"),
    "a4w6": ("module_quant", "module_gemm_a4w6_asm"),
    "a16w8_mxfp8": ("module_gemm_a16w8_mxfp8_asm",),
}

# the production op of each (aiter/ops/gemm_op_<variant>.py) and its default selector (M, N, K) -> kernelName
_PRODUCTION_CALLS = {"a6w4": ("gemm_a6w4", "_default_gemm_a6w4_kernel"),
                     "a4w6": ("gemm_a4w6", "_default_gemm_a4w6_kernel"),
                     "a16w8_mxfp8": ("gemm_a16w8_mxfp8_asm", "_mx_default_kernel")}


class RunConfig:
    def _run_config_main(self, args):
        self.pre_process(args)
        # --run_config <tuned_csv> -> tuned kernels using that config file; --run_config -> default kernels
        run_config_file = args.run_config if isinstance(args.run_config, str) else None
        if args.run_config and run_config_file:
            cols, rows = read_csv(run_config_file)
            if not cols:
                print(f"Not exist tuned file: {run_config_file}", flush=True)
            if rows and self.keys[0] in cols:
                gfx, cu = self.get_gfx(), self.get_cu_num()
                if "gfx" in cols:
                    rows = [r for r in rows if str(r.get("gfx")) == str(gfx)]
                if "cu_num" in cols:
                    rows = [r for r in rows if norm(r.get("cu_num")) == cu]
                seen, shapes = set(), []
                for r in rows:                      # drop_duplicates(subset=self.keys): the first row stays
                    k = self._key_of(r)
                    if k not in seen:
                        seen.add(k)
                        shapes.append({c: norm(r[c]) for c in self.keys})
                self.untunedf = shapes
        print(df_repr(self.keys, self.untunedf), flush=True)
        if not self.untunedf:
            logger.info("No shapes to benchmark, nothing to run")
            return
        if run_config_file:
            env_name, old_val = self._set_config_env_for_run_config(args, run_config_file)
            try:
                print("=== Running production operator benchmark (tuned) ===", flush=True)
                results = self.run_config(args)
                self._print_benchmark_results("Benchmark (tuned)", results)
            finally:
                if env_name:
                    if old_val is None:
                        os.environ.pop(env_name, None)
                    else:
                        os.environ[env_name] = old_val
        else:
            print("=== Running production operator benchmark (default) ===", flush=True)
            results = self.run_config(args)
            self._print_benchmark_results("Benchmark (default)", results)

    def run_config(self, args):
        """The base class's: a tuner that does not override it benchmarks nothing."""
        if self.sim_variant in PRODUCTION_OPS:
            return self.production(args)
        logger.info(f"run_config not implemented for {self.name}, skipping benchmark")
        return []

    def production(self, args):
        """The override's loop: each shape of untunedf timed through the production operator (status ok:
        the simulated output always matches its reference), which goes through its runtime's own lookup
        (ops/gemm_op_<variant>.py: a6w4 / a4w6 exact, then padded; a16w8_mxfp8 its M bucket; their lines with
        AITER_LOG_TUNED_CONFIG) of AITER_CONFIG_*, the CSV given; without one the default selector's kernelName."""
        from ..jit.core import get_module
        variant = self.sim_variant
        for md in PRODUCTION_OPS[variant]:
            get_module(md)
        op, default = _PRODUCTION_CALLS[variant]
        mod = importlib.import_module("aiter.ops.gemm_op_" + variant)
        results = []
        for row in self.untunedf:
            M, N, K = int(row["M"]), int(row["N"]), int(row["K"])
            kn = getattr(mod, default)(M, N, K) if args.run_config is True else None
            results.append({"shape": f"({M}, {N}, {K})", "e2e_us": getattr(mod, op)(M, N, K, kernelName=kn),
                            "status": "ok"})
        return results

    def _set_config_env_for_run_config(self, args, config_file):
        """The config env var -> config_file, AITER_REBUILD = 2 (rm .so only), every module rebuilt on its
        next load (rebuilded_list = ["module_aiter_enum"], the loaded modules cleared)."""
        env_name = self.ARG_DEFAULTS.get("config_env_name")
        if not env_name:
            return None, None
        old_val = os.environ.get(env_name)
        os.environ[env_name] = config_file
        logger.info(f"Setting {env_name}={config_file} for benchmark")
        from ..jit import core as jit_core
        jit_core.AITER_REBUILD = 2
        jit_core.rebuilded_list[:] = ["module_aiter_enum"]
        jit_core._loaded.clear()
        return env_name, old_val

    def _print_benchmark_results(self, label, results):
        if not results:
            print(f"{label}: no results", flush=True)
            return
        lines = [f"============= {label} Benchmark Results ============="]
        has_kernel_us = any(r.get("kernel_us") is not None for r in results)
        if has_kernel_us:
            header = f"{'Shape':<40} | {'Kernel(us)':>10} | {'E2E(us)':>10} | {'Status':>8}"
        else:
            header = f"{'Shape':<40} | {'E2E(us)':>10} | {'Status':>8}"
        lines.append(header)
        lines.append("-" * len(header))
        failed = []
        for row, r in zip(self.untunedf, results):      # _benchmark_results_to_df: matched by row order
            status = str(r.get("status", "unknown"))
            summary, detail = ("OK", "") if status == "ok" else \
                ("ERROR", status[len("error:"):].strip()) if status.startswith("error:") else \
                ("MISMATCH", status[len("mismatch"):].lstrip(":").strip() or "output mismatch vs reference") \
                if status.startswith("mismatch") else (status.upper(), "")
            e2e = r.get("e2e_us", -1)
            e2e_str = f"{e2e:.2f}" if e2e > 0 else "N/A"
            shape = r.get("shape", "unknown")
            if has_kernel_us:
                k = r.get("kernel_us")
                k_str = f"{k:.2f}" if k is not None and k > 0 else "N/A"
                lines.append(f"{shape:<40} | {k_str:>10} | {e2e_str:>10} | {summary:>8}")
            else:
                lines.append(f"{shape:<40} | {e2e_str:>10} | {summary:>8}")
            lines.append("keys: " + ", ".join(f"{c}={row.get(c, '')}" for c in self.keys))
            if detail:
                lines.append(f"reason: {detail}")
            if summary in ("ERROR", "MISMATCH"):
                failed.append(row)
        if failed:
            untuned = [c for c in self.keys if c != "cu_num"]
            lines += ["", f"============= Repro CSV ({len(failed)} failed shapes) =============",
                      "Copy the lines below into a CSV file to reproduce:", ",".join(untuned)]
            lines += [",".join(str(r.get(c, "")) for c in untuned) for r in failed]
        for line in lines:
            print(line, flush=True)


