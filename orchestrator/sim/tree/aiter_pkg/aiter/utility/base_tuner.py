"""aiter/utility/base_tuner.py (simulated): the tuner framework every tune script uses.

CLI, printed lines, CSV writing, skip logic and exit codes follow the real base_tuner / mp_tuner
(see the orchestrator's reference notes); kernel timings come from aiter/_sim/perf_model.py.
Fault injection and pacing come from <target>/sim/control.json, re-read before every shape.
"""

import argparse
import math
import os
import sys
import time

import torch

from .. import logger
from .._sim import LEGACY, clear_fault, read_control, record_launch, record_stall
from .._sim import perf_model
from .._sim.frame import df_repr, norm, read_csv, sort_value, write_csv, write_table
from .._sim.runconfig import RunConfig     # --run_config (v0.1.13+: the flag is only parsed #@ if current)
from ..jit.core import get_module
from ..jit.utils.chip_info import get_gfx
from . import dtypes

GFX_FROM_CU_NUM = {256: "gfx950", 80: "gfx942", 304: "gfx942"}


def _fmt_key_value(col, v):
    """How a key value prints inside a tuple: strings quoted, eval()ed dtypes/enums bare."""
    if col in ("q_dtype_w", "q_dtype_a", "dtype", "act_type", "q_type") and isinstance(v, str):
        return v
    return repr(v)


class TunerCommon(RunConfig):
    ARG_DEFAULTS = {
        "verbose": False,
        "tune_file": "",
        "untune_file": "",
        "errRatio": 0.05,
        "batch": 100,
        "profile_file": "",
#@ if current
        "timeout": 1800,
#@ endif
#@ if legacy
        "timeout": None,
#@ endif
        "warmup": 5,
        "iters": 101,
        "min_improvement_pct": 3.0,
        "config_env_name": "",
    }
    sim_variant = None
    sim_tune_module = None

    def __init__(self, name, key, resultList, description=None):
        self.name = name
        self.keys = list(key)
        self.resultList = list(resultList)
        self.columns = self.keys + self.resultList
        self.parser = argparse.ArgumentParser(description=description)
        self.topk = 1
        self.success = []
        self.failed = []
        self.remain_untuned = []
        self.untunedf = []
        self._setup_common_arguments()
        self._setup_specific_arguments()

    # ------------------------------------------------------------------------------ argparse
    def _setup_specific_arguments(self):
        pass

    def _setup_common_arguments(self):
        defaults = self.ARG_DEFAULTS
        self.parser.add_argument("--verbose", "-v", action="store_true", help="more info")
        self.parser.add_argument("-i", "--untune_file", default=defaults["untune_file"], dest="untune_file",
                                 required=False, help="input")
        self.parser.add_argument("-o", "--tune_file", default=defaults["tune_file"], dest="tune_file",
                                 required=False, help="output: tuning result store this file")
        self.parser.add_argument("--mp", type=int, default=torch.cuda.device_count(),
                                 help="Tuning on multiple GPUs using multiple processes")
        self.parser.add_argument("-k", "--splitK", action="store_true", required=False,
                                 help="Use splitK kernels")
#@ if current
        self.parser.add_argument(
            "--shape_grouped", action="store_true", default=False,
            help="Group all kernel candidates for the same shape onto one GPU to eliminate cross-GPU timing "
                 "variance (also saves generate_data calls)")
#@ endif
        self.parser.add_argument("--sort", type=dtypes.str2bool, default=defaults.get("sort", False),
                                 help="Arranged according to the keys (True/False)")
        self.parser.add_argument("--errRatio", type=float, default=defaults["errRatio"],
                                 help=f"Tolerable error ratio (default {defaults['errRatio']})")
        self.parser.add_argument("--batch", type=int, default=defaults["batch"],
                                 help="split untuned shapes to batches to tune")
        self.parser.add_argument(
            "--all", action="store_true",
            help="retune all shapes in tune_file if tune file and untune file are the same, or retune shapes "
                 "in untune file if tune file and untune file are different")
        self.parser.add_argument("-o2", "--profile_file", default=defaults["profile_file"], required=False,
                                 help="output: all tuning results stored in this file")
        self.parser.add_argument("--warmup", type=int, default=defaults["warmup"],
                                 help="warmup iterations for profiling")
        self.parser.add_argument("--iters", type=int, default=defaults["iters"],
                                 help="iterations for profiling")
