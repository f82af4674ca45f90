"""AITER's registered ops as a torch-profiler trace names them, and the shape key each call looks up.

Stdlib only, Python >= 3.8. An op call is a ``cpu_op`` event whose ``name`` is the op's registration
(``aiter::<python function>``: ``compile_ops`` / ``torch_compile_guard`` register each op under the
``aiter`` namespace with the Python function's name) and whose ``args`` carry, with ``record_shapes``,
``Input Dims`` (one list per argument, in the schema's order), ``Input type`` (the C++ scalar type of
each tensor: ``c10::BFloat16``, ``c10::Float8_e4m3fnuz``, ``signed char`` ...) and ``Concrete Inputs``
(scalar arguments as text). ``shape_of(name, args)`` -> ``(variant, shape)``: the same key columns the
tuned CSV is read by (docs/internals.md "Shapes"), M / token as the call had them (the laptop snaps them
to the runtime's padded-M / token buckets, steps/shape_rules.py), or ``None`` for any other op.
"""

# torch's C++ scalar type names (c10::ScalarType's C++ types, as the profiler prints them) -> torch dtypes
_CTYPE = {
    "c10::BFloat16": "torch.bfloat16", "c10::Half": "torch.float16", "float": "torch.float32",
    "double": "torch.float64", "signed char": "torch.int8", "unsigned char": "torch.uint8",
    "int": "torch.int32", "long int": "torch.int64", "bool": "torch.bool",
    "c10::Float8_e4m3fn": "torch.float8_e4m3fn", "c10::Float8_e4m3fnuz": "torch.float8_e4m3fnuz",
    "c10::Float8_e5m2": "torch.float8_e5m2", "c10::Float8_e5m2fnuz": "torch.float8_e5m2fnuz",
    "c10::Float4_e2m1fn_x2": "torch.float4_e2m1fn_x2", "unsigned int": "torch.uint32",
}
# aiter/utility/dtypes enums as the custom op passes them (ints): ActivationType, QuantType
ACTIVATION = {-1: "No", 0: "Silu", 1: "Gelu", 2: "Swiglu"}
QUANT = {0: "No", 1: "per_Tensor", 2: "per_Token", 3: "per_1x32", 4: "per_1x128", 5: "per_128x128"}
_QUANT_REMAP = {"per_128x128": "per_1x128"}      # fused_moe.quant_remap: the runtime looks the 1x128 row up

# op registration -> (variant, kind). Dense: XQ [M, K], WQ [N, K]; batched: [B, M, K], [B, N, K];
# a4w4: A [M, K/2], B [N, K/2] (fp4x2 packs two values a byte).
GEMM_OPS = {
    "aiter::gemm_a8w8_blockscale": ("a8w8_blockscale", "mnk"),
    "aiter::gemm_a8w8_blockscale_bpreshuffle": ("a8w8_blockscale_bpreshuffle", "mnk"),
    "aiter::gemm_a8w8": ("a8w8", "mnk_q"),
    "aiter::gemm_a8w8_bpreshuffle": ("a8w8_bpreshuffle", "mnk_q"),
    "aiter::gemm_a4w4": ("a4w4_blockscale", "mnk_x2"),
    "aiter::gemm_a4w4_blockscale": ("a4w4_blockscale", "mnk_x2"),
    "aiter::batched_gemm_a8w8": ("batched_a8w8", "bmnk"),
    "aiter::batched_gemm_bf16": ("batched_bf16", "bmnk"),
}
# the compiled entry points (``compile_ops`` on the ``*_ck`` / ``*_cktile`` stubs, aiter/ops/gemm_op_a8w8.py)
# take the same leading XQ, WQ: a call reached through the Python wrapper nests inside it and is not counted twice
for _op, _spec in list(GEMM_OPS.items()):
    for _suffix in ("_ck", "_cktile"):
        GEMM_OPS[_op + _suffix] = _spec
MOE_OPS = {"aiter::fused_moe_": "moe_2stages"}
VARIANT_OPS = {}
for _op, (_v, _) in GEMM_OPS.items():
    VARIANT_OPS.setdefault(_v, []).append(_op)
