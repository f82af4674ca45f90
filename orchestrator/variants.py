"""THE one place that knows kernel variants and AITER versions: both are data, resolved per node.

Add a kernel variant = add one ``KernelVariant`` entry to ``VARIANTS`` (the MX-format tuners after v0.1.20
keep theirs in ``variants_mx.py``, which VARIANTS takes in whole).
Add an AITER version difference = one threshold or probe in ``aiter_profiles.py`` (and, if a
variant changes, one ``since``/``until`` override on that variant). Steps never branch on a variant's name.

Facts come from ../shared/reference/aiter-formats.md (sections noted next to each field).
"""

from __future__ import annotations

import dataclasses

from .errors import UsageError

from .aiter_profiles import (  # noqa: F401  (re-exported: versions are data too)
    CURRENT_FROM, NEWEST_FROM, OLDEST_SUPPORTED, AiterProfile, Version, format_version, is_dev_build,
    parse_version, profile_for, profile_from_facts,
)
from .variant_spec import MOE_KEY, BenchSpec, KernelVariant  # noqa: F401  (re-exported)
from .variants_fhmoe import FHMOE_VARIANTS
from .variants_mx import MX_VARIANTS


# --------------------------------------------------------------------------------------------
# Kernel variants as data (aiter-formats.md §0, §1.2, §2.1, §2.2, §4, §5.1); their shape: variant_spec.py
# --------------------------------------------------------------------------------------------

_ALL_TIME: Version = (0, 0, 0)
_FOREVER: Version = (9999, 0, 0)

_GEMM_BLOCKSCALE_BENCH = BenchSpec(
    script="op_tests/test_gemm_a8w8_blockscale.py",
    style="m_nk",
    output="markdown",
    metric="ck TFLOPS",
    higher_is_better=True,
    key_columns={"m": "m", "n": "n", "k": "k"},
    extra_args=("--ck_preshuffle", "False"),
    row_filter={"ck_preshuffle": "False"},
)

