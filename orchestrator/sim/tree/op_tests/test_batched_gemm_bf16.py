# SPDX-License-Identifier: MIT
# Simulated op_test: batched bf16 GEMM.
import argparse

import aiter
from aiter import dtypes
from aiter._sim import perf_model
from aiter.jit.utils.chip_info import get_cu_num, get_gfx
#@ if current
from aiter.test_common import log_args, log_summary
#@ endif
#@ if legacy
from aiter.test_common import checkAllclose
#@ endif

#@ if current
BACKENDS = ["triton", "torch_einsum", "ck"]


def test_gemm(dtype, b, m, n, k, layout):
    log_args("test_gemm", {"dtype": dtype, "b": b, "m": m, "n": n, "k": k, "layout": layout})
    gfx = get_gfx()
    ret = {"b": b, "m": m, "n": n, "k": k, "dtype": dtype, "layout": layout, "gfx": gfx}
    shape = {"b": b, "m": m, "n": n, "k": k}
    flops, nbytes = perf_model.flops_and_bytes("batched_bf16", shape)
    for name in BACKENDS:
        if name == "ck":
            if layout != "bmn" or gfx not in ("gfx942", "gfx950"):
                continue
            us = aiter.batched_gemm_bf16_CK(b, m, n, k, dtype)
        else:
            us = perf_model.backend_metrics("batched_bf16", shape, gfx, get_cu_num(), name)["us"]
        ret[f"{name} us"] = us
        ret[f"{name} TFLOPS"] = flops / us / 1e6
        ret[f"{name} TB/s"] = nbytes / us / 1e6
        ret[f"{name} err"] = 0.0
    return ret


def main():
    l_dtype = ["bf16"]
    parser = argparse.ArgumentParser(
        formatter_class=argparse.RawTextHelpFormatter,
        description="config input of test",
    )
    parser.add_argument("-d", "--dtype", type=dtypes.str2Dtype,
                        choices=[dtypes.d_dtypes[key] for key in l_dtype], nargs="?", const=None,
                        default="bf16,", metavar="{bf16}", help="""Data type.
    e.g.: -d bf16""")
    parser.add_argument("-b", "--batch", type=int, nargs="*", default=[16, 8, 4, 2],
                        help="""Batch size.
    e.g.: -b 16""")
    parser.add_argument("-s", "--mnk", type=dtypes.str2tuple, nargs="*",
                        default=[(1, 1024, 4096), (16, 1024, 4096), (32, 1024, 4096), (64, 1024, 4096),
                                 (128, 1024, 4096), (256, 1024, 4096), (512, 1024, 4096), (1024, 1024, 4096),
                                 (2048, 1024, 4096), (4096, 1024, 4096), (8192, 1024, 4096),
                                 (16384, 1024, 4096)],
                        help="""shape of mnk.
    e.g. -s 1280,8192,1024""")
    parser.add_argument("-l", "--layout", choices=["bmn", "mbn"], nargs="*", default=["bmn", "mbn"],
                        help="output layout")
    args = parser.parse_args()
    l_dt = args.dtype if isinstance(args.dtype, tuple) else (args.dtype,)
    for dtype in l_dt:
        df = []
        for b in args.batch:
            for (m, n, k) in args.mnk:
                for layout in args.layout:
                    df.append(test_gemm(dtype, b, m, n, k, layout))
        log_summary("batched_gemm_bf16", df)


if __name__ == "__main__":
    main()
#@ endif
#@ if legacy


def test_gemm(dtype, b, m, n, k):
    dim = (b, m, n, k)
    shape = {"b": b, "m": m, "n": n, "k": k}
    avg_a = perf_model.backend_metrics("batched_bf16", shape, get_gfx(), get_cu_num(), "torch")["us"]
    avg_b = aiter.batched_gemm_bf16_CK(b, m, n, k, dtype)
    msg = f"[perf] dim: {dim!s:<20} dtype: {dtype}, torch avg: {avg_a:<8.2f} us, ck avg: {avg_b:<8.2f} us, uplift: {avg_a/avg_b-1:<5.1%}"
    checkAllclose(msg="a,b: " + msg, rtol=1e-2, atol=0.01)


l_dtype = ["bf16"]
l_batch = [16]
l_mnk = [
    (1, 1280, 8192), (32, 1280, 8192), (64, 1280, 8192), (128, 1280, 8192), (192, 1280, 8192),
    (256, 1280, 8192), (320, 1280, 8192), (512, 1280, 8192), (1024, 1280, 8192), (2048, 1280, 8192),
    (4096, 1280, 8192), (8192, 1280, 8192),
    (1, 8192, 1024), (32, 8192, 1024), (64, 8192, 1024), (128, 8192, 1024), (192, 8192, 1024),
    (256, 8192, 1024), (320, 8192, 1024), (512, 8192, 1024), (1024, 8192, 1024), (2048, 8192, 1024),
    (4096, 8192, 1024), (8192, 8192, 1024),
]

parser = argparse.ArgumentParser(
    formatter_class=argparse.RawTextHelpFormatter,
    description="config input of test",
)
parser.add_argument("-d", "--dtype", type=dtypes.str2Dtype, choices=[dtypes.d_dtypes[key] for key in l_dtype],
                    nargs="?", const=None, default="bf16,", metavar="{bf16}",
                    help="""Data type.
    e.g.: -d bf16""")
parser.add_argument("-b", "--batch", type=int, choices=l_batch, nargs="*", default=l_batch,
                    help="""Batch size.
    e.g.: -b 16""")
parser.add_argument("-s", "--mnk", type=dtypes.str2tuple, nargs="*", default=l_mnk,
                    help="""shape of mnk.
    e.g. -s 1280,8192,1024""")
args = parser.parse_args()
l_dt = args.dtype if isinstance(args.dtype, tuple) else (args.dtype,)
for dtype in l_dt:
    for b in args.batch:
        for (m, n, k) in args.mnk:
            test_gemm(dtype, b, m, n, k)
#@ endif
