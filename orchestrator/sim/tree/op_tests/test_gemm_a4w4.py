# SPDX-License-Identifier: MIT
# Simulated op_test: a4w4 (MXFP4) block-scale GEMM.
import argparse

import aiter
from aiter import dtypes
from aiter._sim import perf_model
from aiter.jit.utils.chip_info import get_gfx
from aiter.test_common import checkAllclose, log_args, log_summary


def test_gemm(dtype, M, N, K):
    log_args("test_gemm", {"dtype": dtype, "M": M, "N": N, "K": K})
    if get_gfx() not in ["gfx950"]:
        return None
    us = aiter.gemm_a4w4(M, N, K, dtype, bpreshuffle=True)
    flops, nbytes = perf_model.flops_and_bytes("a4w4_blockscale", {"m": M, "n": N, "k": K})
    err = checkAllclose(msg=f"a4w4: {us:>8.2f} us, ")
    return {"us": us, "TFLOPS": flops / us / 1e6, "TB/s": nbytes / us / 1e6, "err": err}


l_dtype = ["bf16"]
l_mnk = [
    (256, 2048, 8192), (2048, 8192, 8192), (16384, 16384, 16384),
    (1, 106496, 16384), (32, 106496, 16384), (64, 106496, 16384), (128, 106496, 16384),
    (256, 106496, 16384), (1024, 106496, 16384),
    (1, 16384, 53248), (32, 16384, 53248), (64, 16384, 53248), (128, 16384, 53248),
    (256, 16384, 53248), (1024, 16384, 53248),
    (1, 18432, 16384), (32, 18432, 16384), (64, 18432, 16384), (128, 18432, 16384),
    (256, 18432, 16384), (1024, 18432, 16384),
    (1, 16384, 16384), (32, 16384, 16384), (64, 16384, 16384), (128, 16384, 16384),
    (256, 16384, 16384), (1024, 16384, 16384),
    (1, 7168, 2048), (16, 7168, 2048), (32, 7168, 2048), (64, 7168, 2048), (128, 7168, 2048),
    (256, 7168, 2048), (512, 7168, 2048), (1024, 7168, 2048), (2048, 7168, 2048), (4096, 7168, 2048),
    (1, 4608, 7168), (16, 4608, 7168), (32, 4608, 7168), (64, 4608, 7168), (128, 4608, 7168),
    (256, 4608, 7168), (512, 4608, 7168), (1024, 4608, 7168), (2048, 4608, 7168), (4096, 4608, 7168),
    (1, 7168, 4608), (16, 7168, 4608), (32, 7168, 4608), (64, 7168, 4608), (128, 7168, 4608),
    (256, 7168, 4608), (512, 7168, 4608), (1024, 7168, 4608), (2048, 7168, 4608), (4096, 7168, 4608),
    (1, 8192, 28672), (32, 8192, 28672), (64, 8192, 28672), (128, 8192, 28672), (256, 8192, 28672),
    (512, 8192, 28672), (1024, 8192, 28672), (2048, 8192, 28672), (256, 2048, 8192),
    (1024, 8192, 28672), (2048, 8192, 28672), (3072, 8192, 28672),
]

parser = argparse.ArgumentParser(
    formatter_class=argparse.RawTextHelpFormatter,
    description="config input of test",
)
parser.add_argument("-d", "--dtype", type=dtypes.str2Dtype, choices=[dtypes.d_dtypes[key] for key in l_dtype],
                    nargs="*", default=[dtypes.d_dtypes[key] for key in l_dtype], metavar="{bf16}",
                    help="""Data type.
    e.g.: -d bf16""")
parser.add_argument("-mnk", "--shape", type=dtypes.str2tuple, nargs="*", default=l_mnk,
                    help="""shape of mnk.
    e.g. -mnk 1280,8192,1024""")
args = parser.parse_args()

df = []
for dtype in args.dtype:
    for (M, N, K) in args.shape:
        row = {"dtype": dtype, "M": M, "N": N, "K": K}
        ret = test_gemm(dtype, M, N, K)
        if ret:
            row.update(ret)
        df.append(row)
log_summary("gemm_a4w4", df)
