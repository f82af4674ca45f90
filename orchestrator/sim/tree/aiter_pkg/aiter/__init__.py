"""AITER: AI Tensor Engine for ROCm -- SIMULATED (no GPU). Same import name, logger and files as the real one."""

import logging
import os

#@ if current !newest
__version__ = "0.1.20"
#@ endif
#@ if newest !head
__version__ = "0.1.29"
#@ endif
#@ if head
__version__ = "0.1.30"
#@ endif
#@ if legacy
__version__ = "0.1.11"
#@ endif


def getLogger():
    global logger
    logger = logging.getLogger("aiter")
    if not logger.handlers:
        level = os.environ.get("AITER_LOG_LEVEL", "INFO").upper()
        logger.setLevel(getattr(logging, level, logging.INFO))
        console_handler = logging.StreamHandler()
        if int(os.environ.get("AITER_LOG_MORE", "0")):
            formatter = logging.Formatter(
                fmt="[%(name)s %(levelname)s] %(asctime)s.%(msecs)03d - %(processName)s:%(process)d - %(pathname)s:%(lineno)d - %(funcName)s\n%(message)s",
                datefmt="%Y-%m-%d %H:%M:%S",
            )
        else:
            formatter = logging.Formatter(
                fmt="[%(name)s] %(message)s",
            )
        console_handler.setFormatter(formatter)
        logger.addHandler(console_handler)
        logger.propagate = False
    return logger


logger = getLogger()

try:  # import aiter + HIP init (the node's cost model, sim/costs.py)
    import _simcosts
    _simcosts.charge(_simcosts.AITER_IMPORT_S, "import aiter")
except ImportError:  # pragma: no cover - outside a simulated node
    pass

from .utility import dtypes  # noqa: E402
from .ops.gemm_op_a8w8 import (  # noqa: E402,F401
    gemm_a8w8_CK,
    gemm_a8w8_bpreshuffle,
    gemm_a8w8_blockscale,
    gemm_a8w8_blockscale_bpreshuffle,
    get_CKGEMM_config,
    get_GEMM_config_with_quant_type,
)
from .ops.gemm_op_a4w4 import gemm_a4w4, get_GEMM_config  # noqa: E402,F401
from .ops.batched_gemm_op_a8w8 import batched_gemm_a8w8_CK  # noqa: E402,F401
from .ops.batched_gemm_op_bf16 import batched_gemm_bf16_CK  # noqa: E402,F401
from .fused_moe import fused_moe, ActivationType, QuantType  # noqa: E402,F401
