"""aiter/ops/batched_gemm_op_a8w8.py (simulated). Batched lookups use the exact (B, M, N, K)."""

import functools

from .. import logger
from .._sim import measured_us as bench_us
from ..jit.core import AITER_CONFIGS, AITER_LOG_TUNED_CONFIG, get_module
from ..jit.utils.chip_info import get_cu_num, get_gfx
from ._tuned import module_table, python_table

_loaded = []


@functools.lru_cache(maxsize=1024)
def get_CKBatchedGEMM_config(B, M, N, K):
    if not _loaded:
        print("Loading CKBatchedGEMM config from:", AITER_CONFIGS.AITER_CONFIG_A8W8_BATCHED_GEMM_FILE)
        _loaded.append(1)
    cu_num = get_cu_num()
    config = python_table(AITER_CONFIGS.AITER_CONFIG_A8W8_BATCHED_GEMM_FILE, ("B", "M", "N", "K")).find(
        [B, M, N, K])
    if config is not None:
        if AITER_LOG_TUNED_CONFIG:
            logger.info(
                f"shape is B:{B}, M:{M}, N:{N}, K:{K}, is tuned on cu_num = {cu_num} in {AITER_CONFIGS.AITER_CONFIG_A8W8_BATCHED_GEMM_FILE}, kernel name is {config['kernelName']}, splitK is {config['splitK']}!"
            )
    else:
        logger.info(
            f"shape is B:{B}, M:{M}, N:{N}, K:{K}, not found tuned config in CKGEMM, will use default config!"
        )
    return config


def batched_gemm_a8w8_CK(B, M, N, K, dtype=None):
    f = AITER_CONFIGS.AITER_CONFIG_A8W8_BATCHED_GEMM_FILE
    get_CKBatchedGEMM_config(B, M, N, K)
    mod = get_module("module_batched_gemm_a8w8", f)
    shape = {"b": B, "m": M, "n": N, "k": K}
    row = module_table(mod, ("B", "M", "N", "K")).find([B, M, N, K])
    return bench_us("batched_a8w8", shape, get_gfx(), get_cu_num(), shape if row is not None else None)
