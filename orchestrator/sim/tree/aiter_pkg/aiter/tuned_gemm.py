"""aiter/tuned_gemm.py (simulated): the bf16 (a16w16) dispatch and its lookup get_GEMM_A16W16_config
(aiter-formats.md §3: key (gfx, cu_num, padded_M, N, K, bias, str(dtype), str(otype), scaleAB, bpreshuffle),
M then getPaddedM; the hit line only with AITER_LOG_TUNED_CONFIG=1, the miss line always). A FlyDSL row whose
kernel name the runtime's catalog cannot parse is skipped with a warning (aiter#2817)."""

import functools
import re

from . import logger
from ._sim import measured_us
from ._sim.lookups import padded_m_candidates
from .jit.core import AITER_CONFIGS, AITER_LOG_TUNED_CONFIG
from .jit.utils.chip_info import get_cu_num, get_gfx
from .ops._tuned import python_table

KEY = ("M", "N", "K", "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle")
# the FlyDSL hgemm name grammar of aiter/ops/flydsl/gemm_kernels.py (stages, dtypes, tile, split-K, warps, flags)
FLYDSL_NAME = re.compile(
    r"flydsl_gemm\d+_a([a-z0-9]+)_w\1_[a-z0-9]+_t\d+x\d+x\d+_split_k\d+_block_m_warp\d+_block_n_warp\d+_"
    r"block_k_warp\d+_async_copy(True|False)_b_to_lds(True|False)_b_preshuffle(True|False)_c_to_lds(True|False)"
    r"(_small_m(_nr\d+)?(_pn\d+)?(_wpe\d+)?(_ur\d+)?)?_gfx[0-9a-z]+")


def _skinny(M, N, K, dtype, cu_num):
    return (dtype in ("torch.float16", "torch.bfloat16") and K % 8 == 0 and (
        (((M == 1 and N <= 2 * cu_num) or (1 < M <= 4 and N <= cu_num)) and K <= 9216)
        or ((4 < M <= 8 and N <= cu_num) and K <= 5120) or ((8 < M <= 16 and N <= cu_num) and K <= 256)))


@functools.lru_cache(maxsize=4096)
def get_GEMM_A16W16_config(M, N, K, bias, dtype, otype, scaleAB=False, bpreshuffle=False):
    """-> (row or default config, padded_M or None)."""
    table = python_table(AITER_CONFIGS.AITER_CONFIG_GEMM_BF16_FILE, KEY)
    cu_num = get_cu_num()
    for padded_M in padded_m_candidates(int(M), int(N), int(K)):
        config = table.find([padded_M, N, K, bias, dtype, otype, scaleAB, bpreshuffle])
        if config is None:
            continue
        if config.get("libtype") == "flydsl" and not FLYDSL_NAME.fullmatch(str(config.get("kernelName"))):
            logger.warning(
                f"FlyDSL kernel '{config['kernelName']}' from tuned config is not "
                "recognized by the current catalog; falling back to next candidate."
            )
            continue
        if AITER_LOG_TUNED_CONFIG:
            kernelName = config["kernelName"] if config["libtype"] != "hipblaslt" else ""
            logger.info(
                f"shape is M:{M}, N:{N}, K:{K} {dtype=} {otype=} {bias=}, {scaleAB=}, {bpreshuffle=} found padded_M: {padded_M}, N:{N}, K:{K} is tuned on cu_num = {cu_num} in {AITER_CONFIGS.AITER_CONFIG_GEMM_BF16_FILE}, libtype is {config['libtype']}, kernel name is {kernelName}"
            )
        return config, padded_M
    if bpreshuffle:
        default_config = {"libtype": "hipblaslt" if get_gfx() == "gfx942" else "asm", "solidx": 0}
    elif _skinny(int(M), int(N), int(K), dtype, cu_num):
        default_config = {"libtype": "skinny", "solidx": 2}
    else:
        default_config = {"libtype": "torch", "solidx": 0}
    logger.info(
        f"shape is M:{M}, N:{N}, K:{K} {dtype=} {otype=} {bias=}, {scaleAB=}, {bpreshuffle=}, not found tuned config in {AITER_CONFIGS.AITER_CONFIG_GEMM_BF16_FILE}, will use default config! using {default_config['libtype']} solution:{default_config['solidx']}"
    )
    return default_config, None


def gemm_a16w16(M, N, K, bias=False, dtype="torch.bfloat16", otype="torch.bfloat16", scaleAB=False,
                bpreshuffle=False):
    """tgemm.mm: the time of the kernel the lookup chose (the tuned row's, or the default)."""
    _, padded_M = get_GEMM_A16W16_config(M, N, K, bias, dtype, otype, scaleAB, bpreshuffle)
    shape = {"m": M, "n": N, "k": K, "bias": bias, "dtype": dtype, "outdtype": otype, "scaleab": scaleAB,
             "bpreshuffle": bpreshuffle}
    tuned_from = dict(shape, m=padded_M) if padded_M is not None else None
    return measured_us("a16w16", shape, get_gfx(), get_cu_num(), tuned_from)
