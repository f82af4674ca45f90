"""Benchmark invocations per argument style, straight from the variant registry."""

from orchestrator.steps.bench import EXTRA_SHAPE_S, PROCESS_START_S, match_results, plan_bench
from orchestrator.variants import get_variant, profile_for

CUR = profile_for((0, 1, 20))


def v(name, profile=CUR):
    return get_variant(name).resolve(profile)


def test_m_nk_style_passes_ms_and_nks_once_with_preshuffle_inferred():
    shapes = [{"m": m, "n": n, "k": k} for (n, k) in [(7168, 2048), (512, 7168)] for m in (1, 2, 32768)]
    [call] = plan_bench(v("a8w8_blockscale"), shapes)
    assert call.script == "op_tests/test_gemm_a8w8_blockscale.py"
    assert call.args == ("-m", "1", "2", "32768", "-nk", "7168,2048", "512,7168", "--ck_preshuffle", "False")
    assert call.checked == {"-m": ["1", "2", "32768"]}
    [call] = plan_bench(v("a8w8_blockscale_bpreshuffle"), shapes)
    assert call.args[-2:] == ("--ck_preshuffle", "True")


def test_m_nk_style_groups_nk_pairs_by_identical_m_sets_when_extra_shapes_cost_more_than_a_process():
    # C-17: the script crosses every -m with every -nk; (N,K) pairs with different Ms get their own call
    # when measuring the crossed pairs nobody asked for costs more than another process start (issue 26)
    many = [{"m": m, "n": 1536, "k": 7168} for m in range(1, 21)]
    shapes = many + [{"m": 64, "n": 7168, "k": 2048}]
    calls = plan_bench(v("a8w8_blockscale"), shapes)
    assert [c.args[-4:-2] for c in calls] == [("-nk", "1536,7168"), ("-nk", "7168,2048")]
    assert [len(c.shapes) for c in calls] == [20, 1]
    crossed = sum((c.args.index("-nk") - 1) * (len(c.args) - 3 - c.args.index("-nk")) for c in calls)
    assert crossed == len(shapes)  # nothing measured that nobody asked for
    assert (21 * 2 - 21) * EXTRA_SHAPE_S > PROCESS_START_S


def test_m_nk_style_measures_a_few_extra_shapes_in_one_process_when_cheaper():
    # issue 26: 4 crossed shapes nobody asked for (dropped by matching) cost less than a second process start
    shapes = [{"m": 16, "n": 1536, "k": 7168}, {"m": 32, "n": 1536, "k": 7168},
              {"m": 64, "n": 7168, "k": 2048}, {"m": 16, "n": 4096, "k": 512}, {"m": 32, "n": 4096, "k": 512}]
    [call] = plan_bench(v("a8w8_blockscale"), shapes)
    assert call.args[:-2] == ("-m", "16", "32", "64", "-nk", "1536,7168", "7168,2048", "4096,512")
    assert list(call.shapes) == shapes
    assert 4 * EXTRA_SHAPE_S < PROCESS_START_S
    rows = [{"key": {"m": m, "n": n, "k": k}, "value": 1.0} for m in (16, 32, 64)
            for n, k in ((1536, 7168), (4096, 512), (7168, 2048))]
    assert len(match_results(v("a8w8_blockscale").bench, shapes, rows)) == len(shapes)   # extras dropped


def test_mnk_style_groups_by_quant_dtype():
    shapes = [{"m": 1, "n": 2, "k": 3, "q_dtype_w": "torch.int8"},
              {"m": 4, "n": 5, "k": 6, "q_dtype_w": "torch.float8_e4m3fnuz"}]
    calls = plan_bench(v("a8w8"), shapes)
    assert [c.args for c in calls] == [("-mnk", "1,2,3", "-q", "i8"), ("-mnk", "4,5,6", "-q", "fp8")]
    [a4] = plan_bench(v("a4w4_blockscale"), [{"m": 1, "n": 2, "k": 3}])
    assert a4.args == ("-mnk", "1,2,3")


def _a16(m, n, k, out="torch.bfloat16", bias=False, scaleab=False, bpreshuffle=False):
    return {"m": m, "n": n, "k": k, "bias": bias, "dtype": "torch.bfloat16", "outdtype": out,
            "scaleab": scaleab, "bpreshuffle": bpreshuffle}


