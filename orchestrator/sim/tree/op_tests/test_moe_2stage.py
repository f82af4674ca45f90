# SPDX-License-Identifier: MIT
# Simulated op_test: 2-stage fused MoE.
import argparse
import itertools

import torch

import aiter
from aiter import ActivationType, QuantType, dtypes
from aiter._sim import perf_model
from aiter.test_common import checkAllclose, log_args, log_summary


def str2ActivationType(s):
    for act in ActivationType:
        if act.name.lower() == str(s).lower():
            return act
    raise argparse.ArgumentTypeError(f"invalid activation type: {s}")


#@ if current
def test_fmoe(dtype, token, model_dim, inter_dim, E, topk, actType, qType, AQDType, WQDType, use_g1u1=True,
              doweight_stage1=False, hidden_pad=0, intermediate_pad=0, preshuffle=True, gateMode=0,
              strict_accuracy=False, check_aot_cache=False, swiglu_limit=None, beta=None, linear_beta=None,
              kernel_bench=False, disable_stage2_bias=False, ref_dtype=dtypes.bf16):
    callargs = {"dtype": dtype, "token": token, "model_dim": model_dim, "inter_dim": inter_dim, "E": E,
                "topk": topk, "actType": int(actType), "gateMode": gateMode, "qType": int(qType),
                "AQDType": AQDType, "WQDType": WQDType, "use_g1u1": use_g1u1,
                "doweight_stage1": doweight_stage1, "hidden_pad": hidden_pad,
                "intermediate_pad": intermediate_pad, "preshuffle": preshuffle,
                "strict_accuracy": strict_accuracy, "check_aot_cache": check_aot_cache,
                "swiglu_limit": swiglu_limit, "beta": beta, "linear_beta": linear_beta,
                "kernel_bench": kernel_bench, "disable_stage2_bias": disable_stage2_bias, "ref_dtype": ref_dtype}
#@ endif
#@ if legacy
def test_fmoe(dtype, token, model_dim, inter_dim, E, topk, actType, qType, AQDType, WQDType, use_g1u1=True,
              doweight_stage1=False, hidden_pad=0, intermediate_pad=0, preshuffle=False):
    callargs = {"dtype": dtype, "token": token, "model_dim": model_dim, "inter_dim": inter_dim, "E": E,
                "topk": topk, "actType": int(actType), "qType": int(qType), "AQDType": AQDType,
                "WQDType": WQDType, "use_g1u1": use_g1u1, "doweight_stage1": doweight_stage1,
                "hidden_pad": hidden_pad, "intermediate_pad": intermediate_pad, "preshuffle": preshuffle}
#@ endif
    log_args("test_fmoe", callargs)
    us2 = aiter.fused_moe(token, model_dim, inter_dim, E, topk, dtype, AQDType, WQDType, qType, use_g1u1,
                          actType, doweight_stage1, preshuffle)
    tflops = token * model_dim * inter_dim * 3 * topk * 2 / us2 / 1000 / 1000
    err = checkAllclose(msg=f"ck_moe_2stages:{us2:>8.2f} us, {tflops:>8.2f} tflops......(quant:{AQDType})")
    ret = dict(callargs)
#@ if current
    ret.update({"us": us2, "logits_diff": err})
#@ endif
#@ if legacy
    ret.update({"us": us2, "err": err})
#@ endif
    return ret


l_dtype = ["bf16", "fp16"]
l_quant = [
    (QuantType.No, None, None),  # a16w16
    (QuantType.per_Tensor, dtypes.fp8, dtypes.fp8),  # a8w8
    (QuantType.per_Token, dtypes.fp8, dtypes.fp8),  # a8w8
    (QuantType.per_Token, dtypes.fp8, torch.int4),  # a8w4
    (QuantType.per_1x32, dtypes.fp4x2, dtypes.fp4x2),  # a4w4
    (QuantType.per_128x128, dtypes.fp8, dtypes.fp8),  # a8w8
    (QuantType.per_1x32, dtypes.bf16, dtypes.fp4x2),  # a16w4
    (QuantType.per_1x32, dtypes.fp8, dtypes.fp4x2),  # a8w4
#@ if newest
    (QuantType.per_1x32, dtypes.bf16, dtypes.i4x2),  # a16wi4
    (QuantType.per_1x32, dtypes.fp8, dtypes.fp8),  # mxfp8
#@ endif
]

parser = argparse.ArgumentParser(
    formatter_class=argparse.RawTextHelpFormatter,
    description="select test",
)
parser.add_argument("-d", "--dtype", type=dtypes.str2Dtype, choices=[dtypes.d_dtypes[key] for key in l_dtype],
                    nargs="*", default=[dtypes.bf16], metavar="{bf16, fp16}",
                    help="""Data type.
    e.g.: -d bf16""")