#@ if !newest
        self.parser.add_argument("--timeout", type=int, default=defaults["timeout"],
                                 help="per-task watchdog in seconds; None means no timeout")
#@ endif
#@ if newest
        # ROCm/aiter #4410: the watchdog starts when a task begins executing, not at submission
        self.parser.add_argument("--timeout", type=int, default=defaults["timeout"],
                                 help="per-task watchdog in seconds, counted from task start; "
                                      "None means no timeout")
#@ endif
#@ if current
        self.parser.add_argument("--run_config", nargs="?", const=True, default=False, metavar="TUNED_CSV",
                                 help="benchmark the production operator with a tuned CSV, no tuning")
        self.parser.add_argument("--compare", action="store_true",
                                 help="benchmark before and after tuning and report the speedup")
        self.parser.add_argument("--update_improved", action="store_true",
                                 help="with --compare: write only shapes that improved into the tuned file")
        self.parser.add_argument("--min_improvement_pct", dest="min_improvement_pct", type=float,
                                 default=defaults["min_improvement_pct"],
                                 help="only write shapes improved by >= N%%")
#@ endif

    def parse_args(self, argv=None):
        args = self.parser.parse_args(argv)
#@ if current
        if args.update_improved and not args.compare:
            self.parser.error("--update_improved requires --compare")