def test_mnk_typed_style_one_call_per_dtypes_and_bias_and_no_scaled_or_preshuffled_shape():
    """a16w16 (issue 30): `-mnk .. -d D -o O [-b]`; the op_test's tgemm call has no scale and no preshuffled
    weight, so those shapes are not benchmarked (a result would be another key's)."""
    shapes = [_a16(1, 6144, 2048), _a16(32, 6144, 2048), _a16(64, 256, 5120, out="torch.float32"),
              _a16(8, 512, 512, bias=True), _a16(16, 512, 512, scaleab=True), _a16(16, 512, 512, bpreshuffle=True)]
    calls = plan_bench(v("a16w16"), shapes)
    assert [c.args for c in calls] == [
        ("-mnk", "1,6144,2048", "32,6144,2048", "-d", "bf16", "-o", "bf16"),
        ("-mnk", "64,256,5120", "-d", "bf16", "-o", "fp32"),
        ("-mnk", "8,512,512", "-d", "bf16", "-o", "bf16", "-b"),
    ]
    assert calls[0].script == "op_tests/test_gemm_a16w16.py" and len(calls[0].shapes) == 2
    res = [{"key": {"m": 64, "n": 256, "k": 5120, "dtype": "torch.bfloat16", "outdtype": "torch.float32",
                    "bias": "False"}, "value": 7.9}]
    assert match_results(v("a16w16").bench, shapes, res) == [{"key": shapes[2], "value": 7.9}]


def test_batched_style_groups_by_b_and_checks_b_choices():
    shapes = [{"b": 16, "m": 1, "n": 1280, "k": 8192}, {"b": 8, "m": 2, "n": 1280, "k": 8192}]
    calls = plan_bench(v("batched_a8w8"), shapes)
    assert [c.args for c in calls] == [("-b", "16", "-s", "1,1280,8192"), ("-b", "8", "-s", "2,1280,8192")]
    assert calls[1].checked == {"-b": ["8"]}
    cur_bf16 = plan_bench(v("batched_bf16"), shapes[:1])[0]
    assert cur_bf16.args[-2:] == ("-l", "bmn")
    legacy_bf16 = plan_bench(v("batched_bf16", profile_for((0, 1, 11))), shapes[:1])[0]
    assert "-l" not in legacy_bf16.args


def test_moe_style_maps_quant_index_activation_and_doweight():
    base = {"model_dim": 4096, "inter_dim": 512, "expert": 512, "topk": 10, "act_type": "ActivationType.Silu",
            "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn",
            "q_type": "QuantType.per_1x128", "use_g1u1": 1, "doweight_stage1": 0}
    shapes = [{"token": t, **base} for t in (1, 64, 1024)]
    [call] = plan_bench(v("moe_2stages"), shapes)
    assert call.args == ("-t", "1", "64", "1024", "-dim", "4096,512", "-e", "512", "-k", "10", "-q", "5",
                         "-a", "silu", "-s", "f", "-p", "f")


def test_results_are_matched_back_to_full_shapes():
    bench = v("a8w8").bench
    shapes = [{"m": 1, "n": 2, "k": 3, "q_dtype_w": "torch.int8"}]
    got = match_results(bench, shapes, [{"key": {"m": 1.0, "n": 2, "k": 3, "q_dtype_w": "torch.int8"}, "value": 5.0},
                                        {"key": {"m": 9, "n": 2, "k": 3}, "value": 1.0}])
    assert got == [{"key": shapes[0], "value": 5.0}]


