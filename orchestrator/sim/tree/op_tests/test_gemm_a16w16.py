# SPDX-License-Identifier: MIT
# Simulated op_test: a16w16 (bf16) GEMM. `tgemm us` is tuned_gemm's dispatch (the tuned row when there is
# one); torch and triton never change with tuning. The table is @benchmark()'s: test_gemm's arguments
# (inspect.getcallargs: dtype, m, n, k, bias, otype, scaleA, scaleB) followed by its results.
import argparse

import torch

from aiter import dtypes
from aiter._sim import perf_model
from aiter.jit.utils.chip_info import get_cu_num, get_gfx
from aiter.test_common import checkAllclose, log_args, log_summary
from aiter.tuned_gemm import gemm_a16w16


def test_gemm(dtype, m, n, k, bias=False, otype=None, scaleA=None, scaleB=None):
    callargs = {"dtype": dtype, "m": m, "n": n, "k": k, "bias": bias, "otype": otype, "scaleA": scaleA,
                "scaleB": scaleB}
    log_args("test_gemm", callargs)
    ret = dict(callargs)
    otype = dtype if otype is None else otype
    shape = {"m": m, "n": n, "k": k, "bias": bias, "dtype": str(dtype), "outdtype": str(otype),
             "scaleab": False, "bpreshuffle": False}
    gfx, cu_num = get_gfx(), get_cu_num()
    torch_us = perf_model.backend_metrics("a16w16", shape, gfx, cu_num, "torch")["us"]
    b = gemm_a16w16(m, n, k, bias, str(dtype), str(otype))
    msg_b = (f"[perf] dim: {str((m, n, k)):<20} dtype: {dtype}, torch avg: {torch_us:<8.2f} us, B avg: {b:<8.2f} us,"
             f"B uplift: {torch_us / b - 1:<5.1%}, ")
    ret["torch us"] = torch_us
    ret["tgemm us"] = b
    ret["tgemm err"] = checkAllclose(msg=msg_b)
    ret["triton us"] = perf_model.backend_metrics("a16w16", shape, gfx, cu_num, "triton")["us"]
    return ret


parser = argparse.ArgumentParser(formatter_class=argparse.RawTextHelpFormatter,
                                 description="config input of a16w16_gemm_test")
parser.add_argument("-t", "--test", type=str, nargs="*", choices=["normal", "skinny"], default=["normal"],
                    help="""Select test to run.
    e.g.: -t normal    # default
          or -t skinny""")
parser.add_argument("-d", "--dtype", type=dtypes.str2Dtype, nargs="*", default=[torch.bfloat16, torch.float16],
                    help="""Data type. Support "bf16", "fp16", "fp8".
    e.g.: -d bf16""")
parser.add_argument("-mnk", type=dtypes.str2tuple, nargs="+", const=None, default=[(128, 32, 8192), (64, 256, 5120)],
                    help="""Shape of mnk.
    e.g. -mnk 128,32,8192""")
parser.add_argument("-b", "--bias", action="store_true", help="""bias of GEMM. Default is False.
    -b or --bias    # enable Bias""")
parser.add_argument("-o", "--otype", type=dtypes.str2Dtype, nargs="*",
                    default=[torch.float16, torch.bfloat16, torch.float32], help="""Data type of output.
    e.g.: -o bf16""")
parser.add_argument("-sa", "--scale_a", type=float, default=None, help="Scale A.")
parser.add_argument("-sb", "--scale_b", type=float, default=None, help="Scale B.")
args = parser.parse_args()

df = []
for test in args.test:
    if test == "normal":
        for dtype in args.dtype:
            for otype in args.otype:
                for m, n, k in args.mnk:
                    df.append(test_gemm(dtype, m, n, k, bias=args.bias, otype=otype, scaleA=args.scale_a,
                                        scaleB=args.scale_b))
log_summary("gemm_a16w16", df)
