"""aiter/fhmoe.py (simulated; ROCm/aiter eb326e45): FHMoE dispatch reads its dedicated table
(AITER_CONFIG_FHMOE, tuned_fhmoe.csv) for two contracts and RAISES where the table does not cover a token
count: no miss line, no fallback (aiter-after-v0.1.20.md §2.2, §4). Stdlib only."""

import csv
import functools
import os
import re

DSV4 = (7168, 384, 385, 7)
HY4 = (6144, 256, 257, 9)
_PADDED_M_TIERS = [32768, 131072]     # aiter/fused_moe.py
# aiter/ops/flydsl/moe_kernels.py get_flydsl_kernel_params: what a name must look like to parse
_FLYDSL = re.compile(r"flydsl_moe([12])_a([a-z0-9]+)_w([a-z0-9]+)_[a-z0-9]+_t(\d+)x(\d+)x(\d+)((?:_[a-z]+\d*)*)$")


def nextPow2(n):
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def get_padded_M(M):
    if M < _PADDED_M_TIERS[0]:
        return nextPow2(M)
    for tier in reversed(_PADDED_M_TIERS):
        if M >= tier:
            return tier
    return _PADDED_M_TIERS[0]


def get_flydsl_kernel_params(name):
    m = _FLYDSL.match(str(name or ""))
    if not m:
        return None
    flags = m.group(7)
    sbm = re.search(r"_sbm(\d+)", flags)
    return {"stage": int(m.group(1)), "a_dtype": m.group(2), "b_dtype": m.group(3), "tile_m": int(m.group(4)),
            "tile_n": int(m.group(5)), "tile_k": int(m.group(6)), "sort_block_m": int(sbm.group(1)) if sbm else 0,
            "gate_mode": "interleave" if "_gui" in flags else "separated"}


def _fhmoe_config_file():
    from aiter.jit import core
    core.CONFIG_FILES.setdefault("AITER_CONFIG_FHMOE", "tuned_fhmoe")
    return core.AITER_CONFIGS.AITER_CONFIG_FHMOE_FILE


@functools.lru_cache(maxsize=None)
def _rows(config_file):
    with open(config_file, newline="") as fh:
        return tuple(dict(r) for r in csv.DictReader(fh))


def _row(config_file, token, dims, q_dtype_w):
    for r in _rows(config_file):
        try:
            if (int(r["token"]), int(r["model_dim"]), int(r["inter_dim"]), int(r["expert"]),
                    int(r["topk"])) == (token,) + dims and r["q_dtype_w"] == q_dtype_w \
                    and r["gate_mode"] == "GateMode.INTERLEAVE" and int(r["doweight_stage1"]) == 0:
                return r
        except (KeyError, ValueError):
            raise ValueError("unreadable FHMoE row")
    raise KeyError(token)


def _is_hy4_metadata(row):
    s1, s2 = get_flydsl_kernel_params(row["kernelName1"]), get_flydsl_kernel_params(row["kernelName2"])
    if s1 is None or s2 is None:
        return False
    block_m = int(row["block_m"])
    return (s1["a_dtype"] == s1["b_dtype"] == "fp8" and s2["a_dtype"] == s2["b_dtype"] == "fp8"
            and s1["gate_mode"] == "interleave" and s1["tile_m"] == block_m
            and (s2["sort_block_m"] or s2["tile_m"]) == block_m)


@functools.lru_cache(maxsize=None)
def _supports(max_tokens, config_file, dims, q_dtype_w, hy4):
    try:
        required = {get_padded_M(1 << e) for e in range(max_tokens.bit_length())} | {get_padded_M(max_tokens)}
        for token in required:
            row = _row(config_file, token, dims, q_dtype_w)
            if get_flydsl_kernel_params(row["kernelName1"]) is None \
                    or get_flydsl_kernel_params(row["kernelName2"]) is None:
                raise NotImplementedError("Heterogeneous MXFP4/FP8 and MXFP8/FP8 experts require valid FlyDSL kernels")
            if hy4 and not _is_hy4_metadata(row):
                return False
    except (ImportError, KeyError, OSError, RuntimeError, TypeError, ValueError, NotImplementedError):
        return False
    return True


def _covered(max_tokens, dims, q_dtype_w, hy4):
    if type(max_tokens) is not int or max_tokens <= 0:
        return False
    try:
        if int(os.environ.get("AITER_BYPASS_TUNE_CONFIG", "0")) != 0:
            return False
        config_file = _fhmoe_config_file()
    except (ImportError, KeyError, OSError, RuntimeError, TypeError, ValueError):
        return False
    return _supports(max_tokens, config_file, dims, q_dtype_w, hy4)


def supports_dsv4_i384_fhmoe(max_tokens):
    return _covered(max_tokens, DSV4, "torch.float4_e2m1fn_x2", False)


def supports_hy4_mxfp8_fhmoe(max_tokens):
    return _covered(max_tokens, HY4, "torch.float8_e4m3fn", True)


def _is_dsv4_i384_fhmoe_contract(model_dim, inter_dim, experts, topk, hidden_pad, intermediate_pad,
                                 gate_interleaved, doweight_stage1):
    return ((model_dim, inter_dim, experts, topk) == DSV4 and hidden_pad == 0 and intermediate_pad == 0
            and gate_interleaved and not doweight_stage1)


def _is_hy4_mxfp8_fhmoe_contract(*, model_dim, inter_dim, experts, topk, routed_mxfp8, hidden_pad,
                                 intermediate_pad, gate_interleaved, doweight_stage1, shared_expert_id):
    return ((model_dim, inter_dim, experts, topk) == HY4 and routed_mxfp8 and hidden_pad == 0
            and intermediate_pad == 0 and gate_interleaved and not doweight_stage1 and shared_expert_id == 256)


def fhmoe_(token_num, model_dim, inter_dim, experts, topk, routed_mxfp8=True, hidden_pad=0, intermediate_pad=0,
           gate_interleaved=True, doweight_stage1=False, shared_expert_id=-1):
    """The dispatch of one call of M=token_num tokens (tensors replaced by their dims): the kernels' names."""
    if _is_dsv4_i384_fhmoe_contract(model_dim, inter_dim, experts, topk, hidden_pad, intermediate_pad,
                                    gate_interleaved, doweight_stage1):
        if not supports_dsv4_i384_fhmoe(token_num):
            raise NotImplementedError(
                "The active FHMoE config does not cover this DSV4 I384 "
                f"token shape: M={token_num}"
            )
        dims, q = DSV4, "torch.float4_e2m1fn_x2"
    elif _is_hy4_mxfp8_fhmoe_contract(model_dim=model_dim, inter_dim=inter_dim, experts=experts, topk=topk,
                                      routed_mxfp8=routed_mxfp8, hidden_pad=hidden_pad,
                                      intermediate_pad=intermediate_pad, gate_interleaved=gate_interleaved,
                                      doweight_stage1=doweight_stage1, shared_expert_id=shared_expert_id):
        if not supports_hy4_mxfp8_fhmoe(token_num):
            raise NotImplementedError(
                "The active FHMoE config does not cover this HY4 MXFP8 "
                f"token shape: M={token_num}"
            )
        dims, q = HY4, "torch.float8_e4m3fn"
    else:
        return None     # the generic fused-MoE path (not simulated here)
    row = _row(_fhmoe_config_file(), get_padded_M(token_num), dims, q)
    return row["kernelName1"], row["kernelName2"]
