"""aiter/ops/opus/policy.py (simulated): the preshuffled-B MXFP8 BMM's tuned-row lookup, newest/head profiles.

As ROCm/aiter's (stored aiter/ops/opus/policy.py, the form with the weight-scale block; padded-M walk also in
aiter/ops/gemm_common.py find_padded_m_row): ``lookup_mxscale_bmm_config`` is lru_cached, so a process logs a
shape's miss once; it tries M, then get_padded_m (getPaddedM) at the two granularities, keyed
(gfx, b, m, n, k, w_scale_block) with NO cu_num; a miss logs (logger.info)
``shape B:{b} M:{m} N:{n} K:{k} w_scale {block} has no MXFP8 BMM tuned row``, a hit only with
AITER_LOG_TUNED_CONFIG=1. The table (``with_mxscale_w_scale_block``): one without the column is read as
128x128 rows (with a warning), an unknown block raises, a row whose splitK is not a positive integer is
skipped (with a warning), a key in two merged tables raises. The file is the bpreshuffle entry's
(README fb06b88c): $AITER_CONFIG_BATCHED_GEMM_A8W8_BLOCKSCALE_MXSCALE_BPRESHUFFLE, else the generic tuned CSV
merged with the matching model_configs/ tables (as the sim's get_config_file merges the others).
"""

import functools
import glob
import os

from ... import logger
from ..._sim.frame import norm, read_csv
from ..._sim.lookups import padded_m_candidates
from ...jit.core import AITER_CONFIG_DIR, AITER_CONFIGS, AITER_LOG_TUNED_CONFIG
from ...jit.utils.chip_info import get_gfx

CONFIG_ENV = "AITER_CONFIG_BATCHED_GEMM_A8W8_BLOCKSCALE_MXSCALE_BPRESHUFFLE"
MERGE_NAME = "batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned"
MXSCALE_W_SCALE_BLOCKS = ("32x32", "128x128", "1x32", "1x128")
_SHAPE_KEYS = ("gfx", "b", "m", "n", "k", "w_scale_block")
_TUNED_PERF_COLUMNS = ("us", "tflops", "bw", "errRatio")


@functools.lru_cache(maxsize=None)
def config_file():
    val = os.environ.get(CONFIG_ENV)
    if val:
        return AITER_CONFIGS.update_config_files(val, MERGE_NAME)
    default_file = f"{AITER_CONFIG_DIR}/{MERGE_NAME}.csv"
    found = sorted(f for f in glob.glob(f"{AITER_CONFIG_DIR}/model_configs/*{MERGE_NAME}*.csv") if "untuned" not in f)
    if not found:
        return default_file
    return AITER_CONFIGS.update_config_files(":".join([default_file] + found), MERGE_NAME)


@functools.lru_cache(maxsize=None)
def _load_mxscale_bmm_tuned(libtype=None):
    path = config_file()
    if not os.path.exists(path):
        logger.warning("MXFP8 BMM tuned CSV was not found at %s", path)
        return {}
    cols, rows = read_csv(path)
    missing = sorted({"gfx", "b", "m", "n", "k", "kernelId", "splitK"} - set(cols))
    if missing:
        raise ValueError(f"MXFP8 BMM tuned CSV is missing columns {missing}")
    if "w_scale_block" not in cols:
        logger.warning("%s has no 'w_scale_block' column; reading its rows as 128x128. "
                       "Re-run the tuner or migrate the CSV.", path)
        for r in rows:
            r["w_scale_block"] = "128x128"
    unknown = {r["w_scale_block"] for r in rows} - set(MXSCALE_W_SCALE_BLOCKS)
    if unknown:
        raise ValueError(f"{path}: w_scale_block {sorted(unknown)} not in {MXSCALE_W_SCALE_BLOCKS}")
    if libtype is not None and "libtype" in cols:
        rows = [r for r in rows if r["libtype"] == libtype]
    valid = [r for r in rows if isinstance(norm(r["splitK"]), int) and norm(r["splitK"]) >= 1]
    if len(valid) < len(rows):
        logger.warning("Skipping %d invalid OPUS row(s) in MXFP8 BMM tuned CSV %r: kernelId, splitK and shape "
                       "must form a compatible registered MXFP8 BMM launch", len(rows) - len(valid), path)
    out = {}
    for r in valid:
        key = tuple(str(r[c]) if c in ("gfx", "w_scale_block") else norm(r[c]) for c in _SHAPE_KEYS)
        if key in out:
            raise RuntimeError(f"duplicate shapes across MXFP8 BMM tuned CSV files: {dict(zip(_SHAPE_KEYS, key))}")
        out[key] = r
    return out


@functools.lru_cache(maxsize=1024)
def lookup_mxscale_bmm_config(b, m, n, k, *, w_scale_block="128x128", libtype=None):
    """The exact or existing padded-M tuned row for one shape and weight-scale block, or None."""
    gfx = get_gfx()
    tuned = _load_mxscale_bmm_tuned(libtype)
    row, padded_m = None, m
    for padded_m in padded_m_candidates(m, n, k):
        row = tuned.get((gfx, b, padded_m, n, k, w_scale_block))
        if row is not None:
            break
    if row is None:
        logger.info("shape B:%s M:%s N:%s K:%s w_scale %s has no MXFP8 BMM tuned row", b, m, n, k, w_scale_block)
        return None
    if AITER_LOG_TUNED_CONFIG:
        cfg = {key: value for key, value in row.items() if key not in _TUNED_PERF_COLUMNS + _SHAPE_KEYS}
        logger.info("shape B:%s M:%s N:%s K:%s uses padded_M:%s MXFP8 config %s", b, m, n, k, padded_m, cfg)
    return row
