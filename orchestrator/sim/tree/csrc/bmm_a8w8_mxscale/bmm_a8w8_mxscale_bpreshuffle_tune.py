# SPDX-License-Identifier: MIT
# Simulated AITER tuner: the gfx950 preshuffled-B MXFP8 BMM, opus + FlyDSL in one sweep (ROCm/aiter
# csrc/bmm_a8w8_mxscale/bmm_a8w8_mxscale_bpreshuffle_tune.py at f081855b / 4cb36987, a subclass of
# csrc/opus_gemm/opus_bmm_mxscale_tune.py's OpusBmmMxscaleTuner; the CLI and CSV forms of its README at
# fb06b88c). As upstream:
# * the key is lower case WITHOUT cu_num: gfx,b,m,n,k,w_scale_block, then libtype,kernelId,splitK,us,...;
#   FlyDSL rows have kernelId -1, splitK is the selected split count (>= 1, the runtime rejects less);
# * OpusBmmMxscaleTuner removes the base -k/--splitK and reuses -k as -k/--K (a list of K values): a bare
#   -k is an argparse error; -g/-m (with -n/-k) give shapes as a cross product;
# * -i: columns lower-cased, g accepted for b, an optional gfx column keeps only this GPU's rows; the
#   w_scale_block column's rows are filtered by --w_scale_block (default 32x32,128x128, so a 1x32 row is
#   dropped unless asked for); input without it gets one row per --w_scale_block block. Without -i (and
#   -g/-m) the shapes of the shipped DSV4 model table are re-tuned, and without -o that table is written;
# * 1x32 is opus only (--libtype flydsl with a 1x32 row raises); keys already in -o are skipped unless --all.
import os

from aiter import logger
from aiter._sim import perf_model
from aiter.jit.core import AITER_CONFIG_DIR
from aiter.jit.utils.chip_info import get_gfx
from aiter.utility.base_tuner import TunerCommon
from aiter._sim.frame import norm, read_csv

