"""Registry entries of the microscaling (MX: MXFP4 / MXFP6 / MXFP8, e8m0 block scales) tuners AITER added
after the fetchable v0.1.20.post1 mirror (aiter-december-2026.md "New tuner scripts"; each entry's facts read
from the stored ROCm/aiter commit named beside it). ``variants.VARIANTS`` holds them with the others: one
entry per tuner, nothing else to change (the seam of CONTRIBUTING's add-a-variant recipe).

``since=(0, 1, 21)``: the stored commits come after the v0.1.20.post1 mirror; the reference lists them with
v0.1.30, and no stored release note dates them more closely. Whether a node has one is probed (its tuner
file), never read from the version.

Not registered: csrc/bmm_a8w8_mxscale/bmm_a8w8_mxscale_bpreshuffle_tune.py (stored at f081855b; opus + FlyDSL,
gfx950). Its table is keyed in lower case WITHOUT cu_num (gfx,b,m,n,k,w_scale_block "32x32"|"128x128" +
libtype, ...; AITER_CONFIG_BATCHED_GEMM_A8W8_BLOCKSCALE_MXSCALE_BPRESHUFFLE, default
aiter/configs/batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned.csv merged with the model_configs glob),
its -k is the K dimension (the base -k/--splitK is removed), its default -i AND -o are the shipped table
model_configs/dsv4_batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned.csv, and no op_test of the index
times its dispatch: tune-remote's staging, promotion and audit key every table by (gfx,) cu_num + shape, so
it needs that taught first, not one more entry.
"""

from __future__ import annotations

from .variant_spec import KernelVariant

MX_VARIANTS: list[KernelVariant] = [
]
