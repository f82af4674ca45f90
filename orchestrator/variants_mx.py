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

from .variant_spec import BenchSpec, KernelVariant

MX_VARIANTS: list[KernelVariant] = [
    KernelVariant(
        # FlyDSL a4w4 (MXFP4, 1x32 e8m0) split-K bpreshuffle GEMM (stored at 9fd2e61f). It writes into the
        # CK a4w4 tuner's own table (AITER_CONFIG_GEMM_A4W4, a4w4_blockscale_tuned_gemm.csv, same key
        # gfx,cu_num,M,N,K + libtype): its rows replace the CK rows of the same key, which the benchmark of
        # the dispatch (gemm_a4w4, whose libtype=="flydsl" branch parses the split from the kernelName)
        # judges before promotion. An EMPTY untuned CSV makes it tune two built-in smoke shapes instead.
        name="a4w4_blockscale_bpreshuffle",
        jit_module="module_gemm_a4w4_blockscale",   # the table it writes also compiles the CK a4w4 module
        splitk="always",      # its splitK column is 0: the split factor is part of every kernelName
        libtypes=("flydsl",),
        family="gemm",
        padded_m_lookup=True,
        tune_script="csrc/ck_gemm_a4w4_blockscale/gemm_a4w4_blockscale_bpreshuffle_tune.py",
        untuned_csv="aiter/configs/a4w4_blockscale_untuned_gemm.csv",
        tuned_csv="aiter/configs/a4w4_blockscale_tuned_gemm.csv",
        config_env="AITER_CONFIG_GEMM_A4W4",
        untuned_columns=("M", "N", "K"),
        # the tuner checks no gfx itself (candidates need is_flydsl_available()); its operands go through the
        # CDNA4 (gfx950) w4 shuffles, and the a4w4 dispatch it feeds is gfx950-only
        requires_gfx=frozenset({"gfx950"}),
        since=(0, 1, 21),
        bench=BenchSpec(
            # the a4w4 op_test times the production dispatch that reads this table (as for a4w4_blockscale)
            script="op_tests/test_gemm_a4w4.py",
            style="mnk",
            output="markdown",
            metric="us",
            higher_is_better=False,
            key_columns={"M": "m", "N": "n", "K": "k"},
        ),
    ),
]
