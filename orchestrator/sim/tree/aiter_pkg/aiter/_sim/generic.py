"""A simulated tuner and op_test for a variant the tree has no file of its own for (not part of real AITER).

Both are driven by the variant's facts alone (``perf_model.facts``: the registry's entry as
orchestrator/gen_variant_facts.sim_facts writes it). ``sim.serve_variant`` puts a two-line script at the
entry's tune script and benchmark paths that calls ``tune_main`` / ``bench_main``. They follow AITER's common
tuner CLI (aiter/utility/base_tuner.py: -i/-o, --mp, -k, ...) and op_test conventions for GEMM-like shapes
whose key is (B,) M, N, K: bench styles ``mnk``, ``m_nk`` and ``s_mnk``; output ``markdown`` or
``perf_lines``.
"""

import argparse
import os
import sys

from . import LEGACY, perf_model
from .frame import norm

RESULTS = ["kernelId", "splitK", "us", "kernelName", "tflops", "bw", "errRatio"]


def tuned_header(facts):
    """Columns of the variant's tuned CSV on this AITER (gfx first from v0.1.13)."""
    return (["cu_num"] if LEGACY else ["gfx", "cu_num"]) + list(facts["untuned_columns"]) + \
        (["libtype"] if facts["libtypes"] else []) + RESULTS


def tune_main(variant, argv=None):
    from ..jit.core import AITER_CONFIG_DIR
    from ..jit.utils.chip_info import get_gfx
    from ..utility.base_tuner import GemmCommonTuner

    f = perf_model.facts(variant)
    tuned_default = os.getenv(f["config_env"], f"{AITER_CONFIG_DIR}/{os.path.basename(f['tuned_csv'])}")

    class GenericTuner(GemmCommonTuner):
        ARG_DEFAULTS = {**GemmCommonTuner.ARG_DEFAULTS, "tune_file": tuned_default,
                        "untune_file": f["untuned_csv"], "config_env_name": f["config_env"]}
        sim_variant = variant

        def _setup_specific_arguments(self):
            for flag in f["tune_flags"]:      # a variant's own flags; a common one (--all) is base_tuner's
                if flag not in self.parser._option_string_actions:
                    self.parser.add_argument(flag, action="store_true")

        def tune(self, batch, args):
            if f["requires_gfx"] and get_gfx() not in f["requires_gfx"]:
                print(f"tuning is not supported in this chip {get_gfx()}")
                return [(row, None) for row in batch]
            return super().tune(batch, args)

    header = tuned_header(f)
    n_key = len(header) - len(RESULTS) - (1 if f["libtypes"] else 0)
    tuner = GenericTuner(variant, key=header[:n_key], resultList=header[n_key:],
                         description=f"Tune {variant} (simulated from its registry facts)")
    tuner.run(tuner.parse_args(argv), False)


def _shapes(style, argv):
    p = argparse.ArgumentParser(description="simulated op_test")
    from .. import dtypes
    if style == "mnk":
        p.add_argument("-mnk", "--shape", type=dtypes.str2tuple, nargs="*", default=[(1, 1024, 1024)])
    elif style == "m_nk":
        p.add_argument("-m", type=int, nargs="*", default=[1])
        p.add_argument("-nk", type=dtypes.str2tuple, nargs="*", default=[(1024, 1024)])
    elif style == "s_mnk":
        p.add_argument("-b", "--batch", type=int, nargs="*", default=[1])
        p.add_argument("-s", "--mnk", type=dtypes.str2tuple, nargs="*", default=[(1, 1024, 1024)])
    else:
        sys.exit(f"simulated op_test: bench style {style!r} is not served from facts")
    args, _ = p.parse_known_args(argv)   # the entry's extra_args are accepted and change nothing
    if style == "mnk":
        return [{"m": m, "n": n, "k": k} for m, n, k in args.shape]
    if style == "m_nk":
        return [{"m": m, "n": n, "k": k} for (n, k) in args.nk for m in args.m]
    return [{"b": b, "m": m, "n": n, "k": k} for b in args.batch for m, n, k in args.mnk]


def served_by(variant, shape):
    """Key shape of the tuned row the runtime reads for ``shape`` (GEMM: exact M, then padded M), or None."""
    from ..jit.core import get_config_file
    from ..ops._tuned import python_table
    f = perf_model.facts(variant)
    cols = tuple(f["untuned_columns"])
    table = python_table(get_config_file(f["config_env"]), cols)
    key = perf_model.key_columns(variant)
    if f["family"] == "gemm" and key[:3] == ("m", "n", "k"):
        row, padded = table.find_padded(shape["m"], shape["n"], shape["k"], [shape[c] for c in key[3:]])
        return None if row is None else dict(shape, m=padded)
    return shape if table.find([shape[c] for c in key]) is not None else None


def bench_main(variant, argv=None):
    from ..jit.utils.chip_info import get_cu_num, get_gfx
    from ..test_common import log_summary
    f = perf_model.facts(variant)
    b = f["bench"]
    gfx, cu_num = get_gfx(), get_cu_num()
    if f["requires_gfx"] and gfx not in f["requires_gfx"]:
        print(f"skip: {variant} runs on {', '.join(f['requires_gfx'])} only, got {gfx}")
        return
    rows = []
    for shape in _shapes(b["style"], sys.argv[1:] if argv is None else argv):
        tuned_from = served_by(variant, shape)
        if b["output"] == "perf_lines":      # the batched op_tests' line: torch vs the tuned kernel
            dim = (shape.get("b", 1), shape["m"], shape["n"], shape["k"])
            avg_a = perf_model.backend_metrics(variant, shape, gfx, cu_num, "torch")["us"]
            avg_b = perf_model.bench_us(variant, shape, gfx, cu_num, tuned_from)
            print(f"[perf] dim: {dim!s:<20} dtype: torch.bfloat16, torch avg: {avg_a:<8.2f} us, "
                  f"ck avg: {avg_b:<8.2f} us, uplift: {avg_a/avg_b-1:<5.1%}", flush=True)
            continue
        value = perf_model.bench_value(variant, shape, b["metric"], gfx, cu_num, tuned_from)
        out_of = {key: out for out, key in b["key_columns"].items()}
        row = {out_of.get(c, c): norm(shape[c]) for c in shape}
        row.update(b["row_filter"])
        row[b["metric"]] = value
        rows.append(row)
    if rows:
        log_summary(os.path.splitext(os.path.basename(b["script"]))[0], rows)
