"""aiter/fused_moe.py (simulated): tuned-config lookup of the 2-stage fused MoE and its log lines.

The MoE kernels do not depend on the tuned CSV at build time (module_moe_ck2stages is generated without
it), so -- as in real AITER -- tuned_fmoe.csv rows take effect at the next process start, no rebuild.
"""

import functools
import os
import re

from . import logger
from ._sim import LEGACY
from ._sim.frame import norm, read_csv
from ._sim import flydsl_moe
from ._sim import measured_us as bench_us
from .jit.core import AITER_CONFIGS, AITER_CSRC_DIR, PY, bd_dir, get_module, mp_lock
from .jit.utils.chip_info import get_cu_num, get_gfx

LEGACY_CU_NUM_TO_GFX = {256: "gfx950", 80: "gfx942", 304: "gfx942"}


class _PybindEnum(object):
    """A pybind11 enum value: repr '<ActivationType.Silu: 0>', str 'ActivationType.Silu', hash = int."""

    def __init__(self, typename, name, value):
        self._typename, self.name, self.value = typename, name, value

    def __repr__(self):
        return f"<{self._typename}.{self.name}: {self.value}>"

    def __str__(self):
        return f"{self._typename}.{self.name}"

    def __int__(self):
        return self.value

    __index__ = __int__

    def __hash__(self):
        return hash(self.value)

    def __eq__(self, other):
        return isinstance(other, _PybindEnum) and other._typename == self._typename and other.value == self.value

    def __ne__(self, other):
        return not self.__eq__(other)


class _EnumType(object):
    def __init__(self, typename, members):
        self._members = {}
        for name, value in members:
            v = _PybindEnum(typename, name, value)
            self._members[name] = v
            setattr(self, name, v)

    def __iter__(self):
        return iter(self._members.values())

    def __getitem__(self, name):
        return self._members[name]


#@ if !newest
ActivationType = _EnumType("ActivationType", [("No", -1), ("Silu", 0), ("Gelu", 1), ("Swiglu", 2),
                                              ("Situv2", 3)])
#@ endif
#@ if newest
# GeluTanh = 4: ROCm/aiter #4620 (aiter-after-v0.1.20.md §2.2)
ActivationType = _EnumType("ActivationType", [("No", -1), ("Silu", 0), ("Gelu", 1), ("Swiglu", 2),
                                              ("Situv2", 3), ("GeluTanh", 4)])
#@ endif
QuantType = _EnumType("QuantType", [("No", 0), ("per_Tensor", 1), ("per_Token", 2), ("per_1x32", 3),
                                    ("per_1x128", 4), ("per_128x128", 5), ("per_256x128", 6),
                                    ("per_1024x128", 7)])

def nextPow2(n):
    if n <= 1:
        return 1
    return 1 << (n - 1).bit_length()


#@ if current
_PADDED_M_TIERS = [32768, 131072]


def get_padded_M(M):
    if M < _PADDED_M_TIERS[0]:
        return nextPow2(M)
    for tier in reversed(_PADDED_M_TIERS):
        if M >= tier:
            return tier
    return _PADDED_M_TIERS[0]
#@ endif
#@ if legacy
def get_padded_M(M):
    # ROCm/aiter v0.1.11 aiter/fused_moe.py (the legacy profile's release, l.607; v0.1.10 the same; v0.1.12
    # 0d38e26f: nextPow2 below 32768, else 32768)
    padded_m = M
    if M >= 1 and M <= 16:
        # decoding policy may be changed in the future.
        padded_m = nextPow2(padded_m)
    elif M < 1024:
        padded_m = nextPow2(padded_m)
    elif M < 2048:
        padded_m = 1024
    elif M < 16384:
        padded_m = 2048
    else:
        padded_m = 16384
    return padded_m
#@ endif


_MOE_SHAPE_COLS = ("token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype", "q_dtype_a",
                   "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1")


@functools.lru_cache(maxsize=None)
def _cfg_table(tune_file):
    cols, rows = read_csv(tune_file)
    exact, loose = {}, {}
    for r in rows:
        if not LEGACY and r.get("_tag"):
            continue  # flydsl_fallback etc. are filtered out at load
        if any(c not in r for c in ("cu_num",) + _MOE_SHAPE_COLS):
            continue
        gfx = r.get("gfx") or LEGACY_CU_NUM_TO_GFX.get(norm(r["cu_num"]), get_gfx())
        vals = [norm(r[c]) for c in _MOE_SHAPE_COLS]
        head = (norm(r["cu_num"]),) if LEGACY else (gfx, norm(r["cu_num"]))
        exact.setdefault(head + tuple(vals), r)
        loose_vals = list(vals)
        loose_vals[5] = "__ignore__"
        loose.setdefault(head + tuple(loose_vals), r)
    return exact, loose


