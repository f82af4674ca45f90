"""aiter/ops/gemm_op_a8w8.py (simulated): CK a8w8 GEMMs; returns the kernel time in us (perf model)."""

import functools
import os

from .. import logger
from .._sim import measured_us as bench_us
from ..jit.core import AITER_CONFIGS, AITER_LOG_TUNED_CONFIG, get_module
from ..jit.utils.chip_info import get_cu_num, get_gfx
from ._tuned import module_table, python_table


#@ if !head
@functools.lru_cache(maxsize=1024)
def get_CKGEMM_config(M, N, K, tuned_file=None):
    if tuned_file is None:
        tuned_file = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_FILE
    table = python_table(tuned_file, ("M", "N", "K"))
    cu_num = get_cu_num()
    config, padded_M = table.find_padded(M, N, K)
    if config is not None:
        if AITER_LOG_TUNED_CONFIG:
            logger.info(
                f"shape is M:{M}, N:{N}, K:{K}, found padded_M: {padded_M}, N:{N}, K:{K} is tuned on cu_num = {cu_num} in {tuned_file} , kernel name is {config['kernelName']}!"
            )
    else:
        logger.info(
            f"shape is M:{M}, N:{N}, K:{K}, not found tuned config in {tuned_file}, will use default config!"
        )
    return config


@functools.lru_cache(maxsize=1024)
def get_GEMM_config_with_quant_type(M, N, K, q_dtype_w, tuned_file=None):
    if tuned_file is None:
        tuned_file = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_FILE
    table = python_table(tuned_file, ("M", "N", "K", "q_dtype_w"))
    config, padded_M = table.find_padded(M, N, K, extra=(str(q_dtype_w),))
    if config is not None:
        if AITER_LOG_TUNED_CONFIG:
            msg = f"shape M:{M}, N:{N}, K:{K} q_dtype_w:{q_dtype_w}, found padded_M: {padded_M}, N:{N}, K:{K} is tuned, in {tuned_file}!"
            if "libtype" in config:
                msg += f" libtype is {config['libtype']}!"
            if "kernelName" in config:
                msg += f" kernelName is {config['kernelName']} (kernelId {config.get('kernelId')})!"
            logger.info(msg)
    else:
        logger.info(
            f"shape is M:{M}, N:{N}, K:{K}, q_dtype_w:{q_dtype_w}, not found tuned config in {tuned_file}, will use default config!"
        )
    return config
#@ endif
#@ if head
# HEAD (#5268, op_tests/tuning_tests/test_untuned_shapes.py): the lookup is cached apart from its miss line,
# which is logged once per shape per process (_log_*_miss_once), while the miss is recorded for
# AITER_TUNE_GEMM on every lookup (aiter/utility/untuned_shapes.py deduplicates per process)
from ..utility.untuned_shapes import record as _record_untuned_shape  # noqa: E402


def _quant_keyed(tuned_file):
    """The a8w8 table carries q_dtype_w (since #1782): its untuned rows keep that column."""
    return os.path.basename(str(tuned_file)) == "a8w8_tuned_gemm.csv"


@functools.lru_cache(maxsize=1024)
def _get_CKGEMM_config_cached(M, N, K, tuned_file):
    config, padded_M = python_table(tuned_file, ("M", "N", "K")).find_padded(M, N, K)
    if config is not None and AITER_LOG_TUNED_CONFIG:
        logger.info(
            f"shape is M:{M}, N:{N}, K:{K}, found padded_M: {padded_M}, N:{N}, K:{K} is tuned on cu_num = {get_cu_num()} in {tuned_file} , kernel name is {config['kernelName']}!"
        )
    return config


@functools.lru_cache(maxsize=None)
def _log_CKGEMM_miss_once(M, N, K, tuned_file):
    logger.info(
        f"shape is M:{M}, N:{N}, K:{K}, not found tuned config in {tuned_file}, will use default config!"
    )


def get_CKGEMM_config(M, N, K, tuned_file=None):
    if tuned_file is None:
        tuned_file = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_FILE
    config = _get_CKGEMM_config_cached(M, N, K, tuned_file)
    if config is None:
        _log_CKGEMM_miss_once(M, N, K, tuned_file)
        row = {"M": M, "N": N, "K": K}
        if _quant_keyed(tuned_file):
            row["q_dtype_w"] = "torch.int8"
        _record_untuned_shape(tuned_file, row)
    return config


@functools.lru_cache(maxsize=1024)
def _get_GEMM_config_with_quant_type_cached(M, N, K, q_dtype_w, tuned_file):
    config, padded_M = python_table(tuned_file, ("M", "N", "K", "q_dtype_w")).find_padded(
        M, N, K, extra=(str(q_dtype_w),))
    if config is not None and AITER_LOG_TUNED_CONFIG:
        msg = f"shape M:{M}, N:{N}, K:{K} q_dtype_w:{q_dtype_w}, found padded_M: {padded_M}, N:{N}, K:{K} is tuned, in {tuned_file}!"
        if "libtype" in config:
            msg += f" libtype is {config['libtype']}!"
        if "kernelName" in config:
            msg += f" kernelName is {config['kernelName']} (kernelId {config.get('kernelId')})!"
        logger.info(msg)
    return config


