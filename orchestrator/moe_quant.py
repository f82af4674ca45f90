"""MoE quant types as AITER names them: the op_test's ``-q`` index per (QuantType, activation dtype, weight dtype)
(aiter-formats.md §4.6), dtype families, and the versions that ignore tuned rows for a MoE shape (§3.3)."""

from __future__ import annotations

from .aiter_profiles import AiterProfile, profile_from_facts


# MoE quant index of op_tests/test_moe_2stage.py `-q` (aiter-formats.md §4.6 l_quant), keyed by
# (QuantType, q_dtype_a family, q_dtype_w family). per_1x128 in logs == per_128x128 in the test.
MOE_QUANT_INDEX: dict[tuple[str, str, str], int] = {
    ("QuantType.No", "bf16", "bf16"): 0,
    ("QuantType.per_Tensor", "fp8", "fp8"): 1,
    ("QuantType.per_Token", "fp8", "fp8"): 2,
    ("QuantType.per_Token", "fp8", "int4"): 3,
    ("QuantType.per_1x32", "fp4x2", "fp4x2"): 4,
    ("QuantType.per_1x128", "fp8", "fp8"): 5,
    ("QuantType.per_128x128", "fp8", "fp8"): 5,
    ("QuantType.per_1x32", "bf16", "fp4x2"): 6,
    ("QuantType.per_1x32", "fp8", "fp4x2"): 7,
    ("QuantType.per_1x32", "bf16", "int4"): 8,      # a16wi4 (l_quant at HEAD, after v0.1.20)
    ("QuantType.per_1x32", "fp8", "fp8"): 9,        # MXFP8 (per_1x32 fp8/fp8, HEAD)
}


def dtype_family(dtype: str) -> str:
    """'torch.float8_e4m3fnuz' -> 'fp8'; 'torch.float4_e2m1fn_x2' -> 'fp4x2'; 'torch.bfloat16' -> 'bf16'."""
    d = dtype.replace("torch.", "").strip("'\" ")
    if d.startswith("float8"):
        return "fp8"
    if d.startswith("float4") or d == "fp4x2":
        return "fp4x2"
    if d in ("bfloat16", "bf16"):
        return "bf16"
    if d in ("int4", "int4x2", "i4x2"):
        return "int4"
    if d in ("int8", "i8"):
        return "int8"
    if d in ("None", "none", ""):
        return "bf16"
    return d


def moe_quant_index(q_type: str, q_dtype_a: str, q_dtype_w: str) -> int | None:
    return MOE_QUANT_INDEX.get((q_type, dtype_family(q_dtype_a), dtype_family(q_dtype_w)))


def is_moe_blockscale(shape: dict) -> bool:
    """The problem type the v0.1.9-v0.1.12 bypass rule targets (aiter-formats.md §3.3)."""
    return (
        str(shape.get("act_type", "")).endswith("Silu")
        and dtype_family(str(shape.get("dtype", ""))) == "bf16"
        and dtype_family(str(shape.get("q_dtype_a", ""))) == "fp8"
        and dtype_family(str(shape.get("q_dtype_w", ""))) == "fp8"
        and str(shape.get("q_type", "")).endswith("per_1x128")
    )


def moe_bypassed(shape: dict, profile: AiterProfile) -> bool:
    """True when this AITER version ignores tuned rows for this MoE shape at runtime."""
    if profile.moe_blockscale_bypass == "none" or not is_moe_blockscale(shape):
        return False
    if profile.moe_blockscale_bypass == "all":
        return True
    return int(shape["token"]) * int(shape["topk"]) <= 128


# ---- the fused-MoE tuner's objective (issue 36): what a MoE row's `us` means ------------------------------
OBJECTIVE_SKIP = "us measured under another objective: not compared"
OBJECTIVES = {"stage_sum": "stage1 + stage2 as run",
              "stage_sum+quant": "stage1 + stage2, non-fused stage-1 kernels charged the extra quant launch"}


def objective_of(facts) -> str | None:
    """The objective a node's fused-MoE tuner had when ``facts`` (a job's facts, or a dict of them) were taken:
    probed from the tuner's source, else the version's (aiter_profiles ``moe_objective``); None without a version
    or probe (a table nobody tuned through tune-remote)."""
    get = facts.get if hasattr(facts, "get") else (lambda k, d=None: getattr(facts, k, d))
    probes = get("probes") or {}
    if probes.get("moe_objective"):
        return str(probes["moe_objective"])
    if not (get("version") or get("version_raw")):
        return None
    return profile_from_facts({"version": get("version"), "version_raw": get("version_raw"), "probes": {}}).moe_objective


def comparable(a: str | None, b: str | None) -> bool:
    """Two MoE ``us`` compare only under one objective; an unknown side (None) says nothing: compared as before."""
    return a is None or b is None or a == b


def skip_line(what: str, a: str, b: str) -> str:
    """The one line said where a comparison is skipped."""
    return f"{what}: {OBJECTIVE_SKIP} ({a} then, {b} now)"
