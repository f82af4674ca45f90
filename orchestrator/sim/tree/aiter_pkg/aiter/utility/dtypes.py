"""aiter.utility.dtypes (simulated): dtype aliases and the argparse converters op_tests use."""

import argparse

import torch

from ..jit.utils.chip_info import get_gfx

bf16 = torch.bfloat16
fp16 = torch.float16
fp32 = torch.float32
i8 = torch.int8
i32 = torch.int32
u8 = torch.uint8
fp4x2 = torch.float4_e2m1fn_x2
i4x2 = torch.int4
fp8 = torch.float8_e4m3fnuz if get_gfx() == "gfx942" else torch.float8_e4m3fn
fp8_e8m0 = torch.float8_e8m0fnu

d_dtypes = {"fp32": fp32, "fp16": fp16, "bf16": bf16, "i32": i32, "i8": i8, "u8": u8,
            "fp8": fp8, "fp4x2": fp4x2, "i4x2": i4x2, "fp8_e8m0": fp8_e8m0}


def str2bool(v):
    if isinstance(v, bool):
        return v
    if v.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if v.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError("Boolean value expected.")


def str2tuple(v):
    try:
        parts = v.strip("()").split(",")
        return tuple(int(p.strip()) for p in parts if p.strip())
    except Exception as e:
        raise argparse.ArgumentTypeError(f"invalid format of input: {v}") from e


def str2Dtype(v):
    def _convert(s):
        if s.lower() not in d_dtypes:
            raise ValueError(f"'{s}' is not a valid data type")
        return d_dtypes[s.lower()]

    if isinstance(v, str):
        if "," in v:
            return tuple(_convert(p.strip()) for p in v.split(",") if p.strip())
        return _convert(v)
    return v