#@ endif
        return args

    # ------------------------------------------------------------------------------ environment
    def get_gfx(self):
        return get_gfx()

    def get_cu_num(self):
        gpu = torch.cuda.current_device()
        return torch.cuda.get_device_properties(gpu).multi_processor_count

    def variant(self, args):
        return self.sim_variant

    def tune_module(self, args):
        return self.sim_tune_module

    # ------------------------------------------------------------------------------ CSV helpers
    def get_out_file(self, tune_file):
        return tune_file.split(os.pathsep)[0]

    def _key_of(self, row):
        return tuple(norm(row.get(c, "")) for c in self.keys)

    def _typed(self, row):
        out = {}
        for c, v in row.items():
            n = norm(v)
            out[c] = n if not isinstance(n, float) or c not in self.keys else n
        return out

    def read_tuned(self, tune_file):
        """Tuned rows of every path in -o (os.pathsep list), gfx backfilled from cu_num."""
        cols, rows = [], []
        for p in [p for p in tune_file.split(os.pathsep) if p]:
            c, r = read_csv(p)
            for col in c:
                if col not in cols:
                    cols.append(col)
            rows.extend(r)
        if not LEGACY and "gfx" in self.keys:
            for r in rows:
                if not r.get("gfx"):
                    r["gfx"] = GFX_FROM_CU_NUM.get(norm(r.get("cu_num", 0)), self.get_gfx())
        return cols, rows

    def get_untuned_list(self, untune_file):
        cols, rows = read_csv(untune_file)
        shape_cols = [c for c in self.keys if c not in ("gfx", "cu_num")]
        missing = [c for c in shape_cols if c not in cols]
        if rows and missing:
            raise KeyError(f"{missing} not in index")
        out, seen = [], set()
        for r in rows:
            t = tuple((c, norm(r.get(c, ""))) for c in cols)
            if t in seen:
                continue
            seen.add(t)
            out.append({c: norm(r.get(c, "")) for c in shape_cols})
        return out

    # ------------------------------------------------------------------------------ skip logic
    def pre_process(self, args):
        gfx, cu_num = self.get_gfx(), self.get_cu_num()
        shapes = self.get_untuned_list(args.untune_file)
        untuned = []
        for s in shapes:
            row = {}
            for c in self.keys:
                row[c] = gfx if c == "gfx" else cu_num if c == "cu_num" else s[c]
            untuned.append(row)
        self.tune_cols, tuned = self.read_tuned(args.tune_file)
        tuned_keys = set(self._key_of(r) for r in tuned if all(c in r for c in self.keys))
        if args.all:
            if os.path.abspath(args.untune_file) == os.path.abspath(self.get_out_file(args.tune_file)):
                untuned = [r for r in untuned if True]
            mask = [self._key_of(r) in tuned_keys for r in untuned]
            if args.verbose:
                logger.info(f"retuning {sum(mask)} shapes")
            self.untunedf = untuned
            return
        mask = [self._key_of(r) in tuned_keys for r in untuned]
        if args.verbose:
            logger.info("skiped tuned shapes:")
            print(df_repr(self.keys, [r for r, m in zip(untuned, mask) if m]))
        self.untunedf = [r for r, m in zip(untuned, mask) if not m]

    # ------------------------------------------------------------------------------ one batch
    def _sim_shape(self, row):
        return {c.lower(): row[c] for c in self.keys if c not in ("gfx", "cu_num")}

    def _info_key(self, row):
        return "(" + ", ".join(_fmt_key_value(c, row[c]) for c in self.keys) + ")"

    def _pace_and_faults(self, done_in_run):
        ctl = read_control()
        crash = ctl.get("crash_after_shapes")
        hang = ctl.get("hang_after_shapes")
        if crash is not None and done_in_run >= int(crash):
            if ctl.get("fault_once"):
                clear_fault("crash_after_shapes")
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(2, b"Memory access fault by GPU node-2 (Agent handle: 0x2381c400) on address "
                        b"0x79eaf1a00000. Reason: Unknown.\n")
            os._exit(139)
        if hang is not None and done_in_run >= int(hang):
            if ctl.get("fault_once"):
                clear_fault("hang_after_shapes")
            sys.stdout.flush()
            sys.stderr.flush()
            record_stall(done_in_run)
            while True:
                time.sleep(3600)
        secs = float(ctl.get("seconds_per_shape") or 0.0)
        if secs > 0:
            time.sleep(secs)

    def _torn_write_due(self):
        """control torn_write_after_shapes=N: the table rewrite after N shapes of this run stops half way."""
        n = read_control().get("torn_write_after_shapes")
        if n is None or self._done_in_run < int(n):
            return False
        if read_control().get("fault_once"):
            clear_fault("torn_write_after_shapes")
        return True

    def candidate_result(self, args, row):
        """Best candidate for one shape (dict of result columns) or None = no valid kernel."""
        variant = self.variant(args)
        res = perf_model.tune_result(variant, self._sim_shape(row), self.get_gfx(), self.get_cu_num())
        if res is None:
            return None
        res = dict(res)
        # CK/CK-Tile split-K candidates are tried only with -k (aiter-formats.md §1.1); the blockscale
        # bpreshuffle tuner hard-codes maxsplitK = 0 (after-v0.1.20 §2.2, #4448); ASM rows carry their own value
        if res.get("libtype", "ck") != "asm" and (not getattr(args, "splitK", False)
                                                   or perf_model.facts(variant)["splitk"] == "never"):
            res["splitK"] = 0
        return {c: res.get(c) for c in self.resultList}

    def tune(self, batch, args):
        """mp_tuner: distribute the batch's candidates over --mp GPUs and time them."""
        if torch.cuda.device_count() < args.mp:     # a worker per GPU id 0..mp-1 calls set_device(id)
            raise RuntimeError("HIP error: invalid device ordinal (--mp %d, %d device(s) visible with "
                               "HIP_VISIBLE_DEVICES=%s)" % (args.mp, torch.cuda.device_count(),
                                                            os.environ.get("HIP_VISIBLE_DEVICES")))
        variant = self.variant(args)
        ncand = perf_model.candidates(variant)
        tasks = len(batch) * ncand
        grouped = getattr(args, "shape_grouped", False) or (args.mp == 1)
        groups = len(batch) if grouped else tasks
        if grouped and not LEGACY:
            print(f"[Task Grouping] Grouped {tasks} tasks into {groups} groups by info_keys", flush=True)
        print(f"Distributing {groups} task groups across {args.mp} GPUs", flush=True)
        timeout_msg = f"timeout={args.timeout}s each" if args.timeout else "no timeout limit"
        print(f"Waiting for {groups} tasks to complete ({timeout_msg})...", flush=True)
        results = []
        for n, row in enumerate(batch):
            self._pace_and_faults(self._done_in_run)
            res = self.candidate_result(args, row)
            self._done_in_run += 1
            if args.verbose:
                print(f"[Done] Task {n}/{len(batch) - 1} completed in 0.0s ({n + 1}/{len(batch)} done)",
                      flush=True)
            if res is None:
                print(f"run gpu func warning: info:{self._info_key(row)}\t Arguments not supported",
                      flush=True)
            results.append((row, res))
        return results

    def post_process(self, results, args):
        rows = []
        for row, res in results:
            if res is None:
                info_key = self._info_key(row)
                logger.error(
                    f"error: no valid candidate found for {info_key}, please check the result or errRatio in all result file running with --profile_file"
                )
                logger.info(f"No kernel can be used for {info_key}")
                self.failed.append(dict(row))
                continue
            out = dict(row)
            out.update(res)
            rows.append(out)
            self.success.append(out)
        return rows

    def print_result(self, row):
        key_dict = {c: row[c] for c in self.keys}
        kernelId, kernelName, splitK = row.get("kernelId"), row.get("kernelName"), row.get("splitK")
        time_us, err_ratio, tflops, bw = row.get("us"), row.get("errRatio"), row.get("tflops"), row.get("bw")
        print(
            f"Tuning result for {str(key_dict).strip('{}')} is kernelId={kernelId} {kernelName} {splitK=}, {time_us}us, {err_ratio=}, {tflops=} TFLOPS, {bw=} GB/s",
            flush=True,
        )

    def result_to_csv(self, new_rows, output_file, concat=True):
        cols, old = read_csv(output_file)
        if not cols:
            cols = list(self.columns)
        for c in self.columns:
            if c not in cols:
                cols.append(c)
        if concat:
            rows = old + new_rows
        else:
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
        write_table(output_file, cols, rows, na_rep="Null", torn=self._torn_write_due())

    def write_profile(self, results, profile_file):
        if not profile_file:
            return
        cols, old = read_csv(profile_file)
        if not cols:
            cols = list(self.columns)
        rows = list(old)
        for row, res in results:
            r = dict(row)
            if res is None:
                r.update({"us": -1, "errRatio": 1.0, "kernelName": "None"})
            else:
                r.update(res)
            rows.append(r)
        write_csv(profile_file, cols, rows, na_rep="Null")

    def sortResults(self, output_file, sort, keys):
        cols, rows = read_csv(output_file)
        if not cols:
            return
        if not LEGACY and "gfx" in self.keys and "gfx" not in cols:
            cols = ["gfx"] + cols
            for r in rows:
                r["gfx"] = GFX_FROM_CU_NUM.get(norm(r.get("cu_num", 0)), self.get_gfx())
        if sort:
            rows.sort(key=lambda r: tuple(sort_value(r.get(k, "")) for k in self.sort_keys()))
        last = {}
        for i, r in enumerate(rows):
            last[self._key_of(r)] = i
        rows = [r for i, r in enumerate(rows) if last[self._key_of(r)] == i]
        write_table(output_file, cols, rows)     # in place, as df.to_csv does (aiter-formats §1.4)

    def sort_keys(self):
        ks = list(self.keys)
        if "M" in ks and "N" in ks:
            i, j = ks.index("M"), ks.index("N")
            ks[i], ks[j] = ks[j], ks[i]
        return ks

    # ------------------------------------------------------------------------------ main flow
    def tune_summary(self, status, tuning_time):
        logger.info("============= Tuning results Summary: ==============")
        logger.info(
            f"Tuning {status}. tune {len(self.untunedf)} shapes, total tuning time is {tuning_time} seconds")
        logger.info("Successfully tuned shapes:")
        if self.success:
            print(df_repr(self.keys + ["us", self._name_col()], self.success), flush=True)
        logger.info("Failed shapes:")
        print(df_repr(self.keys, self.failed), flush=True)
        if self.remain_untuned:
            logger.info("untuned shapes:")
            print(df_repr(self.keys, self.remain_untuned), flush=True)
        if self.failed or self.remain_untuned:
            logger.error(
                "\033[91m[Tuning not Finished]\033[0m some shapes are not tuned or all failed, please check the result file or tune with --profile_file to get more details"
            )
            sys.stdout.flush()
            sys.exit(1)

    def _name_col(self):
        return "kernelName" if "kernelName" in self.resultList else "kernelName1"

    def run(self, args, fast_mode=False):