VARIANTS: dict[str, KernelVariant] = {
    v.name: v
    for v in [
        KernelVariant(
            name="a8w8",
            miss_source="aiter/ops/gemm_op_a8w8.py",
            model_quant=("fp8", "int8"),
            jit_module="module_gemm_a8w8",
            family="gemm",
            padded_m_lookup=True,
            tune_script="csrc/ck_gemm_a8w8/gemm_a8w8_tune.py",
            untuned_csv="aiter/configs/a8w8_untuned_gemm.csv",
            tuned_csv="aiter/configs/a8w8_tuned_gemm.csv",
            config_env="AITER_CONFIG_GEMM_A8W8",
            untuned_columns=("M", "N", "K", "q_dtype_w"),
            bench=BenchSpec(
                script="op_tests/test_gemm_a8w8.py",
                style="mnk",
                output="markdown",
                metric="ck us",
                higher_is_better=False,
                key_columns={"m": "m", "n": "n", "k": "k", "quantDtype": "q_dtype_w"},
            ),
            overrides=(((0, 0, 0), (0, 1, 10), {"untuned_columns": ("M", "N", "K")}),),
            # gemm_a8w8_tune.py --backend ck|opus (aiter-december-2026.md; stored at 89c51974): opus tunes the
            # a8w8 no-scale Opus kernel, whose rows no runtime table reads (upstream sends them to
            # /tmp/opus_a8w8_noscale_tuned_gemm.csv unless -o is given, and tune-remote always gives -o: they
            # would land in the CK table the server reads). Where the flag exists, the CK backend is pinned.
            probed_flags=(("--backend", "ck"),),
            refused_tune_args=(("--backend", "opus",
                                "its rows are the a8w8 no-scale Opus kernel's, which no runtime table reads "
                                "(upstream writes them to /tmp/opus_a8w8_noscale_tuned_gemm.csv); with -o they "
                                "would be promoted into the CK a8w8 table"),),
        ),
        KernelVariant(
            name="a8w8_blockscale",
            miss_source="aiter/ops/gemm_op_a8w8.py",
            model_quant=("block_fp8",),
            jit_module="module_gemm_a8w8_blockscale",
            jit_siblings=(("module_gemm_a8w8_blockscale_cktile", None),),
            libtypes=("ck", "cktile", "asm"),
            family="gemm",
            padded_m_lookup=True,
            tune_script="csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py",
            untuned_csv="aiter/configs/a8w8_blockscale_untuned_gemm.csv",
            tuned_csv="aiter/configs/a8w8_blockscale_tuned_gemm.csv",
            config_env="AITER_CONFIG_GEMM_A8W8_BLOCKSCALE",
            untuned_columns=("M", "N", "K"),
            bench=_GEMM_BLOCKSCALE_BENCH,
        ),
        KernelVariant(
            name="a8w8_blockscale_bpreshuffle",
            miss_source="aiter/ops/gemm_op_a8w8.py",
            jit_module="module_gemm_a8w8_blockscale_bpreshuffle",
            # module_deepgemm_opus appears with the opus backend, from the "newest" profile (v0.1.21+) on
            jit_siblings=(("module_gemm_a8w8_blockscale_bpreshuffle_cktile", None),
                          ("module_deepgemm_opus", "newest")),
            # its tuner takes -k but hard-codes maxsplitK = 0 (aiter-after-v0.1.20.md §2.2, ROCm/aiter#4448 open)
            splitk="never",
            libtypes=("ck", "cktile", "asm"),
            family="gemm",
            padded_m_lookup=True,
            # today: the blockscale script + --preshuffle, with explicit -i/-o (aiter-formats.md §1.2)
            tune_script="csrc/ck_gemm_a8w8_blockscale/gemm_a8w8_blockscale_tune.py",
            tune_flags=("--preshuffle",),
            untuned_csv="aiter/configs/a8w8_blockscale_bpreshuffle_untuned_gemm.csv",
            tuned_csv="aiter/configs/a8w8_blockscale_bpreshuffle_tuned_gemm.csv",
            config_env="AITER_CONFIG_GEMM_A8W8_BLOCKSCALE_BPRESHUFFLE",
            untuned_columns=("M", "N", "K"),
            bench=dataclasses.replace(_GEMM_BLOCKSCALE_BENCH, extra_args=("--ck_preshuffle", "True"),
                                      row_filter={"ck_preshuffle": "True"}),
            overrides=(
                # its own script until it was deleted (35eea80490, 2026-03-29 -> first missing in v0.1.12)
                ((0, 0, 0), (0, 1, 12), {
                    "tune_script": "csrc/ck_gemm_a8w8_blockscale_bpreshuffle/"
                                   "gemm_a8w8_blockscale_bpreshuffle_tune.py",
                    "tune_flags": (),
                }),
            ),
        ),
        KernelVariant(
            name="a8w8_bpreshuffle",
            miss_source="aiter/ops/gemm_op_a8w8.py",
            jit_module="module_gemm_a8w8_bpreshuffle",
            jit_siblings=(("module_gemm_a8w8_bpreshuffle_cktile", None),),
            libtypes=("ck", "cktile", "asm"),
            family="gemm",
            padded_m_lookup=True,
            tune_script="csrc/ck_gemm_a8w8_bpreshuffle/gemm_a8w8_bpreshuffle_tune.py",
            untuned_csv="aiter/configs/a8w8_bpreshuffle_untuned_gemm.csv",
            tuned_csv="aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv",
            config_env="AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE",
            untuned_columns=("M", "N", "K", "q_dtype_w"),
            bench=BenchSpec(
                script="op_tests/test_gemm_a8w8.py",
                style="mnk",
                output="markdown",
                metric="ck bpreshuffle us",
                higher_is_better=False,
                key_columns={"m": "m", "n": "n", "k": "k", "quantDtype": "q_dtype_w"},
            ),
        ),
        KernelVariant(
            name="a4w4_blockscale",
            miss_source="aiter/ops/gemm_op_a4w4.py",
            jit_module="module_gemm_a4w4_blockscale",
            libtypes=("ck", "asm"),
            family="gemm",
            padded_m_lookup=True,
            tune_script="csrc/ck_gemm_a4w4_blockscale/gemm_a4w4_blockscale_tune.py",
            untuned_csv="aiter/configs/a4w4_blockscale_untuned_gemm.csv",
            tuned_csv="aiter/configs/a4w4_blockscale_tuned_gemm.csv",
            config_env="AITER_CONFIG_GEMM_A4W4",
            untuned_columns=("M", "N", "K"),
            requires_gfx=frozenset({"gfx950"}),
            bench=BenchSpec(
                script="op_tests/test_gemm_a4w4.py",
                style="mnk",
                output="markdown",
                metric="us",
                higher_is_better=False,
                key_columns={"M": "m", "N": "n", "K": "k"},
            ),
        ),
        KernelVariant(
            # MXFP6 GEMM, gfx950, ROCm/aiter #4859 (after v0.1.20; aiter-after-v0.1.20.md §3): its hit
            # and miss lines print only with AITER_LOG_TUNED_CONFIG=1. op_tests/test_gemm_a6w6.py's output
            # is not in the reference, so no benchmark: tune only.
            name="a6w6",
            miss_source="aiter/ops/gemm_op_a6w6.py",
            jit_module=None,      # its table feeds none of the CK modules the config variables name
            libtypes=("asm",),
            family="gemm",
            tune_script="csrc/gemm_a6w6/gemm_a6w6_tune.py",
            untuned_csv="aiter/configs/a6w6_blockscale_untuned_gemm.csv",
            tuned_csv="aiter/configs/a6w6_blockscale_tuned_gemm.csv",
            config_env="AITER_CONFIG_GEMM_A6W6",
            untuned_columns=("M", "N", "K"),
            requires_gfx=frozenset({"gfx950"}),
            since=(0, 1, 21),
            log_gate_env="AITER_LOG_TUNED_CONFIG",
            bench=None,
        ),
        KernelVariant(
            # bf16 GEMM, the multi-backend tuner (--libtype asm, flydsl, skinny, torch, triton, opus; hipblaslt
            # only with --with-hipblaslt, and such rows never leave the node: aiter#3285). In csrc/gemm_a16w16
            # since v0.1.16 (before: gradlib's hipBLASLt-only tuner). The table says err_ratio (aiter-formats.md
            # §2.1); its key adds bias, dtype, outdtype, scaleAB, bpreshuffle (tuned_gemm.get_GEMM_A16W16_config).
            name="a16w16",
            miss_source="aiter/tuned_gemm.py",
            model_quant=("none",),   # a model's unquantized (or ignored) linears
            jit_module=None,      # tuned across backends (hipBLASLt, asm, ...), no CK module from the table
            libtypes=("asm", "flydsl", "triton", "opus", "skinny", "torch"),
            family="gemm",
            padded_m_lookup=True,
            tune_script="csrc/gemm_a16w16/gemm_a16w16_tune.py",
            untuned_csv="aiter/configs/bf16_untuned_gemm.csv",
            tuned_csv="aiter/configs/bf16_tuned_gemm.csv",
            config_env="AITER_CONFIG_GEMM_BF16",
            untuned_columns=("M", "N", "K", "bias", "dtype", "outdtype", "scaleAB", "bpreshuffle"),
            since=(0, 1, 16),
            aliases=("bf16",),
            nk_defaults={"bias": False, "dtype": "torch.bfloat16", "outdtype": "torch.bfloat16", "scaleab": False,
                         "bpreshuffle": False},
            bench=BenchSpec(
                # op_tests/test_gemm_a16w16.py: `tgemm us` is tuned_gemm's dispatch (the tuned row);
                # the @benchmark table names the call's arguments dtype, m, n, k, bias, otype
                script="op_tests/test_gemm_a16w16.py",
                style="mnk_typed",
                output="markdown",
                metric="tgemm us",
                higher_is_better=False,
                key_columns={"m": "m", "n": "n", "k": "k", "dtype": "dtype", "otype": "outdtype", "bias": "bias"},
            ),
        ),
        KernelVariant(
            # MXFP8 (1x32 e8m0 scales) GEMM, gfx950, FlyDSL mxpsh kernels only (aiter-december-2026.md, stored
            # at aaf7a35e; after the fetchable v0.1.20.post1 mirror, shipped by v0.1.30). Its default -o is the
            # shipped model table aiter/configs/model_configs/dsv4_a8w8_mxfp8_bpreshuffle_tuned_gemm.csv: every
            # job passes -i/-o (steps/prepare.py), so that table is never written. The runtime reads the table
            # of AITER_CONFIG_GEMM_A8W8_MXFP8_BPRESHUFFLE through get_CKGEMM_config (exact, then padded M).
            name="a8w8_mxfp8_bpreshuffle",
            miss_source="aiter/ops/gemm_op_a8w8.py",     # its lookup: get_CKGEMM_config
            jit_module=None,      # FlyDSL kernels named in its rows, compiled per kernelName, not from the table
            # it never reads args.splitK: it always times its split-K candidates (the count is in the kernelName)
            splitk="always",
            libtypes=("flydsl",),
            family="gemm",
            padded_m_lookup=True,
            tune_script="csrc/gemm_a8w8_mxfp8_bpreshuffle/gemm_a8w8_mxfp8_bpreshuffle_tune.py",
            untuned_csv="aiter/configs/a8w8_mxfp8_bpreshuffle_untuned_gemm.csv",
            tuned_csv="aiter/configs/a8w8_mxfp8_bpreshuffle_tuned_gemm.csv",
            config_env="AITER_CONFIG_GEMM_A8W8_MXFP8_BPRESHUFFLE",
            untuned_columns=("M", "N", "K"),
            requires_gfx=frozenset({"gfx950"}),
            since=(0, 1, 21),
            bench=BenchSpec(
                # op_tests/test_gemm_a8w8_mxfp8_bpreshuffle.py: `-mnk`, `summary:` + a markdown table whose
                # `us` is gemm_a8w8_mxfp8_bpreshuffle (the tuned dispatch)
                script="op_tests/test_gemm_a8w8_mxfp8_bpreshuffle.py",
                style="mnk",
                output="markdown",
                metric="us",
                higher_is_better=False,
                key_columns={"m": "m", "n": "n", "k": "k"},
            ),
        ),
        KernelVariant(
            name="batched_a8w8",
            miss_source="aiter/ops/batched_gemm_op_a8w8.py",
            jit_module="module_batched_gemm_a8w8",
            family="batched",
            tune_script="csrc/ck_batched_gemm_a8w8/batched_gemm_a8w8_tune.py",
            untuned_csv="aiter/configs/a8w8_untuned_batched_gemm.csv",
            tuned_csv="aiter/configs/a8w8_tuned_batched_gemm.csv",
            config_env="AITER_CONFIG_A8W8_BATCHED_GEMM",
            untuned_columns=("B", "M", "N", "K"),
            bench=BenchSpec(
                script="op_tests/test_batched_gemm_a8w8.py",
                style="s_mnk",
                output="perf_lines",
                metric="ck avg",
                higher_is_better=False,
                key_columns={"b": "b", "m": "m", "n": "n", "k": "k"},
            ),
        ),
        KernelVariant(
            name="batched_bf16",
            miss_source="aiter/ops/batched_gemm_op_bf16.py",
            jit_module="module_batched_gemm_bf16",
            family="batched",
            tune_script="csrc/ck_batched_gemm_bf16/batched_gemm_bf16_tune.py",
            untuned_csv="aiter/configs/bf16_untuned_batched_gemm.csv",
            tuned_csv="aiter/configs/bf16_tuned_batched_gemm.csv",
            config_env="AITER_CONFIG_BF16_BATCHED_GEMM",
            untuned_columns=("B", "M", "N", "K"),
            bench=BenchSpec(
                script="op_tests/test_batched_gemm_bf16.py",
                style="s_mnk",
                output="markdown",
                metric="ck us",
                higher_is_better=False,
                key_columns={"b": "b", "m": "m", "n": "n", "k": "k"},
                extra_args=("-l", "bmn"),
                row_filter={"layout": "bmn"},
            ),
            overrides=(
                # <= v0.1.16: `[perf] dim: ...` lines, no table, no --layout
                ((0, 0, 0), (0, 1, 17), {"bench": BenchSpec(
                    script="op_tests/test_batched_gemm_bf16.py",
                    style="s_mnk",
                    output="perf_lines",
                    metric="ck avg",
                    higher_is_better=False,
                    key_columns={"b": "b", "m": "m", "n": "n", "k": "k"},
                )}),
            ),
        ),
        KernelVariant(
            name="moe_2stages",
            miss_source="aiter/fused_moe.py",
            jit_module=None,      # the MoE 2-stage modules are generated without the CSV
            libtypes=(),
            family="moe",
            tune_script="csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py",
            untuned_csv="aiter/configs/untuned_fmoe.csv",
            tuned_csv="aiter/configs/tuned_fmoe.csv",
            config_env="AITER_CONFIG_FMOE",
            untuned_columns=MOE_KEY,
            bench=BenchSpec(
                script="op_tests/test_moe_2stage.py",
                style="moe",
                output="markdown",
                metric="us",
                higher_is_better=False,
                key_columns={"token": "token", "model_dim": "model_dim", "inter_dim": "inter_dim",
                             "E": "expert", "topk": "topk"},
            ),
            overrides=(
                # up to v0.1.9 the MoE tuner lived under hsa/<gfx>/fmoe_2stages/tune.py (PR #1790)
                ((0, 0, 0), (0, 1, 10), {"tune_script": "hsa/{gfx}/fmoe_2stages/tune.py"}),
            ),
        ),
        *FHMOE_VARIANTS,  # the FHMoE tuner (variants_fhmoe.py)
        *MX_VARIANTS,     # the MX-format tuners after v0.1.20 (variants_mx.py)
    ]
}