def _run_1stage_heuristic(token, topk, expert, q_type):
    m_per_expert = token * topk // max(expert, 1)
    run_1stage = str(q_type) in ("QuantType.per_1x128", "QuantType.per_Token") and m_per_expert <= 16
    block_m = 32 if m_per_expert <= 32 else 64 if m_per_expert <= 256 else 128
    return run_1stage, block_m, m_per_expert < 8


@functools.lru_cache(maxsize=2048)
def get_2stage_cfgs(token, model_dim, inter_dim, expert, topk, dtype, q_dtype_a, q_dtype_w, q_type,
                    use_g1u1, activation, doweight_stage1):
    gfx = get_gfx()
    cu_num = get_cu_num()
    tune_file = AITER_CONFIGS.AITER_CONFIG_FMOE_FILE
#@ if current
    keys = (gfx, cu_num, token, model_dim, inter_dim, expert, topk, activation, str(dtype), str(q_dtype_a),
            str(q_dtype_w), str(q_type), use_g1u1, doweight_stage1)
    head = (gfx, cu_num)
#@ endif
#@ if legacy
    keys = (cu_num, token, model_dim, inter_dim, expert, topk, str(activation), str(dtype), str(q_dtype_a),
            str(q_dtype_w), str(q_type), use_g1u1, doweight_stage1)
    head = (cu_num,)
#@ endif
    exact, loose = _cfg_table(tune_file) if os.path.exists(tune_file) else ({}, {})
    vals = [norm(v) if not isinstance(v, _PybindEnum) else v for v in keys[len(head):]]
    bypass = int(os.environ.get("AITER_BYPASS_TUNE_CONFIG", "0"))

    def use_cfg():
#@ if legacy
        problem_type = (str(activation), str(dtype), str(q_dtype_a), str(q_dtype_w), str(q_type))
        bypass_type = ("ActivationType.Silu", "torch.bfloat16", str(_fp8()), str(_fp8()),
                       "QuantType.per_1x128")
        if problem_type == bypass_type and (token * topk) <= 128:  # bypass tuned
            logger.info("bypass tuned results for fp8 blockscale")
            return False
#@ endif
        return True

    def lookup(exact, loose):
        # activation is the raw pybind enum in this version when it is not a str: it never equals the
        # CSV's string, so the exact lookup misses and the act_type-ignoring fallback finds the row
        cfg = exact.get(head + tuple(vals)) if isinstance(activation, str) or LEGACY else None
        if cfg is None:
            lv = list(vals)
            lv[5] = "__ignore__"
            cfg = loose.get(head + tuple(lv))
#@ if current
        # tier fallback: a token above the first tier not found tries the smaller tiers, largest first
        if cfg is None and token > _PADDED_M_TIERS[0]:
            idx = _PADDED_M_TIERS.index(token) if token in _PADDED_M_TIERS else -1
            for fallback_tier in reversed(_PADDED_M_TIERS[:idx]):
                fv = [norm(fallback_tier)] + list(vals[1:])
                cfg = exact.get(head + tuple(fv)) if isinstance(activation, str) else None
                if cfg is None:
                    fv[5] = "__ignore__"
                    cfg = loose.get(head + tuple(fv))
                if cfg is not None:
                    break
#@ endif
        return cfg

    cfg = lookup(exact, loose) if exact and use_cfg() else None
    config_path = os.path.dirname(tune_file)
    untune_file = os.path.join(config_path, "untuned_fmoe.csv")
    profile_file = os.path.join(config_path, "profile_fmoe.csv")

    # AITER_ONLINE_TUNE (every release, ROCm/aiter fused_moe.py v0.1.11 .. e4048607): the shape goes into
    # untuned_fmoe.csv beside the tuned table, the MoE tuner tunes it (--last) into that table under a lock, the
    # table is read again; still no row (no valid kernel): 'Fmoe tuning not support for (...)' (aiter#3202)
    def MainFunc():
        with open(untune_file, "a") as f:
            if os.path.getsize(untune_file) == 0:
                f.write(
                    "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1"
                )
            q_dtype_ws = q_dtype_w if str(q_dtype_w) != "torch.uint32" else "torch.int4"
            f.write(
                f"\n{token},{model_dim},{inter_dim},{expert},{topk},{activation},{dtype},{q_dtype_a},{q_dtype_ws},{q_type},{int(use_g1u1)},{int(doweight_stage1)}"
            )
        logger.info("\033[34m Start tuning fmoe")
        os.system(
            f"{PY} {AITER_CSRC_DIR}/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py -i {untune_file} -o {tune_file} -o2 {profile_file} --last"
        )

    def FinalFunc():
        logger.info(
            f"[Hint] tuned configs are saved in {tune_file}, you can set AITER_CONFIG_FMOE to this file to use tuned configs"
        )
        logger.info("\033[0m")

    if cfg is None and os.environ.get("AITER_ONLINE_TUNE", "0") == "1":
