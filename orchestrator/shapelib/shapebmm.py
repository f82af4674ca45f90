"""The MXFP8 batched GEMM's miss line as a shape source. Stdlib only, Python >= 3.8.

``lookup_mxscale_bmm_config`` (aiter/ops/opus/policy.py, lru_cached: once per shape per process) tries M, then
``get_padded_m`` at two granularities, and on a miss logs (logger.info; stored ROCm/aiter policy.py, the form
with the weight-scale block and the older one, whose table was 128x128 only):

    shape B:4 M:16 N:2048 K:8192 w_scale 32x32 has no MXFP8 BMM tuned row
    shape B:4 M:16 N:2048 K:8192 has no MXFP8 BMM tuned row

The line names no table: the row-major and the preshuffled-B (bpreshuffle) lookups print the same; the one
registered tuner of it is bmm_a8w8_mxscale_bpreshuffle (variants_mx.py), whose key is gfx,b,m,n,k,w_scale_block.
"""

from __future__ import annotations

import re

BMM_VARIANT = "bmm_a8w8_mxscale_bpreshuffle"
NEEDLE = "has no MXFP8 BMM tuned row"
OLD_FORM_BLOCK = "128x128"      # the lookup before w_scale_block was a key read 128x128 tables only
MISS = re.compile(r"shape B:\s*(\d+) M:\s*(\d+) N:\s*(\d+) K:\s*(\d+)(?: w_scale (\S+))? has no MXFP8 BMM tuned row")


def parse_miss(message):
    """(variant, shape) of a miss line (the message from its ``shape B:``), or None."""
    m = MISS.match(message)
    if not m:
        return None
    shape = {"b": int(m.group(1)), "m": int(m.group(2)), "n": int(m.group(3)), "k": int(m.group(4)),
             "w_scale_block": m.group(5) or OLD_FORM_BLOCK}
    return BMM_VARIANT, shape
