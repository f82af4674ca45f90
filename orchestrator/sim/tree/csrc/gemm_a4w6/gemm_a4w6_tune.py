# SPDX-License-Identifier: MIT
# Simulated AITER tuner entry point: A4W6 mixed-MXFP asm GEMM, gfx950 only. As upstream (ROCm/aiter 610d1e8e,
# csrc/gemm_a6w4/gemm_a6w4_tune.py; the A4W6 one per the mixed-MXFP README): the meta root on sys.path, then
# run_tuner("a4w6") of the shared csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py.
"""Tune registered gfx950 A4W6 mixed-MXFP assembly kernels."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from csrc.gemm_mixed_mxfp.gemm_mixed_mxfp_tune import run_tuner  # noqa: E402

if __name__ == "__main__":
    run_tuner("a4w6")
