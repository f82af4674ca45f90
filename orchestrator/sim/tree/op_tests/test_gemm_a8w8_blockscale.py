# SPDX-License-Identifier: MIT
# Simulated op_test: a8w8 block-scale GEMM (CK, and B-preshuffle with --ck_preshuffle True).
import argparse
import csv
import os

import aiter
from aiter import dtypes
from aiter._sim import perf_model
from aiter._sim.frame import columns_of, df_repr, write_csv
from aiter.jit.utils.chip_info import get_cu_num, get_gfx
from aiter.test_common import checkAllclose, log_args, log_summary

bf16 = dtypes.bf16


def _metrics(prefix, variant, shape, us):
    flops, nbytes = perf_model.flops_and_bytes(variant, shape)
    return {f"{prefix} us": us, f"{prefix} TFLOPS": flops / us / 1e6, f"{prefix} TB/s": nbytes / us / 1e6,
            f"{prefix} err": 0.0}


#@ if current
def test_gemm(dtype, m, n, k, ck_preshuffle=True, use_flydsl=False):
    log_args("test_gemm", {"dtype": dtype, "m": m, "n": n, "k": k, "ck_preshuffle": ck_preshuffle,
                           "use_flydsl": use_flydsl})
    ret = {"dtype": dtype, "m": m, "n": n, "k": k, "ck_preshuffle": ck_preshuffle, "use_flydsl": use_flydsl}
#@ endif
#@ if legacy
def test_gemm(dtype, m, n, k, ck_preshuffle=True):
    log_args("test_gemm", {"dtype": dtype, "m": m, "n": n, "k": k, "ck_preshuffle": ck_preshuffle})
    ret = {"dtype": dtype, "m": m, "n": n, "k": k, "ck_preshuffle": ck_preshuffle}
#@ endif
    variant = "a8w8_blockscale_bpreshuffle" if ck_preshuffle else "a8w8_blockscale"
    shape = {"m": m, "n": n, "k": k}
    if ck_preshuffle:
        us = aiter.gemm_a8w8_blockscale_bpreshuffle(m, n, k, dtype)
    else:
        us = aiter.gemm_a8w8_blockscale(m, n, k, dtype)
    ret.update(_metrics("ck", variant, shape, us))
    checkAllclose(msg=f"ck: {us:>8.2f} us, ")
#@ if current
    gfx, cu_num = get_gfx(), get_cu_num()
    if not use_flydsl:
        asm = perf_model.backend_metrics(variant, shape, gfx, cu_num, "asm")
        ret.update(_metrics("asm", variant, shape, asm["us"]))
        ret["asm/ck"] = us / asm["us"]
    if ck_preshuffle:
        tri = perf_model.backend_metrics(variant, shape, gfx, cu_num, "triton")
        ret.update(_metrics("triton", variant, shape, tri["us"]))
        ret["triton/ck"] = us / tri["us"]
#@ endif
    return ret


l_dtype = ["bf16"]
#@ if legacy
l_m = [1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480, 512, 1024, 2048, 4096, 6144, 8192, 10240]
#@ endif

parser = argparse.ArgumentParser(
    formatter_class=argparse.RawTextHelpFormatter,
    description="config input of test",
)
parser.add_argument(
    "-d",
    "--dtype",
    type=dtypes.str2Dtype,
    choices=[dtypes.d_dtypes[key] for key in l_dtype],
    nargs="*",
    default=[dtypes.d_dtypes[key] for key in l_dtype],
    metavar="{bf16}",
    help="""Data type.
    e.g.: -d bf16""",
)
#@ if current
parser.add_argument(
    "-m",
    type=int,
    nargs="*",
    default=[1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480, 512, 1024, 2048, 4096, 6144, 8192, 10240],
    help="""M of mnk.
    e.g.: -m 32""",
)
#@ endif
#@ if legacy
parser.add_argument(
    "-m",
    type=int,
    nargs="*",
    choices=l_m,
    default=l_m,
    help="""M of mnk.
    e.g.: -m 32""",
)
#@ endif
parser.add_argument(
    "-nk",
    type=dtypes.str2tuple,
    nargs="*",
    default=[(24576, 1536)],
    help="""N&K of mnk.
    e.g.: -nk 4096,7168""",
)
parser.add_argument(
    "--ck_preshuffle",
    type=dtypes.str2bool,
    nargs="*",
    default=[True, False],
    help="""weight preshuffle (True/False).
    e.g.: --ck_preshuffle True""",
)
#@ if current
parser.add_argument("--flydsl", action="store_true",
                    help="use flydsl fp8 e8m0 scale path (requires --ck_preshuffle True)")
parser.add_argument("--csv", default=None, help="CSV with M,N,K columns")
parser.add_argument("-o", "--output", default=None, help="directory to save results CSV")
parser.add_argument("--suffix", default="results", help="suffix of the results CSV file name")
#@ endif

args = parser.parse_args()

shapes = []
#@ if current
if args.csv:
    with open(args.csv, newline="") as fh:
        for r in csv.DictReader(fh):
            r = {k.strip(): v.strip() for k, v in r.items() if k}
            shapes.append((int(r["M"]), int(r["N"]), int(r["K"])))
#@ endif
if not shapes:
    shapes = [(m, n, k) for m in args.m for (n, k) in args.nk]

df = []
for dtype in args.dtype:
    for (m, n, k) in shapes:
        for preshuffle in args.ck_preshuffle:
#@ if current
            ret = test_gemm(dtype, m, n, k, preshuffle, args.flydsl)
#@ endif
#@ if legacy
            ret = test_gemm(dtype, m, n, k, preshuffle)
#@ endif
            df.append(ret)
#@ if current
print("\n" + "=" * 150)
print("COMPLETE PERFORMANCE SUMMARY (All Columns)")
print("=" * 150)
print(df_repr(columns_of(df), df, index=False))
print("=" * 150)
#@ endif
cols = log_summary("gemm_a8w8_blockscale", df)
#@ if current
print("\nRunning split-K correctness checks ...")
for (m, n, k) in shapes[:1]:
    for splitK in (2, 4):
        ck_err, cktile_err = 0.0, 0.0
        print(f"test_splitk_correctness(m={m}, n={n}, k={k}, splitK={splitK}): " f"ck_err={ck_err:.4g}, cktile_err={cktile_err:.4g}")
if args.output:
    os.makedirs(args.output, exist_ok=True)
    base = os.path.splitext(os.path.basename(args.csv))[0] if args.csv else "gemm_a8w8_blockscale"
    out_path = os.path.join(args.output, f"{base}_{args.suffix}.csv")
    write_csv(out_path, cols, df)
    print(f"Saved results to: {out_path}")
#@ endif
