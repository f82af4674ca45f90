"""Registry entries of the microscaling (MX: MXFP4 / MXFP6 / MXFP8, e8m0 block scales) tuners AITER added
after the fetchable v0.1.20.post1 mirror (aiter-december-2026.md "New tuner scripts"; each entry's facts read
from the stored ROCm/aiter commit named beside it). ``variants.VARIANTS`` holds them with the others: one
entry per tuner, nothing else to change (the seam of CONTRIBUTING's add-a-variant recipe).

``since=(0, 1, 21)``: the stored commits come after the v0.1.20.post1 mirror; the reference lists them with
v0.1.30, and no stored release note dates them more closely. Whether a node has one is probed (its tuner
file), never read from the version.

Not registered yet: csrc/bmm_a8w8_mxscale/bmm_a8w8_mxscale_bpreshuffle_tune.py (stored at f081855b; opus +
FlyDSL, gfx950). Its table is keyed in lower case WITHOUT cu_num (OpusBmmMxscaleTuner.KEYS gfx,b,m,n,k,
w_scale_block "128x128"|"32x32"|"1x32" (opus only) + libtype; AITER_CONFIG_BATCHED_GEMM_A8W8_BLOCKSCALE_MXSCALE_
BPRESHUFFLE, default aiter/configs/batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned.csv merged with the
model_configs glob), its -k is the K dimension (the base -k/--splitK is removed: splitk="refuses"), its default
-i AND -o are the shipped table model_configs/dsv4_batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned.csv,
and no op_test of the index times its dispatch (bench=None). The runtime (aiter/ops/opus/policy.
lookup_mxscale_bmm_config, lru_cached: once per shape per process) tries M, then getPaddedM at two
granularities, and on a miss logs (logger.info) ``shape B:{b} M:{m} N:{n} K:{k} w_scale {block} has no MXFP8
BMM tuned row`` (older: no ``w_scale``, 128x128 only); the line names no table (the plain and bpreshuffle
lookups print the same). The table key is taught (shapelib/tablekey.py: staging, promotion, rollback, audit,
the merge, compare and recheck read every key from the table's own header, cu_num only where it has one, so
ROCm/aiter PR #5668's form with cu_num works too); what the entry still needs is that miss line's parse, a
simulated tuner and runtime lookup for the newest/head profile, and the variants matrix's shape for it.
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
        # without --all it skips every shape the table already has a row for, the CK tuner's rows included
        # (GemmCommonTuner's skip by key): the FlyDSL candidates would never be timed on a shape the CK
        # a4w4 tuner has tuned. With --all it tunes exactly the job's shapes (their rows updated in place).
        tune_flags=("--all",),
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
    KernelVariant(
        # gfx950 A6W4 (MXFP6 activations, MXFP4 weights) asm GEMM (stored at 610d1e8e). The shared tuner
        # csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py has no __main__ (run_tuner(family)): the script to
        # run is its A6W4 entry point csrc/gemm_a6w4/gemm_a6w4_tune.py (run_tuner("a6w4"); that file is in
        # the index without its path, the path is its README's). Key gfx,cu_num,M,N,K (README); its result
        # rows carry no libtype (a 4-field info tuple) - the header itself is not in the index. A candidate
        # row is kept only where a paired run beats the default kernel by --min-gain-pct (0.5). The runtime
        # tries the exact shape, then the 256x256x128-padded one (not getPaddedM). Its sibling A4W6
        # (csrc/gemm_a4w6/gemm_a4w6_tune.py, AITER_CONFIG_GEMM_A4W6_ASM) would be one more entry like this.
        name="a6w4",
        jit_module=None,      # prebuilt .co kernels named in the rows
        splitk="refuses",     # the real tuner raises "does not support split-K" when given -k
        libtypes=(),
        family="gemm",
        tune_script="csrc/gemm_a6w4/gemm_a6w4_tune.py",
        untuned_csv="aiter/configs/a6w4_asm_untuned_gemm.csv",
        # the default path of AITER_CONFIG_GEMM_A6W4_ASM is not in the index; the runtime merge's family
        # list names the stem a6w4_asm_tuned_gemm and the manifest test the file a6w4_asm_tuned_gemm.csv
        tuned_csv="aiter/configs/a6w4_asm_tuned_gemm.csv",
        config_env="AITER_CONFIG_GEMM_A6W4_ASM",
        untuned_columns=("M", "N", "K"),
        requires_gfx=frozenset({"gfx950"}),
        since=(0, 1, 21),
        # no op_test of the index benchmarks it: its tuner's own --run_config does (gemm_mixed_mxfp_tune.py
        # GemmMixedMxfpTuner.run_config, 610d1e8e: aiter.gemm_a6w4 per shape, run_perftest us as E2E(us);
        # without a CSV it passes the default selector's kernelName, with one the op reads that table)
        bench=BenchSpec(script="csrc/gemm_a6w4/gemm_a6w4_tune.py", style="run_config", output="run_config",
                        metric="E2E(us)", higher_is_better=False, key_columns={"M": "m", "N": "n", "K": "k"}),
    ),
    KernelVariant(
        # gfx942 A16W8 MXFP8 asm GEMM: bf16 activations, MXFP8 weights, decode M <= 64 (stored at 59663079).
        # Key gfx,cu_num,M,N,K (its README; rows carry no libtype). A row is written only where the kernel
        # beats BF16 F.linear in CUDA graphs (`us` = its median graph time); other shapes get NO row (and
        # lose an old one). Any shape with M > 64, K % 32 or N % 16 makes tune() raise. The runtime uses
        # the row with the smallest tuned M >= M per (gfx, cu_num, N, K) (a bucket, not exact/padded M).
        # Default tuned table aiter/configs/a16w8_mxfp8_asm_tuned_gemm.csv (header only) merged with
        # model_configs/*a16w8_mxfp8_asm_tuned_gemm*.csv. Its op_test asserts on any mismatch and prints no
        # summary table tune-remote reads; its tuner's --run_config [CSV] times production dispatch
        # (run_config at 59663079: aiter.gemm_a16w8_mxfp8_asm per shape, kernelName = _mx_default_kernel
        # without a CSV, the table's bucket row with one; run_perftest us as E2E(us)).
        name="a16w8_mxfp8",
        jit_module=None,      # prebuilt .co kernels of hsa/gfx942/a16w8gemm
        splitk="always",      # split-K kernels are tried at --splitk-values (2,3,4,6,8) without -k
        libtypes=(),
        family="gemm",
        tune_script="csrc/gemm_a16w8_mxfp8/gemm_a16w8_mxfp8_tune.py",
        untuned_csv="aiter/configs/a16w8_mxfp8_asm_untuned_gemm.csv",
        tuned_csv="aiter/configs/a16w8_mxfp8_asm_tuned_gemm.csv",
        config_env="AITER_CONFIG_GEMM_A16W8_MXFP8_ASM",
        untuned_columns=("M", "N", "K"),
        requires_gfx=frozenset({"gfx942"}),
        since=(0, 1, 21),
        max_m=64,             # M > 64 raises for the whole run (its tuner checks every shape first)
        bench=BenchSpec(script="csrc/gemm_a16w8_mxfp8/gemm_a16w8_mxfp8_tune.py", style="run_config",
                        output="run_config", metric="E2E(us)", higher_is_better=False,
                        key_columns={"M": "m", "N": "n", "K": "k"}),
    ),
]