for _op, _v in MOE_OPS.items():
    VARIANT_OPS.setdefault(_v, []).append(_op)
ALL_OPS = frozenset(GEMM_OPS) | frozenset(MOE_OPS)


class NoShapes(Exception):
    """An AITER op call without ``Input Dims``: the trace was recorded without ``record_shapes``."""


def dtype_of(ctype):
    return _CTYPE.get(ctype, ctype if str(ctype).startswith("torch.") else "torch.%s" % ctype)


def _dims(args):
    dims = args.get("Input Dims")
    if not isinstance(dims, list) or not dims or not any(isinstance(d, list) and d for d in dims):
        raise NoShapes()
    return dims


def _scalar(args, i, default):
    vals = args.get("Concrete Inputs") or []
    if i < len(vals) and vals[i] not in ("", None):
        text = str(vals[i]).strip()
        if text in ("True", "False"):
            return int(text == "True")
        try:
            return int(float(text))
        except ValueError:
            return default
    return default


def _gemm(kind, dims, types):
    a, b = dims[0], dims[1]
    if kind == "bmnk":
        if len(a) != 3 or len(b) != 3:
            return None
        return {"b": int(a[0]), "m": int(a[1]), "n": int(b[1]), "k": int(a[2])}
    if len(a) != 2 or len(b) != 2:
        return None
    shape = {"m": int(a[0]), "n": int(b[0]), "k": int(a[1]) * (2 if kind == "mnk_x2" else 1)}
    if kind == "mnk_q" and len(types) > 1 and types[1]:
        shape["q_dtype_w"] = dtype_of(types[1])
    return shape


def _moe(dims, types, args):
    """fused_moe_(hidden_states, w1 [E, inter*2|inter, model_dim], w2 [E, model_dim, inter], topk_weight,
    topk_ids [token, topk], expert_mask, activation, quant_type, doweight_stage1, ...): the tuple
    ``get_2stage_cfgs`` looks up (fused_moe.py)."""
    if len(dims) < 5 or len(dims[1]) != 3 or len(dims[2]) != 3 or len(dims[4]) != 2:
        return None
    w1, w2, ids = dims[1], dims[2], dims[4]
    expert, model_dim = int(w2[0]), int(w2[1])
    inter = int(w2[2]) * max(1, model_dim // max(1, int(w1[2])))        # get_inter_dim's int4 packing
    act = ACTIVATION.get(_scalar(args, 6, 0), "Silu")
    quant = QUANT.get(_scalar(args, 7, 0), "No")
    quant = _QUANT_REMAP.get(quant, quant)
    dtype = dtype_of(types[0]) if types and types[0] else "torch.bfloat16"
    q_w = dtype_of(types[1]) if len(types) > 1 and types[1] else dtype
    q_a = q_w if q_w != "torch.uint32" else "torch.float8_e4m3fnuz"
    if quant == "per_1x32" and act != "Swiglu":
        q_a = "torch.float4_e2m1fn_x2"
    return {"token": int(ids[0]), "model_dim": model_dim, "inter_dim": inter, "expert": expert,
            "topk": int(ids[1]), "act_type": "ActivationType.%s" % act, "dtype": dtype, "q_dtype_a": q_a,
            "q_dtype_w": q_w, "q_type": "QuantType.%s" % quant, "use_g1u1": int(int(w1[1]) != inter),
            "doweight_stage1": _scalar(args, 8, 0)}


def shape_of(name, args):
    """``(variant, shape)`` of one cpu_op event, None when it is no AITER op this tool tunes (or its dims do
    not fit the op's schema); raises ``NoShapes`` for an AITER op recorded without shapes."""
    if name not in ALL_OPS:
        return None
    dims = _dims(args or {})
    types = (args or {}).get("Input type") or []
    if name in MOE_OPS:
        shape = _moe(dims, types, args)
        return (MOE_OPS[name], shape) if shape else None
    variant, kind = GEMM_OPS[name]
    shape = _gemm(kind, dims, types)
    return (variant, shape) if shape else None