@functools.lru_cache(maxsize=None)
def _log_quant_type_miss_once(M, N, K, q_dtype_w, tuned_file):
    logger.info(
        f"shape is M:{M}, N:{N}, K:{K}, q_dtype_w:{q_dtype_w}, not found tuned config in {tuned_file}, will use default config!"
    )


def get_GEMM_config_with_quant_type(M, N, K, q_dtype_w, tuned_file=None):
    if tuned_file is None:
        tuned_file = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_FILE
    config = _get_GEMM_config_with_quant_type_cached(M, N, K, q_dtype_w, tuned_file)
    if config is None:
        _log_quant_type_miss_once(M, N, K, q_dtype_w, tuned_file)
        _record_untuned_shape(tuned_file, {"M": M, "N": N, "K": K, "q_dtype_w": str(q_dtype_w)})
    return config
#@ endif


# a row whose libtype has its own module is served through it (aiter/jit/optCompilerConfig.json: the CSV
# compiles the main module, its _cktile sibling and, for blockscale bpreshuffle, module_deepgemm_opus)
_SIBLING = {"cktile": lambda md: md + "_cktile", "opus": lambda md: "module_deepgemm_opus"}


def module_for(md_name, config):
    """The module that serves a shape whose Python-side lookup found ``config`` (None: the default kernel
    of the main module)."""
    lib = str((config or {}).get("libtype") or "ck").strip()
    return _SIBLING[lib](md_name) if lib in _SIBLING else md_name


def _run(variant, main, tuned_file, M, N, K, q_dtype_w=None, config=None):
    md_name = module_for(main, config)
    mod = get_module(md_name, tuned_file)
    shape = {"m": M, "n": N, "k": K}
    extra = ()
    cols = ("M", "N", "K")
    if q_dtype_w is not None:
        shape["q_dtype_w"] = str(q_dtype_w)
        extra = (str(q_dtype_w),)
        cols = ("M", "N", "K", "q_dtype_w")
    row, padded_M = module_table(mod, cols).find_padded(M, N, K, extra=extra)
    tuned_from = None
    if row is not None and module_for(main, row) != md_name:
        row = None   # the row is compiled into another module of the table, not into this one
    if row is not None:
        tuned_from = dict(shape, m=padded_M)
    return bench_us(variant, shape, get_gfx(), get_cu_num(), tuned_from)


def gemm_a8w8_blockscale(M, N, K, dtype=None):
    f = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_FILE
    config = get_CKGEMM_config(M, N, K, f)
    return _run("a8w8_blockscale", "module_gemm_a8w8_blockscale", f, M, N, K, config=config)


def gemm_a8w8_blockscale_bpreshuffle(M, N, K, dtype=None):
    f = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE_FILE
    config = get_CKGEMM_config(M, N, K, f)
    return _run("a8w8_blockscale_bpreshuffle", "module_gemm_a8w8_blockscale_bpreshuffle", f, M, N, K, config=config)


def gemm_a8w8_CK(M, N, K, q_dtype_w, dtype=None):
    f = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_FILE
    get_GEMM_config_with_quant_type(M, N, K, q_dtype_w, f)
    return _run("a8w8", "module_gemm_a8w8", f, M, N, K, q_dtype_w)


def gemm_a8w8_bpreshuffle(M, N, K, q_dtype_w, dtype=None):
    f = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE_FILE
    config = get_GEMM_config_with_quant_type(M, N, K, q_dtype_w, f)
    return _run("a8w8_bpreshuffle", "module_gemm_a8w8_bpreshuffle", f, M, N, K, q_dtype_w, config=config)
#@ if newest


# MXFP8 (1x32 e8m0) bpreshuffle GEMM (aiter-december-2026.md): FlyDSL kernels, no CK module built from the
# table; the Python-side lookup (get_CKGEMM_config: exact, then padded M) picks the kernel per process
@functools.lru_cache(maxsize=1024)
def _get_mxfp8_bpreshuffle_config(M, N, K):
    """(libtype, kernelName, splitK) serving this shape: a tuned flydsl row wins, else the FlyDSL heuristic."""
    config = get_CKGEMM_config(M, N, K, AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_MXFP8_BPRESHUFFLE_FILE)
    if config is not None and str(config.get("libtype")) == "flydsl":
        return "flydsl", str(config["kernelName"]), 1
    return "flydsl", "flydsl_mxpsh_32x128x128_F8_F8_B16_w0_x0_sk1", 1


def gemm_a8w8_mxfp8_bpreshuffle(M, N, K, dtype=None):
    f = AITER_CONFIGS.AITER_CONFIG_GEMM_A8W8_MXFP8_BPRESHUFFLE_FILE
    _get_mxfp8_bpreshuffle_config(M, N, K)
    row, padded_M = python_table(f, ("M", "N", "K")).find_padded(M, N, K)
    shape = {"m": M, "n": N, "k": K}
    tuned_from = dict(shape, m=padded_M) if row is not None and str(row.get("libtype")) == "flydsl" else None
    return bench_us("a8w8_mxfp8_bpreshuffle", shape, get_gfx(), get_cu_num(), tuned_from)
#@ endif
