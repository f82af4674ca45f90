"""Measured benchmark noise of the simulated node (../shared/reference/real-gpu-noise.md, 2026-12-02).

One benchmark *process* (one op_test run, one number per shape) is off the model's time by a relative
error drawn from what a real GPU gave (56 GEMM shapes, 38 processes):

* the shape's own relative sd follows its size: the median by M of the reference table (1.06 % at M=1 ...
  0.17 % at M=2048, 0.59 % at M=8192; log-interpolated between rows), times a per-shape log-normal factor
  (sigma ``SHAPE_SIGMA`` = 1.0: the table's max over 8 shapes is ~4.3 x its median; about 16 % of shapes
  end above 2 %, 8 % above 3 %), capped at ``SD_CAP_PCT`` (4.6 %, the largest measured);
* that sd splits into a per-process level shared by every shape of the process (``LEVEL_SHARE`` of the
  variance: a process that starts on a slow clock is slow for all its shapes), the shape's own per-process
  error, and a slow drift over the run (``DRIFT_SD`` sd multiples at most, a sine over the process index:
  "the median of the last 13 processes differs from the first 13 by up to +4.3 %, typically under 1 %");
* tails: one sample in ``TAIL_P`` is slower by ``TAIL_SCALE`` x |N(0,1)| sds (a clock drop).

Deterministic: the shape's sd hashes from its key (never the seed: it is the device's); a process's draws
come from ``random.Random`` seeded by (seed, process index, shape key, call count), where the process index
is the number of benchmark processes the node ran before (``noise_processes.log`` in the sim dir). The same
seed and the same sequence of processes give the same numbers. Stdlib only, Python 3.8+: copied into the
node beside perf_model.py.
"""

from __future__ import annotations

import hashlib
import math
import random

# (M, median relative sd % across processes over the 8 shapes at that M), real-gpu-noise.md
SD_BY_M = ((1, 1.06), (8, 1.03), (32, 0.91), (128, 0.73), (512, 0.63), (2048, 0.17), (8192, 0.59))
SHAPE_SIGMA = 1.0
SD_CAP_PCT = 4.6
LEVEL_SHARE = 0.3
DRIFT_SD = 0.8          # drift amplitude in units of the shape's sd (variance share DRIFT_SD**2 / 2)
DRIFT_PERIOD = 40.0     # processes per radian x 2 pi ~ one slow swing over a long job
TAIL_P = 0.02
TAIL_SCALE = 4.0


def _h(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def _z(text: str) -> float:
    """A standard normal from a hash (Box-Muller on two hashed uniforms)."""
    u1 = (_h("a#" + text) + 0.5) / float(1 << 64)
    u2 = _h("b#" + text) / float(1 << 64)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def size_of(shape: dict) -> float:
    """The shape's M (GEMM, batched) or token count (MoE); 1 when it has neither."""
    for k in ("m", "M", "token"):
        if k in shape:
            try:
                return max(1.0, float(shape[k]))
            except (TypeError, ValueError):
                pass
    return 1.0


def median_sd_pct(m: float) -> float:
    """The measured median relative sd at size ``m`` (log-interpolated in M, flat outside the table)."""
    if m <= SD_BY_M[0][0]:
        return SD_BY_M[0][1]
    for (m0, s0), (m1, s1) in zip(SD_BY_M, SD_BY_M[1:]):
        if m == m1:
            return s1
        if m < m1:
            t = (math.log(m) - math.log(m0)) / (math.log(m1) - math.log(m0))
            return s0 + t * (s1 - s0)
    return SD_BY_M[-1][1]


def shape_sd_pct(key: str, m: float) -> float:
    """This shape's between-process relative sd in % (fixed per shape key: the device's, not the seed's)."""
    return min(SD_CAP_PCT, median_sd_pct(m) * math.exp(SHAPE_SIGMA * _z("sd#" + key)))


def rel_error(key: str, m: float, seed: int, process: int, call: int = 0) -> float:
    """The relative error (a fraction: +0.01 = 1 % slower) of one process's number for one shape."""
    sd = shape_sd_pct(key, m) / 100.0
    level = _z("level#%d#%d" % (seed, process))                      # shared by the whole process
    rng = random.Random(_h("own#%d#%d#%d#%s" % (seed, process, call, key)))
    own = rng.gauss(0.0, 1.0)
    phase = 2.0 * math.pi * (_h("phase#%d#%s" % (seed, key)) / float(1 << 64))
    drift = DRIFT_SD * math.sin(process / DRIFT_PERIOD * 2.0 * math.pi + phase)
    iid = math.sqrt(max(0.0, 1.0 - DRIFT_SD ** 2 / 2.0))
    e = sd * (drift + iid * (math.sqrt(LEVEL_SHARE) * level + math.sqrt(1.0 - LEVEL_SHARE) * own))
    if rng.random() < TAIL_P:
        e += sd * TAIL_SCALE * abs(rng.gauss(0.0, 1.0))
    return e


def noisy_us(us: float, key: str, m: float, seed: int, process: int, call: int = 0) -> float:
    """A time in us as one benchmark process measures it (lower is better, never below 1 % of ``us``)."""
    return round(us * max(0.01, 1.0 + rel_error(key, m, seed, process, call)), 4)