KEYS = ["gfx", "b", "m", "n", "k", "w_scale_block"]
RESULTS = ["libtype", "kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]
BLOCKS = ("128x128", "32x32", "1x32")
FLYDSL_KERNEL_ID = -1
MODEL_TABLE = f"{AITER_CONFIG_DIR}/model_configs/dsv4_batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned.csv"
POOLS = ("all", "preb", "rowb", "subok", "shuf", "shuf_reg", "shuf_lds")


def _intlist(s):
    return [int(x) for x in str(s).split(",") if x != ""]


def _blocks(s):
    out = [b.strip() for b in str(s).split(",") if b.strip()]
    bad = [b for b in out if b not in BLOCKS]
    if bad:
        raise ValueError(f"--w_scale_block: unknown block(s) {bad}; choose from {list(BLOCKS)}")
    return out


class BmmA8W8MxscaleBpreshuffleTuner(TunerCommon):
    ARG_DEFAULTS = {**TunerCommon.ARG_DEFAULTS, "tune_file": MODEL_TABLE, "untune_file": "", "errRatio": 0.02,
                    "config_env_name": "AITER_CONFIG_BATCHED_GEMM_A8W8_BLOCKSCALE_MXSCALE_BPRESHUFFLE"}
    sim_variant = "bmm_a8w8_mxscale_bpreshuffle"
    sim_tune_module = None       # opus kernels are built with the package; FlyDSL compiles per kernelName

    def __init__(self):
        super().__init__("BmmA8W8MxscaleBpreshuffleTuner", KEYS, RESULTS,
                         description="Tune the gfx950 preshuffled-B MXFP8 BMM across opus and flydsl")

    def _setup_specific_arguments(self):
        # as OpusBmmMxscaleTuner: free the base -k/--splitK so -k is the K dimension
        for action in list(self.parser._actions):
            if "-k" in action.option_strings or "--splitK" in action.option_strings:
                self.parser._actions.remove(action)
                for s in action.option_strings:
                    self.parser._option_string_actions.pop(s, None)
                for grp in self.parser._action_groups:
                    if action in grp._group_actions:
                        grp._group_actions.remove(action)
                break
        p = self.parser
        p.add_argument("-g", "--batch_g", type=_intlist, default=None, help="comma list of batch g (e.g. 2,8,16)")
        p.add_argument("-m", "--M", type=_intlist, default=None, help="comma list of M (e.g. 1,16,64)")
        p.add_argument("-n", "--N", type=_intlist, default=[1024], help="comma list of N (default 1024)")
        p.add_argument("-k", "--K", type=_intlist, default=[4096], help="comma list of K (default 4096)")
        p.add_argument("--apply", action="store_true", default=False, help="overwrite the shipped tuned CSV in place")
        p.add_argument("--bpreshuffle", action="store_true", default=False,
                       help="write to the preshuffle-inclusive table (BPRESHUFFLE_CSV)")
        p.add_argument("--pool", choices=POOLS, default="all",
                       help="restrict candidates by B layout (--bpreshuffle implies preb)")
        p.add_argument("--graph_m_max", type=int, default=0,
                       help="time rows with m <= this through a captured hipgraph (0 = never)")
        p.add_argument("--libtype", default="all", help="comma list of backends to tune: opus, flydsl, or all")
        p.add_argument("--opus_candidates", choices=("policy", "all"), default="policy",
                       help="Opus policy candidates, or all registered plain-scale preshuffled-B kids")
        p.add_argument("--flydsl_candidates", choices=("near", "all"), default="near",
                       help="flydsl configs to try per shape: the shipped table's at M within 2x (near), or all")
        p.add_argument("--w_scale_block", type=_blocks, default=["32x32", "128x128"],
                       help="weight-scale blocks: filters the input's w_scale_block rows; input without the "
                            "column gets one row per block (default 32x32,128x128)")

    # ------------------------------------------------------------------------------ shapes
    def _rows_of(self, path):
        cols, rows = read_csv(path)
        low = [{str(c).strip().lower(): v for c, v in r.items()} for r in rows]
        return [str(c).strip().lower() for c in cols], low

    def get_untuned_list(self, untune_file):
        args = self._args
        gfx = self.get_gfx()
        blocks = list(args.w_scale_block)
        if args.batch_g and args.M:
            shapes = [(g, m, n, k, b) for g in args.batch_g for m in args.M for n in args.N for k in args.K
                      for b in blocks]
        else:
            if untune_file and os.path.exists(untune_file):
                cols, rows = self._rows_of(untune_file)
            else:
                logger.info("no -g/-m and no untune_file; re-tuning shapes from %s", MODEL_TABLE)
                cols, rows = self._rows_of(MODEL_TABLE) if os.path.exists(MODEL_TABLE) else ([], [])
            bcol = "b" if "b" in cols else "g"
            missing = [c for c in (bcol, "m", "n", "k") if c not in cols]
            if rows and missing:
                raise KeyError(f"{missing} not in index")
            shapes = []
            for r in rows:
                if "gfx" in cols and str(r.get("gfx") or "") not in ("", gfx):
                    continue
                dims = tuple(int(norm(r[c])) for c in (bcol, "m", "n", "k"))
                if "w_scale_block" in cols:
                    if str(r["w_scale_block"]) in blocks:
                        shapes.append(dims + (str(r["w_scale_block"]),))
                else:
                    shapes.extend(dims + (b,) for b in blocks)
        out, seen = [], set()
        for s in shapes:
            b, m, n, k, block = s
            if min(b, m, n, k) <= 0:
                raise ValueError(f"dimensions must be positive integers: B:{b} M:{m} N:{n} K:{k}")
            if k % 128 or n % (16 if block == "1x32" else 128):
                raise ValueError(f"B:{b} M:{m} N:{n} K:{k} w_scale {block}: "
                                 + ("N must be a multiple of 16 and K of 128" if block == "1x32"
                                    else "N and K must be multiples of 128"))
            if s not in seen:
                seen.add(s)
                out.append(dict(zip(("b", "m", "n", "k", "w_scale_block"), s)))
        return out

    def pre_process(self, args):
        libs = {s.strip() for s in args.libtype.split(",") if s.strip()}
        self.libs = {"opus", "flydsl"} if "all" in libs else libs
        unknown = self.libs - {"opus", "flydsl"}
        if unknown:
            raise SystemExit(f"--libtype: unknown backend(s) {sorted(unknown)}")
        if args.apply and args.bpreshuffle:
            raise SystemExit("--apply and --bpreshuffle write different tables")
        args.bpreshuffle = True      # the subclass forces it (its pre_process, 4cb36987)
        # the opus base's -o (bce5c477 on): --apply writes the model table, --bpreshuffle only defaults -o to
        # it ("Only a default: -o is tune_file"); the 0a990d64 base replaced -o under --bpreshuffle
        if args.apply:
            args.tune_file = MODEL_TABLE
        if args.opus_candidates == "all" and args.pool not in ("preb", "all"):
            raise ValueError("--opus_candidates all requires --pool preb")
        # the opus tuner's pre_process (stored ROCm/aiter csrc/opus_gemm/opus_bmm_mxscale_tune.py, the version
        # with w_scale_block in its key)
        if get_gfx() != "gfx950":
            raise RuntimeError(f"MXFP8 BMM tuning is gfx950-only; detected {get_gfx()!r}")
        if (args.batch_g is None) != (args.M is None):
            raise ValueError("-g/--batch_g and -m/--M must be provided together")
        self._args = args
        super().pre_process(args)
        if self.libs == {"flydsl"} and any(r["w_scale_block"] == "1x32" for r in self.untunedf):
            raise ValueError("1x32 is supported by OPUS; use --libtype opus or all")

    def candidate_result(self, args, row):
        libs = ("opus",) if row["w_scale_block"] == "1x32" else tuple(l for l in ("opus", "flydsl") if l in self.libs)
        res = perf_model.tune_result(self.sim_variant, self._sim_shape(row), self.get_gfx(), self.get_cu_num(),
                                     libtypes=libs)
        if res is None:
            return None
        res = dict(res, splitK=max(1, int(res["splitK"])))
        if res["libtype"] == "flydsl":
            res["kernelId"] = FLYDSL_KERNEL_ID
        else:
            res["kernelId"] = 8000 + int(res["kernelId"])      # global opus kids (policy.py _MXSCALE_BMM_KID_OFFSET)
        return {c: res.get(c) for c in self.resultList}

    # ------------------------------------------------------------------------------ --run_config
    # OpusBmmMxscaleTuner.run_config / _default_benchmark / _saved_benchmark / _set_config_env_for_run_config
    # (csrc/opus_gemm/opus_bmm_mxscale_tune.py, the base of f081855b / 4cb36987, ROCm/aiter index id 70216553721)
    def _set_config_env_for_run_config(self, args, config_file=None):
        """OPUS dispatches exact compiled kids: the env var -> the CSV and the lookup caches cleared, no rebuild."""
        env_name = self.ARG_DEFAULTS["config_env_name"]
        previous = os.environ.get(env_name)
        os.environ[env_name] = str(config_file or self.get_out_file(args.tune_file))
        _clear_op_caches()
        return env_name, previous

    def run_config(self, args):
        """Each shape: with a CSV (_saved_benchmark) its row's own kernel through the raw launcher, no lookup;
        without one (_default_benchmark) batched_gemm_a8w8_mxscale_bpreshuffle, whose lookup of the process's
        AITER_CONFIG_* table (+ model_configs glob where unset; aiter/ops/opus/policy.py) picks the kernel."""
        from aiter._sim import measured_us
        from aiter.ops.opus import policy
        saved = isinstance(args.run_config, str)
        gfx, cu = self.get_gfx(), self.get_cu_num()
        results = []
        for row in self.untunedf:
            shape = ",".join(f"{name}={row.get(name, gfx if name == 'gfx' else '')}" for name in self.keys)
            dims = self._sim_shape(row)
            if saved:
                tuned_from = dims
            else:
                hit = policy.lookup_mxscale_bmm_config(int(row["b"]), int(row["m"]), int(row["n"]), int(row["k"]),
                                                       w_scale_block=str(row["w_scale_block"]))
                tuned_from = None if hit is None else {**dims, "m": norm(hit["m"])}
            results.append({"shape": shape, "e2e_us": measured_us(self.sim_variant, dims, gfx, cu, tuned_from),
                            "status": "ok"})
        return results

    def sort_keys(self):
        return ["gfx", "b", "n", "m", "k", "w_scale_block"]


def _clear_op_caches():
    from aiter.ops.opus import policy
    policy.config_file.cache_clear()
    policy._load_mxscale_bmm_tuned.cache_clear()
    policy.lookup_mxscale_bmm_config.cache_clear()


if __name__ == "__main__":
    tuner = BmmA8W8MxscaleBpreshuffleTuner()
    _args = tuner.parse_args()
    tuner.run(_args, False)