#@ if current
        if args.run_config:     # a benchmark (aiter/_sim/runconfig.py), not a tuning launch: not counted
            return self._run_config_main(args)
#@ endif
        record_launch(sys.argv[0], sys.argv[1:])
        self._done_in_run = 0
        md = self.tune_module(args)
        if md:
            get_module(md)
        self.pre_process(args)
        print(df_repr(self.keys, self.untunedf), flush=True)
        output_file = self.get_out_file(args.tune_file)
        if not self.untunedf:
            logger.info(f"no shapes to be tuned, skip tuning, tuned file is {args.tune_file}")
            self.sortResults(output_file, args.sort, self.keys)
            return
        batch_size = min(args.batch, len(self.untunedf))
        total_batches = int(math.ceil(len(self.untunedf) / float(batch_size)))
        if args.verbose:
            logger.info(
                f"total shapes to be tuned: {len(self.untunedf) }, total_batches: {total_batches}, batch_size: {batch_size}")
            logger.info(f"results will be written to {output_file}")
        start = time.time()
        completed_batches = 0
        status = "Finished"
        try:
            for i in range(0, len(self.untunedf), batch_size):
                batch = self.untunedf[i:i + batch_size]
                results = self.tune(batch, args)
                self.write_profile(results, args.profile_file)
                rows = self.post_process(results, args)
                if rows:
                    self.result_to_csv(rows, output_file, not args.all)
                    if len(results) == self.topk and self.print_every_shape is False:
                        self.print_result(rows[0])
                    completed_batches += 1
                    logger.info(
                        f"processed {completed_batches} batches of {total_batches}, Processing Status ====> {round(completed_batches / total_batches,2)*100:.1f}% tuned in {self.name}"
                    )
                else:
                    completed_batches += 1
                    logger.info(f"tune result is none or all shape is tuned in {args.tune_file}!")
        except KeyboardInterrupt:
            status = "Interrupted"
            logger.error(f"interrupted by user, tuning stopped, {completed_batches} batches processed")
            done = set(self._key_of(r) for r in self.success + self.failed)
            self.remain_untuned = [r for r in self.untunedf if self._key_of(r) not in done]
        self.sortResults(output_file, args.sort, self.keys)
        self.tune_summary(status, round(time.time() - start, 4))

    print_every_shape = False

class GemmCommonTuner(TunerCommon):
    ARG_DEFAULTS = dict(TunerCommon.ARG_DEFAULTS, sort=True)