def test_moe_configs_with_same_dims_keep_their_own_results_per_call_section():
    # C-19: Silu and Gelu experts with the same dims/dtypes are two bench calls; each call's section (the
    # '== tune-remote call i' line prepare prints) is matched only against that call's shapes
    from orchestrator.steps.bench import CALL_MARK, measured_by_call
    base = {"model_dim": 7168, "inter_dim": 256, "expert": 256, "topk": 8, "dtype": "torch.bfloat16",
            "q_dtype_a": "torch.bfloat16", "q_dtype_w": "torch.bfloat16", "q_type": "QuantType.No",
            "use_g1u1": 1, "doweight_stage1": 0}
    shapes = [{"token": 16, **base, "act_type": "ActivationType.Silu"},
              {"token": 16, **base, "act_type": "ActivationType.Gelu"}]
    calls = plan_bench(v("moe_2stages"), shapes)
    assert len(calls) == 2 and ("-a", "gelu") == calls[1].args[calls[1].args.index("-a"):][:2]

    def table(us):
        return ("[aiter] moe_2stage summary (markdown):\n"
                "| dtype | token | model_dim | inter_dim | E | topk | AQDType | WQDType | us |\n"
                "|:--|--:|--:|--:|--:|--:|:--|:--|--:|\n"
                f"| torch.bfloat16 | 16 | 7168 | 256 | 256 | 8 | torch.bfloat16 | torch.bfloat16 | {us} |\n")
    text = f"{CALL_MARK} 0\n{table(10.0)}{CALL_MARK} 1\n{table(20.0)}"
    got = measured_by_call(v("moe_2stages").bench, shapes, text, [c.shapes for c in calls])
    assert sorted((r["key"]["act_type"], r["value"]) for r in got) == [
        ("ActivationType.Gelu", 20.0), ("ActivationType.Silu", 10.0)]
    # a log without call markers (older job) is one section: the dims collapse, as before
    assert len(measured_by_call(v("moe_2stages").bench, shapes, table(10.0) + table(20.0))) == 1


def test_moe_a16wi4_and_mxfp8_are_benchmarked_with_their_quant_index_or_refused():
    """l_quant 8 (a16wi4) and 9 (MXFP8) at HEAD; an op_test whose -q stops at 7 refuses them (one line)
    instead of running every quant type and matching on dims only (issue 30)."""
    import pytest

    from orchestrator.errors import UsageError
    from orchestrator.steps.bench import check_moe_quant
    base = {"model_dim": 7168, "inter_dim": 256, "expert": 257, "topk": 9, "act_type": "ActivationType.Silu",
            "dtype": "torch.bfloat16", "q_type": "QuantType.per_1x32", "use_g1u1": 1, "doweight_stage1": 0}
    mxfp8 = {"token": 16, **base, "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn"}
    wi4 = {"token": 16, **base, "q_dtype_a": "torch.bfloat16", "q_dtype_w": "torch.int4"}
    odd = {"token": 16, **base, "q_type": "QuantType.per_Tensor", "q_dtype_a": "torch.bfloat16",
           "q_dtype_w": "torch.int8"}
    assert [c.args[c.args.index("-q") + 1] for c in plan_bench(v("moe_2stages"), [mxfp8, wi4])] == ["9", "8"]
    check_moe_quant(v("moe_2stages"), [mxfp8, wi4], 9)
    for shape, needle in ((mxfp8, "-q stops at 7, this is -q 9"), (wi4, "this is -q 8"), (odd, "no l_quant entry")):
        with pytest.raises(UsageError, match=needle):
            check_moe_quant(v("moe_2stages"), [shape], 7)
    check_moe_quant(v("a8w8"), [{"m": 1, "n": 2, "k": 3}], 7)      # not a MoE variant: nothing to check


def test_fixed_cost_in_the_dry_run_plan():
    """Issue 26: the plan shows the processes, builds and projected real minutes the bench plan decided."""
    from orchestrator.campaign.plan import plan_lines
    from orchestrator.steps.bench import BUILD_S, fixed_cost

    shapes = [{"m": 16, "n": 1536, "k": 7168}, {"m": 32, "n": 1536, "k": 7168}, {"m": 64, "n": 7168, "k": 2048}]
    c = fixed_cost(v("a8w8_blockscale"), shapes, repeats=1)
    assert c["calls_per_run"] == 1 and c["processes"] == 1 * 2 * 1 + 2 and c["builds"] == 2
    assert c["minutes"] == (4 * PROCESS_START_S + 2 * BUILD_S) / 60
    plan = {"variants": {"a8w8_blockscale": {"gfx950/256": {"n1/c": shapes}}}, "repeats": 3}
    lines = plan_lines(plan)
    assert any("fixed cost: 8 process starts (1 op_test call(s) per arm and run x 3 run(s) x 2 arms" in ln
               and "2 JIT build(s) at least" in ln for ln in lines), lines
