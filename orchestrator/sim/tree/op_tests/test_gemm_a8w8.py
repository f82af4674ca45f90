# SPDX-License-Identifier: MIT
# Simulated op_test: a8w8 GEMM (CK rowwise, CK bpreshuffle, ASM, hipBLASLt).
import argparse
import csv
import os

import aiter
from aiter import dtypes
from aiter._sim import perf_model
from aiter._sim.frame import write_csv
from aiter.jit.utils.chip_info import get_cu_num, get_gfx
from aiter.test_common import checkAllclose, log_args, log_summary

NAN = float("nan")


def test_gemm(dtype, m, n, k, quantDtype, pad_a=128):
#@ if current
    log_args("test_gemm", {"dtype": dtype, "m": m, "n": n, "k": k, "quantDtype": quantDtype, "pad_a": pad_a,
                           "skip_ck": False})
    ret = {"dtype": dtype, "m": m, "n": n, "k": k, "quantDtype": quantDtype, "pad_a": pad_a, "skip_ck": False}
#@ endif
#@ if legacy
    log_args("test_gemm", {"dtype": dtype, "m": m, "n": n, "k": k, "quantDtype": quantDtype})
    ret = {"dtype": dtype, "m": m, "n": n, "k": k, "quantDtype": quantDtype}
#@ endif
    gfx, cu_num = get_gfx(), get_cu_num()
    shape = {"m": m, "n": n, "k": k, "q_dtype_w": str(quantDtype)}
    ck = aiter.gemm_a8w8_CK(m, n, k, quantDtype, dtype)
    ret["ck us"] = ck
    ret["ck err"] = checkAllclose(msg=f"ck: {ck:>8.2f} us, ")
    ckb = aiter.gemm_a8w8_bpreshuffle(m, n, k, quantDtype, dtype)
    ret["ck bpreshuffle us"] = ckb
    ret["ck bpreshuffle err"] = checkAllclose(msg=f"ck bpreshuffle: {ckb:>8.2f} us, ")
    asm = perf_model.backend_metrics("a8w8", shape, gfx, cu_num, "asm")["us"]
    ret["asm us"] = asm
    ret["asm err"] = 0.0
    hip = perf_model.backend_metrics("a8w8_bpreshuffle", shape, gfx, cu_num, "hipmm")["us"]
    ret["hipmm bpreshuffle us"] = hip
    ret["hipmm bpreshuffle err"] = 0.0
#@ if current
    gelu = n == 3072 and k == 768
    ret["hipmm gelu_bias us"] = round(hip * 1.07, 4) if gelu else NAN
    ret["hipmm gelu_bias err"] = 0.0 if gelu else NAN
    ret["hipmm gelu_bias selected sol us"] = round(hip * 1.02, 4) if gelu else NAN
    ret["hipmm gelu_bias selected sol err"] = 0.0 if gelu else NAN
#@ endif
    return ret


l_dtype = ["bf16", "fp16"]
l_quantDtype = ["i8", "fp8"]
l_mnk = [
    # qkv_proj
    (1, 1280, 8192), (32, 1280, 8192), (64, 1280, 8192), (128, 1280, 8192), (192, 1280, 8192),
    (256, 1280, 8192), (320, 1280, 8192), (512, 1280, 8192), (1024, 1280, 8192), (2048, 1280, 8192),
    (4096, 1280, 8192), (8192, 1280, 8192), (16384, 1280, 8192),
    # attn_out
    (1, 8192, 1024), (32, 8192, 1024), (64, 8192, 1024), (128, 8192, 1024), (192, 8192, 1024),
    (256, 8192, 1024), (320, 8192, 1024), (512, 8192, 1024), (1024, 8192, 1024), (2048, 8192, 1024),
    (4096, 8192, 1024), (8192, 8192, 1024), (16384, 8192, 1024),
    # gelu_bias
    (32, 3072, 768), (4096, 3072, 768), (8192, 3072, 768),
    # preshuffle
    (16, 7424, 8192), (32, 7424, 8192), (64, 7424, 8192), (128, 7424, 8192), (1024, 7424, 8192),
    (4096, 7424, 8192), (8192, 7424, 8192),
]

parser = argparse.ArgumentParser(
    formatter_class=argparse.RawTextHelpFormatter,
    description="config input of test",
)
parser.add_argument("-d", "--dtype", type=dtypes.str2Dtype, choices=[dtypes.d_dtypes[key] for key in l_dtype],
                    nargs="*", default=[dtypes.d_dtypes[key] for key in l_dtype], metavar="{bf16, fp16}",
                    help="""Data type.
    e.g.: -d bf16""")
parser.add_argument("-q", "--quantDtype", type=dtypes.str2Dtype,
                    choices=[dtypes.d_dtypes[key] for key in l_quantDtype], nargs="*",
                    default=[dtypes.d_dtypes[key] for key in l_quantDtype], metavar="{i8, fp8}",
                    help="""Date type of quantization.
    e.g.: -q fp8""")
#@ if current
parser.add_argument("--pad_a", type=int, default=128, help="stride_a = K + pad_a")
#@ endif
parser.add_argument("-mnk", type=dtypes.str2tuple, nargs="*", default=l_mnk,
                    help="""shape of mnk.
    e.g. -mnk 1280,8192,1024""")
#@ if current
parser.add_argument("--csv", default=None, help="CSV with M,N,K[,q_dtype_w] columns")
parser.add_argument("--bpreshuffle-csv", dest="bpreshuffle_csv", default=None, help="bpreshuffle shapes CSV")
parser.add_argument("-o", "--output", default=None, help="directory to save results CSV")
parser.add_argument("--suffix", default="results", help="suffix of the results CSV file name")
parser.add_argument("--no-flydsl-csv", dest="no_flydsl_csv", action="store_true",
                    help="do not replay FlyDSL rows of the tuned bpreshuffle CSVs")
parser.add_argument("--no-legacy", dest="no_legacy", action="store_true", help="skip the legacy sweep")
#@ endif
args = parser.parse_args()

shapes = list(args.mnk)
#@ if current
if args.csv:
    with open(args.csv, newline="") as fh:
        shapes = [(int(r["M"]), int(r["N"]), int(r["K"])) for r in csv.DictReader(fh)]
    print(f"Loaded {len(shapes)} shapes from {args.csv}", flush=True)
#@ endif

df = []
for dtype in args.dtype:
    for quantDtype in args.quantDtype:
        for (m, n, k) in shapes:
#@ if current
            df.append(test_gemm(dtype, m, n, k, quantDtype, args.pad_a))
#@ endif
#@ if legacy
            df.append(test_gemm(dtype, m, n, k, quantDtype))
#@ endif
cols = log_summary("gemm_a8w8", df)
#@ if current
if args.output:
    os.makedirs(args.output, exist_ok=True)
    out_path = os.path.join(args.output, f"gemm_a8w8_{args.suffix}.csv")
    write_csv(out_path, cols, df)
    print(f"Saved legacy results to: {out_path}")
#@ endif
