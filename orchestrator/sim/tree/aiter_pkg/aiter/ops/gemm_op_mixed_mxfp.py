"""aiter/ops/gemm_op_mixed_mxfp.py (simulated): the shared runtime tuning helpers of the gfx950 mixed-MXFP asm
GEMMs A6W4 and A4W6 (ROCm/aiter aiter/ops/gemm_op_mixed_mxfp.py, find_string id 68870533051, the 610d1e8e era
of csrc/gemm_mixed_mxfp): one strictly validated table per (file, family), lru_cached, and the lookup that
tries the exact shape, then the physical padded one. ``run_mixed`` is the simulator's own: the time the op
measures for the kernel the lookup chose (perf model)."""

import functools
import os

from .._sim import measured_us
from .._sim.frame import read_csv
from ..jit.core import get_module
from ..jit.utils.chip_info import get_cu_num, get_gfx

_TUNED_CONFIG_KEY_COLUMNS = ("gfx", "cu_num", "M", "N", "K")
_TUNED_CONFIG_NUMERIC_COLUMNS = ("cu_num", "M", "N", "K", "splitK")
_TUNED_CONFIG_COLUMNS = frozenset({"gfx", "cu_num", "M", "N", "K", "kernelName", "splitK"})
# upstream gemm_op_a6w6.py's _TILE / _K_TILE (gemm_a6w4_asm's docstring, id 69223204969: "out dimensions must
# be multiples of 256, K must be the padded multiple of 128")
_TILE = 256
_K_TILE = 128


def _ceil(x, tile):
    return (x + tile - 1) // tile * tile


@functools.lru_cache(maxsize=16)
def _load_mixed_mxfp_configs(tuned_file, family):
    """Load and strictly validate one mixed-MXFP shape-tuning table (upstream raises as here)."""
    family = family.upper()
    if not os.path.exists(tuned_file):
        return {}
    cols, rows = read_csv(tuned_file)
    if not cols:                       # pd.errors.EmptyDataError
        return {}
    missing = _TUNED_CONFIG_COLUMNS - set(cols)
    if missing:
        raise ValueError(f"{tuned_file} is missing required {family} columns: {sorted(missing)}")
    configs = {}
    for r in rows:
        vals = {}
        for column in _TUNED_CONFIG_NUMERIC_COLUMNS:
            try:
                f = float(r[column])
            except ValueError:
                raise ValueError(f"{tuned_file} contains a non-integral {column} value")
            if f != f or f % 1 != 0:
                raise ValueError(f"{tuned_file} contains a non-integral {column} value")
            vals[column] = int(f)
        for column in ("cu_num", "M", "N", "K"):
            if vals[column] <= 0:
                raise ValueError(f"{tuned_file} contains a non-positive {column} value")
        if not r["gfx"] or not r["kernelName"]:
            raise ValueError(f"{tuned_file} contains an empty gfx or kernelName")
        if vals["splitK"] != 0:
            raise ValueError(f"{family} tuned configs must use splitK=0")
        key = (r["gfx"], vals["cu_num"], vals["M"], vals["N"], vals["K"])
        if key in configs:
            raise ValueError(f"{tuned_file} contains duplicate {family} shape keys:\n{key} {r['kernelName']}")
        configs[key] = dict(r, **vals)
    return configs


def _find_mixed_mxfp_config(configs, gfx, cu_num, M, N, K, padM, padN, padK):
    """Find an exact tuning record before trying its physical padded shape."""
    candidates = [((M, N, K), "exact")]
    padded = (padM, padN, padK)
    if padded != (M, N, K):
        candidates.append((padded, "padded"))
    for (candidate_M, candidate_N, candidate_K), match_kind in candidates:
        config = configs.get((gfx, cu_num, candidate_M, candidate_N, candidate_K))
        if config is not None:
            return config, match_kind, (candidate_M, candidate_N, candidate_K)
    return None


def run_mixed(variant, module, M, N, K, kernel, row_shape):
    """Simulator only: load the op's modules (module_quant + its asm module, as its @compile_ops do), then
    the time of ``kernel`` on (M, N, K). ``row_shape``: the (M, N, K) of the tuned row it came from, or None
    (the safe default kernel). A row naming another kernel than the model's tuned one is the default kernel's
    (the tuner's gain-guard FALLBACK row) and runs as the default."""
    from .._sim import perf_model
    for md in ("module_quant", module):
        get_module(md)
    gfx, cu = get_gfx(), get_cu_num()
    tuned_from = None
    if row_shape is not None:
        tuned_from = dict(zip("mnk", row_shape))
        res = perf_model.tune_result(variant, tuned_from, gfx, cu)
        if res is not None and str(kernel) != str(res.get("kernelName")):
            tuned_from = None
    return measured_us(variant, {"m": M, "n": N, "k": K}, gfx, cu, tuned_from)
