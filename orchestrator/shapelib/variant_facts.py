"""Variant facts for the node helper. GENERATED from orchestrator/variants.py: do not edit.

Change variants.py, then run `python -m orchestrator.gen_variant_facts`
(tests/unit/test_variant_facts.py fails while this file differs from what it writes).
Stdlib only, Python >= 3.8 (pushed to the node with the helper).
"""

# the fused-MoE variant and the key of its tuned CSV (variants.MOE_KEY)
MOE_VARIANT = "moe_2stages"
MOE_KEY = (
    "token",
    "model_dim",
    "inter_dim",
    "expert",
    "topk",
    "act_type",
    "dtype",
    "q_dtype_a",
    "q_dtype_w",
    "q_type",
    "use_g1u1",
    "doweight_stage1",
)

# tuned-file stem -> variant, longest first: the first stem found in a file name wins
# (from each GEMM variant's tuned_csv and variants.LOGGED_ONLY_TUNED_CSV)
FILE_STEMS = (
    ("batched_gemm_a8w8_blockscale_mxscale_bpreshuffle_tuned", "bmm_a8w8_mxscale_bpreshuffle"),
    ("a8w8_blockscale_bpreshuffle_tuned_gemm", "a8w8_blockscale_bpreshuffle"),
    ("a8w8_mxfp8_bpreshuffle_tuned_gemm", "a8w8_mxfp8_bpreshuffle"),
    ("a8w8_bpreshuffle_tuned_gemm", "a8w8_bpreshuffle"),
    ("a8w8_blockscale_tuned_gemm", "a8w8_blockscale"),
    ("a4w4_blockscale_tuned_gemm", "a4w4_blockscale"),
    ("a6w6_blockscale_tuned_gemm", "a6w6"),
    ("a16w8_mxfp8_asm_tuned_gemm", "a16w8_mxfp8"),
    ("a8w8_tuned_batched_gemm", "batched_a8w8"),
    ("bf16_tuned_batched_gemm", "batched_bf16"),
    ("a6w4_asm_tuned_gemm", "a6w4"),
    ("a4w6_asm_tuned_gemm", "a4w6"),
    ("a8w8_tuned_gemm", "a8w8"),
    ("bf16_tuned_gemm", "a16w16"),
    ("tuned_fhmoe", "fhmoe"),
)