#@ if current
        lock_name = re.sub(r"[^\w.\-]", "_", str(keys))
        lock_path = os.path.join(bd_dir, f"lock_fmoe_tune_{lock_name}")
#@ endif
#@ if legacy
        lock_path = os.path.join(bd_dir, f"lock_fmoe_tune_{keys}")
#@ endif
        mp_lock(lock_path, MainFunc=MainFunc, FinalFunc=FinalFunc)
        _cfg_table.cache_clear()
        exact, loose = _cfg_table(tune_file) if os.path.exists(tune_file) else ({}, {})
        cfg = lookup(exact, loose) if exact else None
        if cfg is None:
            logger.warning(f"Fmoe tuning not support for {keys}")
    if cfg is None or bypass:
        run_1stage, block_m, use_nt = _run_1stage_heuristic(token, topk, expert, q_type)
        ksplit = 0
#@ if current
        xbf16 = False
        logger.info(
            f"run_1stage = {run_1stage}, xbf16 = {xbf16}, ksplit = {ksplit} q_type = {q_type} block_m = {block_m} use_nt = {use_nt}, estimated_m_per_expert = {token * topk // expert}"
        )
        logger.info(
            f"[fused_moe] using {'1stage' if run_1stage else '2stage'}{' xbf16' if xbf16 else ''} default for {keys} "
        )
#@ endif
#@ if legacy
        logger.info(
            f"run_1stage = {run_1stage}, ksplit = {ksplit} q_type = {q_type} block_m = {block_m} use_nt = {use_nt}, estimated_m_per_expert = {token * topk // expert}"
        )
        logger.info(f"[fused_moe] using {'1stage' if run_1stage else '2stage'} default for {keys} ")
#@ endif
        return None
    kernelName1 = cfg.get("kernelName1", "")
    kernelName2 = cfg.get("kernelName2", "")
    run_1stage = norm(cfg.get("run_1stage", 0)) == 1
    tag = f"({kernelName1=}, {kernelName2=})"
#@ if current
    xbf16 = norm(cfg.get("xbf16", 0) or 0) == 1
    logger.info(
        f"[fused_moe] using {'1stage' if run_1stage else '2stage'}{' xbf16' if xbf16 else ''} {tag} for {keys} "
    )
#@ endif
#@ if legacy
    logger.info(f"[fused_moe] using {'1stage' if run_1stage else '2stage'} {tag} for {keys} ")
#@ endif
    return cfg


def _fp8():
    from .utility import dtypes

    return dtypes.fp8


def _short(dt):
    s = str(dt).replace("torch.", "")
    return {"bfloat16": "b16", "float16": "f16", "float4_e2m1fn_x2": "fp4x2", "int4": "i4"}.get(
        s, "f8" if s.startswith("float8") else s)


def fused_moe(token, model_dim, inter_dim, expert, topk, dtype, q_dtype_a, q_dtype_w, q_type,
              use_g1u1=True, activation=None, doweight_stage1=False, preshuffle=True):
    """Run (simulate) the 2-stage fused MoE and return its time in us."""
    if activation is None:
        activation = ActivationType.Silu
    if q_type == QuantType.per_128x128:
        q_type = QuantType.per_1x128  # the block-scale test quant is dispatched as per_1x128
    if q_dtype_a is None:
        q_dtype_a = dtype
    if q_dtype_w is None:
        q_dtype_w = dtype
    padded = get_padded_M(int(token))
    act_arg = activation if not LEGACY else activation
    cfg = get_2stage_cfgs(padded, model_dim, inter_dim, expert, topk, dtype, q_dtype_a, q_dtype_w, q_type,
                          bool(use_g1u1), act_arg, bool(doweight_stage1))
    md = "module_moe_ck2stages_%s_%s_preshuffle_%s_%s_%s_%s_mulWeightStage%d" % (
        _short(q_dtype_a), _short(q_dtype_w), "on" if preshuffle else "off", _short(dtype),
        str(activation).split(".")[-1].lower(), str(q_type).split(".")[-1], 1 if doweight_stage1 else 2)
    get_module(md)
    shape = {"token": int(token), "model_dim": model_dim, "inter_dim": inter_dim, "expert": expert,
             "topk": topk, "act_type": str(activation), "dtype": str(dtype), "q_dtype_a": str(q_dtype_a),
             "q_dtype_w": str(q_dtype_w), "q_type": str(q_type), "use_g1u1": int(bool(use_g1u1)),
             "doweight_stage1": int(bool(doweight_stage1))}
    tuned_from = None
    if cfg is not None:
        tuned_from = {c: cfg[c] for c in _MOE_SHAPE_COLS}
    us = bench_us("moe_2stages", shape, get_gfx(), get_cu_num(), tuned_from)
    if flydsl_moe.is_flydsl_row(cfg):   # a --mxfp4-flydsl row: its own end-to-end time (issue 30)
        us = round(us * flydsl_moe.e2e_factor(tuned_from, get_gfx(), get_cu_num()), 4)
    return us
