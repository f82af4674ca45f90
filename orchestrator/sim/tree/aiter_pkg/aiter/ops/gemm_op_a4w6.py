"""aiter/ops/gemm_op_a4w6.py (simulated): the gfx950 A4W6 asm GEMM's runtime lookup (ROCm/aiter
aiter/ops/gemm_op_a4w6.py, find_string id 69052546210, via gemm_op_mixed_mxfp.py): exact shape, then the physical one
(M/N to 256, K to 128), lru_cached per shape and table (so its line prints once per shape per process), and
only with AITER_LOG_TUNED_CONFIG. gemm_a4w6(M, N, K) returns the time in us (perf model)."""

import functools
import os

from .. import logger
from ..jit.core import AITER_CONFIGS, AITER_LOG_TUNED_CONFIG
from ..jit.utils.chip_info import get_cu_num, get_gfx
from .gemm_op_mixed_mxfp import _K_TILE, _TILE, _ceil, _find_mixed_mxfp_config, _load_mixed_mxfp_configs, run_mixed

# upstream picks one of four mangled s0/s3 kernels by shape; the simulated tuner's default (its gain-guard
# FALLBACK row's kernelName, csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py) stands for all of them
_DEFAULT_KERNEL = "f4f6gemm_bf16_per1x32Fp4Fp6_256x256_s0"


def _default_gemm_a4w6_kernel(M, N, K):
    """Choose a safe kernel when no shape-tuned A4W6 record is available."""
    return _DEFAULT_KERNEL


@functools.lru_cache(maxsize=1024)
def _get_GEMM_A4W6_config_cached(M, N, K, tuned_file, gfx, cu_num):
    configs = _load_mixed_mxfp_configs(tuned_file, "A4W6")
    padM, padN, padK = _ceil(M, _TILE), _ceil(N, _TILE), _ceil(K, _K_TILE)
    match = _find_mixed_mxfp_config(configs, gfx, cu_num, M, N, K, padM, padN, padK)
    if match is not None:
        config, match_kind, matched_shape = match
        if AITER_LOG_TUNED_CONFIG:
            logger.info("A4W6 shape M:%s N:%s K:%s matched %s config M:%s N:%s K:%s in %s: %s",
                        M, N, K, match_kind, *matched_shape, tuned_file, config["kernelName"])
        return dict(config, _row=matched_shape)
    if AITER_LOG_TUNED_CONFIG:
        logger.info("A4W6 shape M:%s N:%s K:%s has no tuned config in %s; using the safe default kernel",
                    M, N, K, tuned_file)
    return None


def get_GEMM_A4W6_config(M, N, K, tuned_file=None):
    """Return an exact or physical-shape A4W6 tuning record."""
    tuned_file = os.path.abspath(tuned_file or AITER_CONFIGS.AITER_CONFIG_GEMM_A4W6_ASM_FILE)
    return _get_GEMM_A4W6_config_cached(M, N, K, tuned_file, get_gfx(), get_cu_num())


def clear_gemm_a4w6_config_cache():
    """Clear cached A4W6 tuning data after a tuner updates its CSV."""
    _load_mixed_mxfp_configs.cache_clear()
    _get_GEMM_A4W6_config_cached.cache_clear()


def gemm_a4w6(M, N, K, dtype=None, kernelName=None):
    """_select_gemm_a4w6_kernel (a given kernelName wins, else the lookup, else the safe default), then the
    launch: the time in us."""
    if kernelName:
        return run_mixed("a4w6", "module_gemm_a4w6_asm", M, N, K, kernelName, None)
    config = get_GEMM_A4W6_config(M, N, K)
    if config is not None:
        return run_mixed("a4w6", "module_gemm_a4w6_asm", M, N, K, config["kernelName"], config["_row"])
    return run_mixed("a4w6", "module_gemm_a4w6_asm", M, N, K, _default_gemm_a4w6_kernel(M, N, K), None)
