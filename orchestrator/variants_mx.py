"""Registry entries of the microscaling (MX: MXFP4 / MXFP6 / MXFP8, e8m0 block scales) tuners AITER added
after the fetchable v0.1.20.post1 mirror (aiter-december-2026.md "New tuner scripts"; each entry's facts read
from the stored ROCm/aiter commit named beside it). ``variants.VARIANTS`` holds them with the others: one
entry per tuner, nothing else to change (the seam of CONTRIBUTING's add-a-variant recipe).

``since=(0, 1, 21)``: the stored commits come after the v0.1.20.post1 mirror; the reference lists them with
v0.1.30, and no stored release note dates them more closely. Whether a node has one is probed (its tuner
file), never read from the version.

The MXFP8 batched GEMM bmm_a8w8_mxscale_bpreshuffle (last entry; opus + FlyDSL, gfx950) is the one whose
table is keyed in lower case WITHOUT cu_num (gfx,b,m,n,k,w_scale_block + libtype): shapelib/tablekey.py reads
every key from the table's own header (cu_num only where it has one, so ROCm/aiter PR #5668's form with cu_num
works too), its runtime's miss line is parsed by shapelib/shapebmm.py (both forms), and the simulator has its
tuner and lookup for the newest/head profiles (sim/tree/csrc/bmm_a8w8_mxscale/, aiter/ops/opus/policy.py).
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
        miss_source="aiter/ops/gemm_op_a4w4.py",   # its miss line (lru_cached lookup: once per shape per process)
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
        # tries the exact shape, then the 256x256x128-padded one (not getPaddedM).
        name="a6w4",
        jit_module=None,      # prebuilt .co kernels named in the rows
        splitk="refuses",     # the real tuner raises "does not support split-K" when given -k
        libtypes=(),
        family="gemm",
        tune_script="csrc/gemm_a6w4/gemm_a6w4_tune.py",
        miss_source="aiter/ops/gemm_op_a6w4.py",   # its miss line (lru_cached lookup: once per shape per process)
        untuned_csv="aiter/configs/a6w4_asm_untuned_gemm.csv",
        # the default path of AITER_CONFIG_GEMM_A6W4_ASM is not in the index; the runtime merge's family
        # list names the stem a6w4_asm_tuned_gemm and the manifest test the file a6w4_asm_tuned_gemm.csv
        tuned_csv="aiter/configs/a6w4_asm_tuned_gemm.csv",
        config_env="AITER_CONFIG_GEMM_A6W4_ASM",
        untuned_columns=("M", "N", "K"),
        requires_gfx=frozenset({"gfx950"}),
        # its runtime (aiter/ops/gemm_op_a6w4.py via gemm_op_mixed_mxfp.py) logs its lookups (shapefmt MX_MISS /
        # MX_HIT) only with AITER_LOG_TUNED_CONFIG, once per shape per process
        log_gate_env="AITER_LOG_TUNED_CONFIG",
        since=(0, 1, 21),
        # no op_test of the index benchmarks it: its tuner's own --run_config does (gemm_mixed_mxfp_tune.py
        # GemmMixedMxfpTuner.run_config, 610d1e8e: aiter.gemm_a6w4 per shape, run_perftest us as E2E(us);
        # without a CSV it passes the default selector's kernelName, with one the op reads that table)
        bench=BenchSpec(script="csrc/gemm_a6w4/gemm_a6w4_tune.py", style="run_config", output="run_config",
                        metric="E2E(us)", higher_is_better=False, key_columns={"M": "m", "N": "n", "K": "k"}),
    ),
    KernelVariant(
        # gfx950 A4W6 (MXFP4 activations, MXFP6 weights) asm GEMM, a6w4's sibling: the same shared tuner
        # (csrc/gemm_mixed_mxfp/gemm_mixed_mxfp_tune.py at 610d1e8e, _FAMILY_SPECS["a4w6"]: display name A4W6,
        # manifest hsa/gfx950/f4f6gemm/f4f6gemm_bf16_per1x32Fp4Fp6.csv, untune_file
        # aiter/configs/a4w6_asm_untuned_gemm.csv, config_env_name AITER_CONFIG_GEMM_A4W6_ASM) run by its entry
        # point csrc/gemm_a4w6/gemm_a4w6_tune.py (path from the mixed-MXFP README; the file itself is not in
        # the index). Key gfx,cu_num,M,N,K (README), split-K and a gfx other than gfx950 make tune() raise,
        # the same paired --min-gain-pct guard as a6w4.
        name="a4w6",
        jit_module=None,      # prebuilt .co kernels of hsa/gfx950/f4f6gemm
        splitk="refuses",     # the shared tuner raises "A4W6 does not support split-K" when given -k
        libtypes=(),
        family="gemm",
        tune_script="csrc/gemm_a4w6/gemm_a4w6_tune.py",
        miss_source="aiter/ops/gemm_op_a4w6.py",   # its miss line (lru_cached lookup: once per shape per process)
        untuned_csv="aiter/configs/a4w6_asm_untuned_gemm.csv",
        # the default of AITER_CONFIG_GEMM_A4W6_ASM is not in the index; the runtime merge's family list names
        # the stem a4w6_asm_tuned_gemm and the manifest test (tests of 610d1e8e) the file a4w6_asm_tuned_gemm.csv
        tuned_csv="aiter/configs/a4w6_asm_tuned_gemm.csv",
        config_env="AITER_CONFIG_GEMM_A4W6_ASM",
        untuned_columns=("M", "N", "K"),
        requires_gfx=frozenset({"gfx950"}),
        # as a6w4's: aiter/ops/gemm_op_a4w6.py logs its lookups only with AITER_LOG_TUNED_CONFIG
        log_gate_env="AITER_LOG_TUNED_CONFIG",
        since=(0, 1, 21),
        # as a6w4's: the shared tuner's own --run_config (GemmMixedMxfpTuner.run_config, 610d1e8e: aiter.gemm_a4w6
        # per shape; without a CSV the default selector's kernelName, with one the op reads that table)
        bench=BenchSpec(script="csrc/gemm_a4w6/gemm_a4w6_tune.py", style="run_config", output="run_config",
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
        miss_source="aiter/ops/gemm_op_a16w8_mxfp8.py",   # its miss line (lru_cached lookup: once per shape per process)
        untuned_csv="aiter/configs/a16w8_mxfp8_asm_untuned_gemm.csv",
        tuned_csv="aiter/configs/a16w8_mxfp8_asm_tuned_gemm.csv",
        config_env="AITER_CONFIG_GEMM_A16W8_MXFP8_ASM",
        untuned_columns=("M", "N", "K"),
        requires_gfx=frozenset({"gfx942"}),
        # aiter/ops/gemm_op_a16w8_mxfp8.py logs its bucket lookups (shapefmt MX_MISS / MX_BUCKET_HIT) only with
        # AITER_LOG_TUNED_CONFIG, once per shape per process
        log_gate_env="AITER_LOG_TUNED_CONFIG",
        since=(0, 1, 21),
        max_m=64,             # M > 64 raises for the whole run (its tuner checks every shape first)
        bench=BenchSpec(script="csrc/gemm_a16w8_mxfp8/gemm_a16w8_mxfp8_tune.py", style="run_config",
                        output="run_config", metric="E2E(us)", higher_is_better=False,
                        key_columns={"M": "m", "N": "n", "K": "k"}),
    ),
    KernelVariant(
        # gfx950 MXFP8 (e8m0 block scales) batched GEMM with a (16,16)-preshuffled weight, opus + FlyDSL in one
        # sweep (csrc/bmm_a8w8_mxscale/bmm_a8w8_mxscale_bpreshuffle_tune.py stored at f081855b and 4cb36987,
        # a subclass of csrc/opus_gemm/opus_bmm_mxscale_tune.py's OpusBmmMxscaleTuner; its README at
        # fb06b88c). The batched family (B in the key, shapes from logs or --shapes-csv, no --nk) with what
        # differs from the CK batched tables: lower-case key gfx,b,m,n,k,w_scale_block WITHOUT cu_num
        # (tablekey.py reads it from the header), a libtype column (opus | flydsl, kernelId -1 on FlyDSL
        # rows), the weight-scale block "128x128" | "32x32" | "1x32" (1x32 opus only) a key column. The
        # runtime (aiter/ops/opus/policy.py lookup_mxscale_bmm_config, lru_cached) tries M, then get_padded_m
        # at two granularities, and logs its miss once per shape per process (shapelib/shapebmm.py).
        name="bmm_a8w8_mxscale_bpreshuffle",
        jit_module=None,      # README: "Changing a tuned CSV does not force an OPUS module rebuild"
        splitk="refuses",
        # OpusBmmMxscaleTuner._setup_specific_arguments removes the base -k/--splitK and reuses -k as -k/--K
        # (a list of K values, default 4096): a bare -k is an argparse error, `-k 2` would tune K=2
        splitk_refusal="its -k is the K dimension (-k/--K, a list of K values), not split-K; it times its "
                       "split-K candidates anyway (the row's splitK column)",
        libtypes=("opus", "flydsl"),
        family="batched",
        tune_script="csrc/bmm_a8w8_mxscale/bmm_a8w8_mxscale_bpreshuffle_tune.py",
        miss_source="aiter/ops/opus/policy.py",   # lookup_mxscale_bmm_config, lru_cached (once per process)
        # both ship header only (README). Without -i the tuner takes the shapes of the shipped DSV4 model table
        # and without -o writes INTO it (aiter/configs/model_configs/dsv4_batched_gemm_a8w8_blockscale_mxscale_
        # bpreshuffle_tuned.csv): tune-remote always passes both.
        untuned_csv="aiter/configs/batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_untuned.csv",
        tuned_csv="aiter/configs/batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned.csv",
        config_env="AITER_CONFIG_BATCHED_GEMM_A8W8_BLOCKSCALE_MXSCALE_BPRESHUFFLE",
        # the README's untuned header (lower case; upper case and g for b are accepted too)
        untuned_columns=("b", "m", "n", "k", "w_scale_block"),
        requires_gfx=frozenset({"gfx950"}),
        since=(0, 1, 21),
        # README (fb06b88c): --w_scale_block filters the input's explicit scale rows (default 32x32,128x128:
        # a 1x32 row would be dropped); where the tuner has it, every block passes, so exactly the job's rows
        # are tuned. The opus base of the f081855b era (--groupSize, no --w_scale_block) ignores the input's
        # w_scale_block and tunes every shape at each group (128x128 and 32x32): more rows than asked, all
        # valid. An older opus base (0a990d64: neither flag, key without w_scale_block) replaced -o by the
        # shipped model table under --bpreshuffle, which this tuner forces; it cannot run this tuner (its
        # rows have no w_scale_block), and the later one fixed it ("-o is tune_file ... only a default").
        probed_flags=(("--w_scale_block", "1x32,32x32,128x128"),),
        # that older base is refused before anything runs, told apart by its --help (stored ROCm/aiter
        # opus_bmm_mxscale_tune.py without either flag, index id 60266194491: `elif args.bpreshuffle:
        # args.tune_file = BPRESHUFFLE_CSV`; bce5c477 adds --groupSize and keeps -o: "Only a default")
        help_requires=((("--w_scale_block", "--groupSize"),
                        "its opus base replaces -o by the shipped model table under --bpreshuffle (which this "
                        "tuner forces): the run would write into a shipped table"),),
        # the runtime's M walk is gemm's: exact, then get_padded_m(m, n, k, gl) for gl 0 and 1 (stored
        # aiter/ops/opus/policy.py lookup_mxscale_bmm_config, index id 70836111852): run --padded-m applies
        padded_m_lookup=True,
        # Before/after by its tuner's --run_config WITHOUT a CSV, once per arm (run_config_table=False).
        # OpusBmmMxscaleTuner.run_config (the base of f081855b / 4cb36987, index id 70216553721): without a CSV
        # _default_benchmark times batched_gemm_a8w8_mxscale_bpreshuffle, which looks the shape up in the
        # process's AITER_CONFIG_*_BPRESHUFFLE table (padded M included; aiter/ops/batched_gemm_op_a8w8.py
        # lookup_mxscale_bmm_config(..., bpreshuffle=True), index id 70397090998): with each arm's
        # AITER_CONFIG_* (prepare's _arm_env) that is the production dispatch of the live / staging table. With a
        # CSV, _saved_benchmark times each row's own kernel through the raw launcher (no lookup, no dispatch:
        # not what the server runs), so that call is not planned; its _set_config_env_for_run_config rebuilds
        # nothing (OPUS dispatches compiled kids). Results: `keys: gfx=.., b=.., m=.., n=.., k=.., w_scale_block=..`
        # (base_tuner _print_benchmark_results over self.keys, lower case; the Shape column is
        # "gfx=..,b=..,..." joined by commas). bce5c477's run_config raises for any non-opus row (CSV call only).
        bench=BenchSpec(script="csrc/bmm_a8w8_mxscale/bmm_a8w8_mxscale_bpreshuffle_tune.py", style="run_config",
                        output="run_config", metric="E2E(us)", higher_is_better=False,
                        key_columns={"b": "b", "m": "m", "n": "n", "k": "k", "w_scale_block": "w_scale_block"},
                        run_config_table=False),
    ),
]
