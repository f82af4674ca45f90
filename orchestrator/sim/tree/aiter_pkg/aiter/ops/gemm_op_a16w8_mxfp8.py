"""aiter/ops/gemm_op_a16w8_mxfp8.py (simulated): the gfx942 A16W8 MXFP8 asm GEMM's runtime lookup (ROCm/aiter
aiter/ops/gemm_op_a16w8_mxfp8.py, find_string id 70186384978; its tuner at 59663079): the row with the smallest
tuned M >= M per (gfx, cu_num, N, K), M from 1 to 64, lru_cached per shape and table, its lines only with
AITER_LOG_TUNED_CONFIG; a missing table raises (upstream: a wrong AITER_CONFIG_GEMM_A16W8_MXFP8_ASM must not
silently disable it). gemm_a16w8_mxfp8_asm(M, N, K) returns the time in us (perf model)."""

import functools
import os

from .. import logger
from .._sim import measured_us
from .._sim.frame import read_csv
from ..jit.core import AITER_CONFIGS, AITER_LOG_TUNED_CONFIG, get_module
from ..jit.utils.chip_info import get_cu_num, get_gfx

_MX_MAX_M = 64
_MX_TUNED_COLUMNS = ("gfx", "cu_num", "M", "N", "K", "kernelName", "splitK")


@functools.lru_cache(maxsize=4)
def _mx_tuned_table(path):
    """(gfx, cu_num, N, K) -> [(M, kernelName, splitK)] sorted by M."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"gemm_a16w8_mxfp8_asm: tuned config {path} does not exist "
                                "(check AITER_CONFIG_GEMM_A16W8_MXFP8_ASM)")
    cols, rows = read_csv(path)
    missing = set(_MX_TUNED_COLUMNS) - set(cols)
    if missing:
        raise ValueError(f"{path} is missing columns {sorted(missing)}")
    table = {}
    for row in rows:
        key = (row["gfx"], int(row["cu_num"]), int(row["N"]), int(row["K"]))
        table.setdefault(key, []).append((int(row["M"]), row["kernelName"], int(row["splitK"])))
    for v in table.values():
        v.sort()
    return table


@functools.lru_cache(maxsize=1024)
def _get_gemm_a16w8_mxfp8_config_cached(M, N, K, tuned_file, gfx, cu_num):
    for m, name, splitk in _mx_tuned_table(tuned_file).get((gfx, cu_num, N, K), ()):
        if M <= m:
            if AITER_LOG_TUNED_CONFIG:
                logger.info("A16W8 MXFP8 shape M:%s N:%s K:%s uses the M:%s entry of %s: %s splitK %s",
                            M, N, K, m, tuned_file, name, splitk)
            return name, splitk, m
    if AITER_LOG_TUNED_CONFIG:
        logger.info("A16W8 MXFP8 shape M:%s N:%s K:%s has no tuned config for %s/%s in %s; "
                    "using the default kernel", M, N, K, gfx, cu_num, tuned_file)
    return None


def get_gemm_a16w8_mxfp8_config(M, N, K):
    """The tuned (kernelName, splitK) for M rows of an N x K weight on this GPU (None: untuned, or M > 64)."""
    if not 0 < M <= _MX_MAX_M:
        return None
    tuned_file = os.path.abspath(AITER_CONFIGS.AITER_CONFIG_GEMM_A16W8_MXFP8_ASM_FILE)
    cfg = _get_gemm_a16w8_mxfp8_config_cached(M, N, K, tuned_file, get_gfx(), get_cu_num())
    return None if cfg is None else cfg[:2]


def clear_gemm_a16w8_mxfp8_config_cache():
    _mx_tuned_table.cache_clear()
    _get_gemm_a16w8_mxfp8_config_cached.cache_clear()


def _mx_default_kernel(M, N, K=None):
    if N % 16 or not 0 < M <= _MX_MAX_M:
        raise RuntimeError(f"gemm_a16w8_mxfp8_asm: no kernel for M={M} N={N} (needs 1 <= M <= 64 and N % 16 == 0)")
    return f"a16w8gemm_bf16_mxfp8_tr{(M + 15) // 16}_tn1_nw4"


def gemm_a16w8_mxfp8_asm(M, N, K, kernelName=None, splitK=None):
    """gemm_a16w8_mxfp8_asm_out's kernel choice (a given kernelName wins, else the bucket row, else the default
    kernel for M rows), then the launch: the time in us. A row naming another kernel than the model's tuned one
    for its bucket shape runs as the default kernel."""
    from .._sim import perf_model
    get_module("module_gemm_a16w8_mxfp8_asm")
    gfx, cu = get_gfx(), get_cu_num()
    tuned_from = None
    if kernelName is None:
        cfg = None
        if 0 < M <= _MX_MAX_M:
            tuned_file = os.path.abspath(AITER_CONFIGS.AITER_CONFIG_GEMM_A16W8_MXFP8_ASM_FILE)
            cfg = _get_gemm_a16w8_mxfp8_config_cached(M, N, K, tuned_file, gfx, cu)
        if cfg is None:
            kernelName = _mx_default_kernel(M, N)
        else:
            kernelName, bucket = cfg[0], {"m": cfg[2], "n": N, "k": K}
            res = perf_model.tune_result("a16w8_mxfp8", bucket, gfx, cu)
            if res is None or str(res.get("kernelName")) == str(kernelName):
                tuned_from = bucket
    return measured_us("a16w8_mxfp8", {"m": M, "n": N, "k": K}, gfx, cu, tuned_from)
