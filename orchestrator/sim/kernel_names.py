"""The simulated tuners' kernel catalogue: how many candidates a variant times, and the kernel names its
tuned rows carry (as the shipped tables spell them). Stdlib only, Python 3.8+: copied into the node beside
perf_model.py (``aiter/_sim/kernel_names.py``), which re-exports ``candidates`` and ``A16W16_LIBTYPES``.
"""

_KERNEL_TILES = ("256x16x64x256", "256x32x64x256", "256x64x128x128", "256x128x128x128",
                 "256x128x256x64", "256x256x128x64", "128x16x32x512", "256x64x64x256")
_ASM_TILES = ("16x128", "32x128", "48x128", "64x128", "96x128", "128x128")


# a16w16 backends (gemm_a16w16_tune.py --libtype; hipblaslt only with --with-hipblaslt) and name forms as the
# shipped bf16_tuned_gemm.csv spells them (the FlyDSL one parses with aiter/ops/flydsl/gemm_kernels.py)
A16W16_LIBTYPES = ("asm", "flydsl", "triton", "opus", "skinny", "torch")
_A16W16_NAMES = {
    "asm": "_ZN5aiter39bf16gemm_fp32bf16_tn_%(t)s_splitk_cleanE", "opus": "opus_gemm_%(t)sx64_2x1_16x16x32_0x0x0_4g_safe",
    "flydsl": "flydsl_gemm2_abf16_wbf16_bf16_t%(t)sx128_split_k%(s)d_block_m_warp1_block_n_warp2_block_k_warp1_"
              "async_copyTrue_b_to_ldsTrue_b_preshuffleFalse_c_to_ldsFalse_%(gfx)s",
    "hipblaslt": "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT%(t)sx64_MI16x16x1_SN_LDSB1_AFC1",
    "triton": "_gemm_a16_w16_kernel_BLOCK_SIZE_M_%(t)s", "skinny": "wvSplitK", "torch": "F.linear"}


def kernel_name(variant: str, idx: int, libtype: str, gfx: str = "gfx950") -> str:
    """The ``kernelName`` of a tuned row: candidate ``idx`` of ``variant`` in backend ``libtype``."""
    tile = _KERNEL_TILES[idx % len(_KERNEL_TILES)]
    pipe = "intrawave_v%d" % (1 + idx % 3)
    if variant == "a16w16":
        return _A16W16_NAMES[libtype] % {"t": ("16x64", "32x64", "64x64", "80x64")[idx % 4], "s": 1 + idx % 4,
                                         "gfx": gfx}
    if variant == "a8w8_mxfp8_bpreshuffle":  # FlyDSL mxpsh only (the grammar of its kernelName, split-K included)
        return "flydsl_mxpsh_%s_F8_F8_B16_w%d_x%d_sk%d" % (("32x128x128", "64x128x128", "32x32x256", "64x256x128")[idx % 4],
                                                        idx % 3, (0, 4)[idx % 2], (1, 1, 2, 4)[idx % 4])
    if variant == "a6w6":  # asm only (hsa/gfx950/f6gemm/f6gemm_bf16_per1x32Fp6.csv)
        return "f6gemm_%s_grp16_kernel_func" % ("dmabig", "dmasmall", "lds", "direct")[idx % 4]
    if libtype == "asm":
        t = _ASM_TILES[idx % len(_ASM_TILES)]
        if variant == "a4w4_blockscale":
            return "_ZN5aiter41f4gemm_bf16_per1x32Fp4_BpreShuffle_%sE" % t
        if variant == "a8w8_bpreshuffle":
            return "_ZN5aiter41I8gemm_bf16_perTokenI8_BpreShuffle_%sE" % t
        return "_ZN5aiter42fp8gemm_bf16_blockscale_BpreShuffle_%sE" % t
    if variant == "a8w8":
        return "a8w8_rowwise_%s_16x16_1x1_32x8x1_32x8x1_1x16x1x16_4x4x1_1x1_%s" % (tile, pipe)
    if variant == "a8w8_bpreshuffle":
        return "a8w8_bpreshuffle_%s_16x16_16x16_32x8x1_32x8x1_1x16x1x16_4x4x1_1x1_%s" % (tile, pipe)
    if variant == "a8w8_blockscale":
        if libtype == "cktile":
            return "a8w8_blockscale_cktile_%s_4x2x1_16x16x128_intrawave_0x1x0_1" % tile
        return "a8w8_blockscale_1x128x128_%s_16x16_16x16_1x1_16x16x1_16x16x1_1x16x1x16_4_1x1_%s" % (tile, pipe)
    if variant == "a8w8_blockscale_bpreshuffle":
        return "a8w8_blockscale_bpreshuffle_1x128x128_%s_16x16_16x16_16x16x1_16x16x1_1x16x1x16_4_1x1_%s" % (
            tile, pipe)
    if variant == "a4w4_blockscale":
        return "f4gemm_ck_%s_%s" % (tile, pipe)
    if variant == "batched_a8w8":
        return "a8w8_batched_rowwise_%s_32x32_1x1_16x16x1_16x16x1_1x32x1x8_8x8x1_1x1_%s" % (tile, pipe)
    if variant == "batched_bf16":
        return "bf16_batched_%s_16x16_1x1_8x8x1_8x8x1_1x16x1x4_4x4x1_1x1_%s" % (tile, pipe)
    # a variant with no grammar of its own here (served from its registry facts alone)
    return "%s_%s_%s_%s" % (variant, libtype, tile, pipe)


GENERIC_CANDIDATES = 32   # a variant with no count of its own here


def candidates(variant: str) -> int:
    """Number of kernel candidates the simulated tuner pretends to time per shape."""
    return {"a8w8": 80, "a8w8_bpreshuffle": 64, "a8w8_blockscale": 48, "a8w8_blockscale_bpreshuffle": 40,
            "a4w4_blockscale": 36, "a6w6": 12, "a8w8_mxfp8_bpreshuffle": 20, "a16w16": 96, "batched_a8w8": 60, "batched_bf16": 60, "moe_2stages": 24}.get(variant, GENERIC_CANDIDATES)
