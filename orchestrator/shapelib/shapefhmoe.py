"""FHMoE's coverage failure as a shape source. Stdlib only, Python >= 3.8.

AITER's fused heterogeneous MoE (``aiter/fhmoe.py`` at ROCm/aiter eb326e45) logs no miss: where the active
``AITER_CONFIG_FHMOE`` table lacks a token bucket of one of its two dedicated contracts, ``fhmoe_`` raises

    NotImplementedError: The active FHMoE config does not cover this DSV4 I384 token shape: M=3000
    NotImplementedError: The active FHMoE config does not cover this HY4 MXFP8 token shape: M=3000

(``M`` = the tensors' token count). Its coverage check (``_supports_*_fhmoe_config``) asks the table for every
padded tier ``get_padded_M(2**e)`` below M and for ``get_padded_M(M)`` (``aiter/fused_moe.py``: the next power
of two below 32768, then the tiers 32768 / 131072). A raise line gives the shape of ``get_padded_M(M)``, the
bucket the call looks up (the lower tiers are checked against the live table when the job is prepared).

The tuner ``op_tests/tuners/tune_fhmoe.py`` (eb326e45) tunes ONE contract, its ``Contract()``: HY4 MXFP8
(6144 / 256, 256 routed experts + 1 shared, topk 8 + 1, MXFP8 routed weights). A DSV4 I384 raise names a shape
that AITER cannot tune: it is counted as refused, never tuned.
"""

from __future__ import annotations

import re

FHMOE_VARIANT = "fhmoe"
NEEDLE = "does not cover this"
NEEDLE_B = b"does not cover this"
RAISE = re.compile(r"The active FHMoE config does not cover this (DSV4 I384|HY4 MXFP8) token shape: M=(\d+)")

_COMMON = {"act_type": "ActivationType.Silu", "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn",
           "q_type": "QuantType.per_1x32", "use_g1u1": 1, "doweight_stage1": 0}
# the key columns of each contract (aiter/fhmoe.py _is_*_fhmoe_contract, the rows of tuned_fhmoe.csv)
CONTRACTS = {
    "HY4 MXFP8": dict(model_dim=6144, inter_dim=256, expert=257, topk=9, q_dtype_w="torch.float8_e4m3fn",
                      **_COMMON),
    "DSV4 I384": dict(model_dim=7168, inter_dim=384, expert=385, topk=7, q_dtype_w="torch.float4_e2m1fn_x2",
                      **_COMMON),
}
# the non-key columns every row of a contract holds (the tuner's _matches reads them too)
CONTRACT_EXTRA = {"HY4 MXFP8": {"gfx": "gfx950", "cu_num": "256", "shared_expert_id": "256", "hidden_pad": "0",
                                "intermediate_pad": "0", "gate_mode": "GateMode.INTERLEAVE", "ksplit": "0"},
                  "DSV4 I384": {"gfx": "gfx950", "cu_num": "256", "shared_expert_id": "384", "hidden_pad": "0",
                                "intermediate_pad": "0", "gate_mode": "GateMode.INTERLEAVE", "ksplit": "0"}}
TUNABLE = "HY4 MXFP8"          # tune_fhmoe.py's Contract() at eb326e45
KEY_ORDER = ("token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype", "q_dtype_a", "q_dtype_w",
             "q_type", "use_g1u1", "doweight_stage1")
PADDED_M_TIERS = (32768, 131072)    # aiter/fused_moe.py _PADDED_M_TIERS


def padded_m(m):
    """aiter/fused_moe.py get_padded_M: nextPow2 below the first tier, else the largest tier <= M."""
    m = int(m)
    if m < PADDED_M_TIERS[0]:
        return 1 if m <= 1 else 1 << (m - 1).bit_length()
    for tier in reversed(PADDED_M_TIERS):
        if m >= tier:
            return tier
    return PADDED_M_TIERS[0]


def required_buckets(m):
    """The token rows the runtime's coverage check asks the table for before it serves M."""
    m = int(m)
    return sorted({padded_m(1 << e) for e in range(m.bit_length())} | {padded_m(m)})


def contract_of(shape):
    """The contract name whose key columns a shape has (token aside), or None."""
    for name, cols in CONTRACTS.items():
        if all(str(shape.get(k)) == str(v) for k, v in cols.items()):
            return name
    return None


def parse_raise(message):
    """(contract name, shape, meta) of a raise line, or None."""
    m = RAISE.search(message)
    if not m:
        return None
    name, runtime_m = m.group(1), int(m.group(2))
    cols = dict(CONTRACTS[name], token=padded_m(runtime_m))
    shape = dict((k, cols[k]) for k in KEY_ORDER)
    return name, shape, {"m": runtime_m, "contract": name, "gfx": "gfx950", "cu_num": 256}