# GEMMs whose shapes the logs show (and `shapes` mines) but that tune-remote does not tune: name -> the tuned
# CSV the runtime names in their lines (none today: bf16 is the a16w16 variant)
LOGGED_ONLY_TUNED_CSV: dict[str, str] = {}

ALIASES: dict[str, str] = {a: v.name for v in VARIANTS.values() for a in v.aliases}


def get_variant(name: str) -> KernelVariant:
    try:
        return VARIANTS[ALIASES.get(name, name)]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(name, VARIANTS, n=1)
        raise UsageError(
            f"unknown variant {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
            hint="choose one of: " + ", ".join(VARIANTS),
        ) from None


# derived from the entries (jit_module, jit_siblings): the main module per variant, the siblings per variant
JIT_MODULES = {v.name: v.jit_module for v in VARIANTS.values() if v.jit_module}
JIT_SIBLINGS = {v.name: v.jit_siblings for v in VARIANTS.values() if v.jit_siblings}
_PROFILE_ORDER = ("legacy", "current", "newest")


def jit_modules(variant_name: str) -> list[str]:
    """The main CK module compiled from the variant's tuned table (the one a job always builds)."""
    v = VARIANTS.get(ALIASES.get(variant_name, variant_name))
    return [v.jit_module] if v is not None and v.jit_module else []


def table_modules(variant_name: str, profile: str | None = None) -> list[str]:
    """Every module compiled from the variant's tuned table: the main one, then the siblings the table also
    feeds on this AITER profile (None = the newest known; a module that is not there is harmless to move
    aside or to look for). Promotion moves them all aside, rollback restores them all (issue 26)."""
    rank = _PROFILE_ORDER.index(profile) if profile in _PROFILE_ORDER else len(_PROFILE_ORDER)
    v = VARIANTS.get(ALIASES.get(variant_name, variant_name))
    siblings = v.jit_siblings if v is not None else ()
    return [*jit_modules(variant_name), *(m for m, since in siblings
                                          if since is None or rank >= _PROFILE_ORDER.index(since))]