parser.add_argument("-dim", type=dtypes.str2tuple, nargs="*", default=[(7168, 256)],
                    help="""Model dimension.
    e.g.: -dim 6144,4096""")
#@ if current
parser.add_argument(
    "-t",
    "--tokenNum",
    type=int,
    nargs="*",
    choices=[1, 3, 5, 16, 32, 64, 128, 256, 1024, 4096, 8192, 163840],
    default=[1, 3, 5, 16, 32, 64, 128, 256, 1024, 4096, 8192, 163840],
    help="""Number of tokens.
    e.g.: -t 1024""",
)
#@ endif
#@ if legacy
parser.add_argument(
    "-t",
    "--tokenNum",
    type=int,
    nargs="*",
    default=[1, 3, 5, 16, 32, 64, 128, 256, 1024, 4096, 163840],
    help="""Number of tokens.
    e.g.: -t 1024""",
)
#@ endif
parser.add_argument("-q", "--quant", type=int, choices=range(len(l_quant)),
                    help="""select quantization type:
    """ + "\n    ".join(f"{i} : {q[0]}, {q[1]}, {q[2]}" for i, q in enumerate(l_quant)))
parser.add_argument("-a", "--act", type=str2ActivationType, nargs="*", default=[ActivationType.Silu],
                    help="""Select activation type.
    e.g.: -a silu""")
parser.add_argument("-s", "--doweight_stage1", type=dtypes.str2bool, nargs="*", default=[False],
                    help="""Whether to do weight in stage 1. Default is [False].
    -s f    # False.
    -s t    # True.""")
parser.add_argument("-e", "--expert", type=int, default=257, help="""Number of experts.
    e.g.: -e 8""")
parser.add_argument("-k", "--topk", type=int, default=9, help="""Number of top experts.
    e.g.: -k 2""")
#@ if current
parser.add_argument("-p", "--preshuffle", type=dtypes.str2bool, nargs="*", default=[True],
                    help="""Whether to use pre-shuffle weight mode. Default is [True].""")
parser.add_argument("-hip", "--hidden_intermediate_pad", type=dtypes.str2tuple, nargs="*", default=[(192, 128)],
                    help="""Hidden intermediate pad.
    e.g.: -hip 0,0""")
parser.add_argument("--no-flydsl-csv", dest="no_flydsl_csv", action="store_true",
                    help="do not replay tuned fmoe CSV rows")
parser.add_argument("--csv-filter", dest="csv_filter", nargs="*", default=None, help="filter replayed CSV rows")
parser.add_argument("--no-legacy", dest="no_legacy", action="store_true", help="skip the legacy sweep")
parser.add_argument("--bm16-scale-boundary", dest="bm16_scale_boundary", action="store_true")
parser.add_argument("--swiglu-limit", "-sl", dest="swiglu_limit", type=float, default=None)
parser.add_argument("--beta", type=float, default=None)
parser.add_argument("--linear-beta", dest="linear_beta", type=float, default=None)
parser.add_argument("--kernel", action="store_true", help="per-stage timing")
parser.add_argument("--ref-dtype", dest="ref_dtype", choices=["bf16", "fp32"], default="bf16")
#@ endif
#@ if legacy
parser.add_argument("-p", "--preshuffle", type=dtypes.str2bool, nargs="*", default=[False, True],
                    help="""Whether to use pre-shuffle weight mode. Default is [False, True].""")
parser.add_argument("-hip", "--hidden_intermediate_pad", type=dtypes.str2tuple, nargs="*", default=[(0, 0)],
                    help="""Hidden intermediate pad.
    e.g.: -hip 0,0""")
#@ endif

args = parser.parse_args()
l_q = l_quant if args.quant is None else [l_quant[args.quant]]

df = []
cases = 0
for dtype, (model_dim, inter_dim), (quant_type, aq, wq), act, dw, ps, (hp, ip) in itertools.product(
        args.dtype, args.dim, l_q, args.act, args.doweight_stage1, args.preshuffle,
        args.hidden_intermediate_pad):
    for m in args.tokenNum:
        cases += 1
        ret = test_fmoe(dtype, m, model_dim, inter_dim, args.expert, args.topk, act, quant_type,
                        aq if aq is not None else dtype, wq if wq is not None else dtype,
                        use_g1u1=True, doweight_stage1=dw, hidden_pad=hp, intermediate_pad=ip, preshuffle=ps)
        df.append(ret)
#@ if current
aiter.logger.info("moe_2stage: scanned %d cases, recorded %d results (skipped %d)", cases, len(df), cases - len(df))
#@ endif
log_summary("moe_2stage", df)
