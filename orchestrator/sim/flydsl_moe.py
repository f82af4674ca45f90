"""The simulated ``--mxfp4-flydsl`` path of the fused-MoE tuner (issue 30, aiter#5625), copied beside
perf_model.py on the node: FlyDSL MXFP4 kernels timed with the quantization inline (so the tuner's ``us`` is
not comparable with the standard path's), and their own end-to-end time in the op_test: faster than the
standard row for some shapes, slower for others (deterministic per shape), so a per-point merge by the
end-to-end benchmark beats either path alone."""

import hashlib

from . import perf_model

PREFIX = "flydsl_moe_mxfp4"
INLINE_QUANT = 1.25     # the tuner's time includes the inline quant: larger than the standard path's us


def is_fp4(shape: dict) -> bool:
    s = {k.lower(): v for k, v in shape.items()}
    return str(s.get("q_type", "")).endswith("per_1x32") and ("float4" in str(s.get("q_dtype_w", ""))
                                                              or "fp4" in str(s.get("q_dtype_w", "")))


def e2e_factor(shape: dict, gfx: str = "gfx950", cu_num: int = 256) -> float:
    """End-to-end time of the shape's FlyDSL row relative to its standard row (0.78 .. 1.18)."""
    s = perf_model.normalize_shape("moe_2stages", shape)
    text = "|".join(["flydsl", str(gfx), str(int(cu_num))] + ["%s=%s" % (k, s[k]) for k in sorted(s)])
    u = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / float(1 << 64)
    return 0.78 + 0.40 * u


def tune_result(shape: dict, gfx: str = "gfx950", cu_num: int = 256):
    """The flydsl path's row for an FP4 shape (None: not an MXFP4 shape, or no valid kernel)."""
    std = perf_model.tune_result("moe_2stages", shape, gfx, cu_num)
    if std is None or not is_fp4(shape):
        return None
    us = round(std["us"] * INLINE_QUANT, 4)
    us1 = round(us * 0.6, 4)
    bm = std["block_m"]
    return {**std, "us": us, "us1": us1, "us2": round(us - us1, 4),
            "kernelName1": "%s_gemm1_%dx256x256_silu_inlinequant" % (PREFIX, bm),
            "kernelName2": "%s_v2_gemm2_%dx256x256_atomic" % (PREFIX, bm),
            "tflops": round(std["tflops"] / INLINE_QUANT, 2), "bw": round(std["bw"] / INLINE_QUANT, 2)}


def is_flydsl_row(cfg) -> bool:
    return str((cfg or {}).get("kernelName1", "")).startswith(PREFIX)


# ---- the fused-MoE tuner's objective (issue 36; ROCm/aiter deefb11e/e991be1c, v0.1.12/v0.1.13, and
# test_fmoe_tune_objective.py, 1c87c39f): us = us1 + us2, where a per_1x32 row's stage-1 kernel that does not
# fuse the intermediate quant (name without `_fp4` / `_fp8`) is charged the separate quant(+sort) launch stage 2
# needs. The simulated tuner charges it from the current profile on (v0.1.20 inline, head the named helpers);
# legacy (v0.1.11) reports us1 + us2 as run.
FUSED_INTERMEDIATE_SUFFIXES = ("_fp4", "_fp8")


def fused_suffix(shape: dict):
    """The fused-stage-1 marker a per_1x32 MoE shape's quant needs ('_fp4' for FP4 activations, '_fp8' for FP8),
    None where the tuner charges nothing (other quant types, int4 weights, bf16 activations)."""
    s = {k.lower(): str(v) for k, v in shape.items()}
    if not s.get("q_type", "").endswith("per_1x32") or "int4" in s.get("q_dtype_w", "") \
            or "i4" in s.get("q_dtype_w", ""):
        return None
    a = s.get("q_dtype_a", "")
    if "float4" in a or "fp4" in a:
        return "_fp4"
    if "float8" in a or "fp8" in a:
        return "_fp8"
    return None


def quant_launch_us(shape: dict, block_m) -> float:
    """The separate quant(+sort) launch's time for one block_m (deterministic; a few us)."""
    s = {k.lower(): v for k, v in shape.items()}
    rows = int(s.get("token", 1)) * int(s.get("topk", 1))
    return round(1.5 + rows * int(s.get("inter_dim", 1)) / 4.0e6 + int(block_m) / 256.0, 4)


def charged(res, shape: dict):
    """A tuner row under the charged objective (what the current/newest/head tuners write), None stays None."""
    suffix = fused_suffix(shape)
    if res is None or suffix is None or str(res.get("kernelName1", "")).endswith(suffix):
        return res
    out = dict(res)
    out["us1"] = round(float(res["us1"]) + quant_launch_us(shape, res["block_m"]), 4)
    out["us"] = round(out["us1"] + float(res["us2"]), 4)
    for c in ("tflops", "bw"):
        if res.get(c) is not None:
            out[c] = round(float(res[c]) * float(res["us"]) / out["us"], 2)
    return out
