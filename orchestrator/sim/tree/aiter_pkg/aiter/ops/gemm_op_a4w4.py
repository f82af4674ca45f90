"""aiter/ops/gemm_op_a4w4.py (simulated)."""

import functools

from .. import logger
from .._sim import measured_us as bench_us
from ..jit.core import AITER_CONFIGS, AITER_LOG_TUNED_CONFIG, get_module
from ..jit.utils.chip_info import get_cu_num, get_gfx
from ._tuned import module_table, python_table


#@ if !head
@functools.lru_cache(maxsize=1024)
def get_GEMM_config(M, N, K, tuned_file=None):
    if tuned_file is None:
        tuned_file = AITER_CONFIGS.AITER_CONFIG_GEMM_A4W4_FILE
    cu_num = get_cu_num()
    config, padded_M = python_table(tuned_file, ("M", "N", "K")).find_padded(M, N, K)
    if config is not None:
        if AITER_LOG_TUNED_CONFIG:
            logger.info(
                f"shape is M:{M}, N:{N}, K:{K}, found padded_M: {padded_M}, N:{N}, K:{K} is tuned on cu_num = {cu_num} in {AITER_CONFIGS.AITER_CONFIG_GEMM_A4W4_FILE}, kernel name is {config['kernelName']}, splitK is {config['splitK']}!"
            )
    else:
        logger.info(
            f"shape is M:{M}, N:{N}, K:{K}, not found tuned config in {tuned_file}, will use default config!"
        )
    return config
#@ endif
#@ if head
# HEAD (#5268): the lookup cached apart from its miss line (once per shape per process) and the
# AITER_TUNE_GEMM record (every lookup; aiter/utility/untuned_shapes.py deduplicates per process)
from ..utility.untuned_shapes import record as _record_untuned_shape  # noqa: E402


@functools.lru_cache(maxsize=1024)
def _get_GEMM_config_cached(M, N, K, tuned_file):
    config, padded_M = python_table(tuned_file, ("M", "N", "K")).find_padded(M, N, K)
    if config is not None and AITER_LOG_TUNED_CONFIG:
        logger.info(
            f"shape is M:{M}, N:{N}, K:{K}, found padded_M: {padded_M}, N:{N}, K:{K} is tuned on cu_num = {get_cu_num()} in {AITER_CONFIGS.AITER_CONFIG_GEMM_A4W4_FILE}, kernel name is {config['kernelName']}, splitK is {config['splitK']}!"
        )
    return config


@functools.lru_cache(maxsize=None)
def _log_GEMM_miss_once(M, N, K, tuned_file):
    logger.info(
        f"shape is M:{M}, N:{N}, K:{K}, not found tuned config in {tuned_file}, will use default config!"
    )


def get_GEMM_config(M, N, K, tuned_file=None):
    if tuned_file is None:
        tuned_file = AITER_CONFIGS.AITER_CONFIG_GEMM_A4W4_FILE
    config = _get_GEMM_config_cached(M, N, K, tuned_file)
    if config is None:
        _log_GEMM_miss_once(M, N, K, tuned_file)
        _record_untuned_shape(tuned_file, {"M": M, "N": N, "K": K})
    return config
#@ endif


def gemm_a4w4(M, N, K, dtype=None, bpreshuffle=True):
    f = AITER_CONFIGS.AITER_CONFIG_GEMM_A4W4_FILE
    config = get_GEMM_config(M, N, K, f)
    shape = {"m": M, "n": N, "k": K}
    if config is not None and config.get("libtype") == "flydsl":
        # the FlyDSL split-K bpreshuffle kernel its row names (the split parsed from the kernelName), rows of
        # csrc/ck_gemm_a4w4_blockscale/gemm_a4w4_blockscale_bpreshuffle_tune.py; not the CK module
        padded = python_table(f, ("M", "N", "K")).find_padded(M, N, K)[1]
        return bench_us("a4w4_blockscale_bpreshuffle", shape, get_gfx(), get_cu_num(), dict(shape, m=padded))
    mod = get_module("module_gemm_a4w4_blockscale", f)
    row, padded_M = module_table(mod, ("M", "N", "K")).find_padded(M, N, K)
    tuned_from = dict(shape, m=padded_M) if row is not None else None
    return bench_us("a4w4_blockscale", shape, get_gfx(), get_cu_num(), tuned_from)
