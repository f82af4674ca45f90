# SPDX-License-Identifier: MIT
# Simulated op_test: MXFP8 (1x32 e8m0 scales) bpreshuffle GEMM (ROCm/aiter op_tests/test_gemm_a8w8_mxfp8_bpreshuffle.py,
# aiter-december-2026.md). Runs every tuned (M, N, K) of this arch by default (an untuned gfx950 falls back to a
# default shape list), or the shapes of -mnk. @benchmark()'s table: the call's arguments (m, n, k, dtype), then
# its results; `us` is rounded to 2 decimals; printed as `summary:` + df.to_markdown() (index included).
import argparse

from aiter import dtypes, logger
from aiter._sim import perf_model
from aiter._sim.frame import read_csv, norm, to_markdown
from aiter.jit.core import AITER_CONFIGS
from aiter.jit.utils.chip_info import get_cu_num, get_gfx
from aiter.ops.gemm_op_a8w8 import _get_mxfp8_bpreshuffle_config, gemm_a8w8_mxfp8_bpreshuffle
from aiter.test_common import checkAllclose, log_args

DEFAULT_MNK_GFX950 = [(m, n, k) for n, k in ((2112, 7168), (7168, 2048), (24576, 1536), (7168, 16384))
                      for m in (1, 16, 37, 64, 300, 1024, 4096)]


def test_gemm(m, n, k, dtype="torch.bfloat16"):
    log_args("test_gemm", {"m": m, "n": n, "k": k, "dtype": dtype})
    ret = {"m": m, "n": n, "k": k, "dtype": dtype}
    us = gemm_a8w8_mxfp8_bpreshuffle(m, n, k)
    flops, nbytes = perf_model.flops_and_bytes("a8w8_mxfp8_bpreshuffle", {"m": m, "n": n, "k": k})
    err = checkAllclose(msg=f"M={m} N={n} K={k}: ")
    libtype, kernel_name, splitk = _get_mxfp8_bpreshuffle_config(m, n, k)
    ret.update({"libtype": libtype, "splitK": splitk, "us": round(us, 2), "TFLOPS": round(flops / us / 1e6, 1),
                "TB/s": round(nbytes / us / 1e6, 2), "err": err, "kernelName": kernel_name})
    return ret


def tuned_shapes():
    _, rows = read_csv(AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_MXFP8_BPRESHUFFLE_FILE)
    shapes = [(norm(r["M"]), norm(r["N"]), norm(r["K"])) for r in rows
              if r.get("gfx") == get_gfx() and norm(r.get("cu_num")) == get_cu_num()]
    if not shapes and get_gfx() == "gfx950":
        return DEFAULT_MNK_GFX950  # not tuned on this machine yet
    return shapes


parser = argparse.ArgumentParser(formatter_class=argparse.RawTextHelpFormatter, description="MXFP8 bpreshuffle GEMM")
parser.add_argument("-mnk", type=dtypes.str2tuple, nargs="*", default=None,
                    help="""M,N,K shapes; default: every tuned shape of this arch.
    e.g.: -mnk 512,7168,16384 1000,65536,1536""")
args = parser.parse_args()

if get_gfx() not in ("gfx950", "gfx1250"):
    print(f"skip: gfx950 / gfx1250 only, got {get_gfx()}")
else:
    rows = [test_gemm(*mnk) for mnk in args.mnk or tuned_shapes()]
    cols = [""] + list(rows[0]) if rows else [""]
    logger.info("gemm_a8w8_mxfp8_bpreshuffle summary:\n%s",
                to_markdown(cols, [dict(r, **{"": i}) for i, r in enumerate(rows)]))
