"""Tuner controls (issue 12, P-06): composing, checking against the tuner's --help, the splitK note."""

import pytest

from orchestrator.errors import UsageError
from orchestrator.steps.tuneargs import (compose, flags_of, normalize_q_dtype_w, probed_argv, refuse_values,
                                        splitk_note, validate)

HELP_BLOCKSCALE = ("usage: gemm_a8w8_blockscale_tune.py [-h] [--verbose] [-i UNTUNE_FILE] [-o TUNE_FILE] [--mp MP]\n"
                   "  -k, --splitK  Use splitK kernels\n  --errRatio ERRRATIO\n  --all\n"
                   "  --libtype {ck,cktile,asm,opus,all,both}\n  --min_improvement_pct MIN_IMPROVEMENT_PCT\n")
HELP_A8W8 = "usage: gemm_a8w8_tune.py [-h] [-i UNTUNE_FILE] [--mp MP]\n  -k, --splitK\n  --errRatio ERRRATIO\n"


def test_compose_order_and_shell_words():
    assert compose(["--all", "--min_improvement_pct 5"], splitk=True, libtype="all", err_ratio=0.1) == [
        "--splitK", "--libtype", "all", "--errRatio", "0.1", "--all", "--min_improvement_pct", "5"]
    assert compose() == []
    with pytest.raises(UsageError):
        compose(["--x 'unclosed"])


def test_flags_of_keeps_values_out():
    assert flags_of(["--min_improvement_pct", "-5", "--sort=True", "-k", "1e-3"]) == [
        "--min_improvement_pct", "--sort", "-k"]


def test_validate_against_help():
    validate(compose(["--all"], splitk=True, libtype="ck", err_ratio=0.2), HELP_BLOCKSCALE, "t.py")
    with pytest.raises(UsageError, match="has no flag --libtype .*a8w8, a4w4 and batched"):
        validate(["--libtype", "ck"], HELP_A8W8, "gemm_a8w8_tune.py")
    with pytest.raises(UsageError, match="has no flag --bogus") as e:
        validate(["--bogus"], HELP_BLOCKSCALE, "t.py")
    assert "--splitK" in e.value.hint
    for flag, hint in (("--mp", "--gpus"), ("--batch", "--batch"), ("--timeout", "--timeout"), ("-o", "shapes")):
        with pytest.raises(UsageError, match=f"tuner flag {flag} is set by tune-remote") as e:
            validate([flag, "1"], HELP_BLOCKSCALE, "t.py")
        assert hint in e.value.hint
    with pytest.raises(UsageError, match="--help did not answer"):
        validate(["--all"], None, "t.py", "exit 1")
    validate([], None, "t.py")  # nothing to check


def test_splitk_note():
    note = splitk_note([], HELP_BLOCKSCALE, "a8w8_blockscale")
    assert note and "--splitk" in note and "13-61 %" in note
    assert splitk_note(["--splitK"], HELP_BLOCKSCALE, "a8w8_blockscale") is None
    assert splitk_note(["-k"], HELP_BLOCKSCALE, "a8w8_blockscale") is None
    assert splitk_note([], "usage: x.py [-h] [--mp MP]\n", "x") is None  # a tuner without -k
    assert splitk_note([], None, "x") is None
    # the blockscale bpreshuffle tuner hard-codes maxsplitK = 0 (#4448): no advice to pass -k, and a note if given
    assert splitk_note([], HELP_BLOCKSCALE, "a8w8_blockscale_bpreshuffle") is None
    assert "changes nothing" in splitk_note(["-k"], HELP_BLOCKSCALE, "a8w8_blockscale_bpreshuffle")
    # the MXFP8 bpreshuffle FlyDSL tuner times its split-K candidates without -k
    assert splitk_note([], HELP_BLOCKSCALE, "a8w8_mxfp8_bpreshuffle") is None
    assert "always times" in splitk_note(["-k"], HELP_BLOCKSCALE, "a8w8_mxfp8_bpreshuffle")



def test_q_dtype_w():
    assert normalize_q_dtype_w("int8", ["a8w8"]) == "torch.int8"
    assert normalize_q_dtype_w("torch.float8_e4m3fnuz", ["a8w8_bpreshuffle"]) == "torch.float8_e4m3fnuz"
    with pytest.raises(UsageError, match="not a weight dtype"):
        normalize_q_dtype_w("fp8", ["a8w8"])
    with pytest.raises(UsageError, match="applies to a8w8"):
        normalize_q_dtype_w("int8", ["a8w8_blockscale"])


def test_runtime_lookups_snap_moe_tokens_and_cap_m():
    from orchestrator.steps.shape_rules import runtime_lookups
    base = {"model_dim": 7168, "inter_dim": 256, "expert": 257, "topk": 8}
    shapes = [{"token": t, **base} for t in (1, 24, 32, 40, 96, 128, 65536)]
    got, notes = runtime_lookups(shapes, "moe")
    assert [s["token"] for s in got] == [1, 32, 64, 128, 65536]   # 24->32 (dup), 40->64, 96->128 (dup)
    assert len(notes) == 1 and "3 MoE token value(s) snapped" in notes[0] and "24->32" in notes[0]
    got, notes = runtime_lookups(shapes, "moe", max_m=64)
    assert [s["token"] for s in got] == [1, 32, 64]
    assert any("--max-m 64: 2 shape(s)" in n for n in notes)
    gemm = [{"m": m, "n": 8, "k": 8} for m in (1, 24, 4096)]
    got, notes = runtime_lookups(gemm, "gemm", max_m=1024)
    assert [s["m"] for s in got] == [1, 24] and len(notes) == 1   # GEMM M is looked up exactly first
    assert runtime_lookups(gemm, "gemm") == (gemm, [])


def test_gemm_m_snapped_to_the_padded_m_grid_and_deduplicated():
    # aiter-formats.md §3.1: the lookup tries M, then getPaddedM(M,N,K,0) (16/32/64/128 steps); one row at
    # the padded M serves the whole bucket, so the pow2 Ms 1..16 are one tuning
    from orchestrator.steps.shape_rules import padded_m, runtime_lookups
    assert [padded_m(m) for m in (1, 16, 17, 24, 256, 257, 1000, 1025, 4097, 8192)] == \
        [16, 16, 32, 32, 256, 288, 1024, 1088, 4224, 8192]
    gemm = [{"m": m, "n": 1536, "k": 7168} for m in (1, 2, 4, 8, 16, 24, 32, 48, 300)]
    got, notes = runtime_lookups(gemm, "gemm", padded=True)
    assert [s["m"] for s in got] == [16, 32, 48, 320]
    assert "padded-M grid" in notes[0] and "5 tuning(s)" in notes[0]
    # variants whose runtime does not pad (batched, A6W6's own tile rule) are left alone
    from orchestrator.variants import get_variant
    assert get_variant("a8w8_blockscale").padded_m_lookup and not get_variant("a6w6").padded_m_lookup
    assert runtime_lookups(gemm, "gemm") == (gemm, [])


def test_table_the_log_says_aiter_consulted_is_warned_and_used_on_request():
    # C-12: miss lines name the file AITER consulted; a server with its own AITER_CONFIG_* reads another table
    from orchestrator.steps.shape_sources import consulted_table
    root, target = "/aiter", "/aiter/aiter/configs/a8w8_blockscale_tuned_gemm.csv"
    assert consulted_table({target: 3, "aiter/configs/a8w8_blockscale_tuned_gemm.csv": 1}, target, root,
                           "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE", False) == (None, None)
    # merged tables and the old 'CKGEMM or asmGEMM' name no tunable table
    assert consulted_table({"/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv": 2, "CKGEMM or asmGEMM": 1},
                           target, root, "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE", False) == (None, None)
    chosen, msg = consulted_table({"/srv/my_tuned.csv": 5, target: 1}, target, root,
                                  "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE", False)
    assert chosen is None and "/srv/my_tuned.csv (5 shape(s))" in msg and "--table-from-log" in msg
    chosen, msg = consulted_table({"/srv/my_tuned.csv": 5}, target, root, "AITER_CONFIG_GEMM_A8W8_BLOCKSCALE", True)
    assert chosen == "/srv/my_tuned.csv" and msg.startswith("tuning /srv/my_tuned.csv")


def test_moe_tuple_form_from_the_log_is_a_probe_not_a_version_guess():
    from orchestrator.aiter_profiles import profile_from_facts
    from orchestrator.steps.shape_sources import probe_moe_tuple
    facts = {"version": "0.1.20"}
    assert any(a.startswith("MoE tuple form") for a in profile_from_facts(facts).assumed)   # from the version
    probe_moe_tuple(facts, [False, False, True])           # the log shows (256, 16, ...) tuples
    assert facts["probes"]["moe_tuple_gfx"] is False and facts["profile"] == "current"
    assert "MoE tuple form (server log)" in facts["probed"]


def test_table_from_log_reads_the_header_of_the_table_it_will_tune():
    # the capability probe read the env/default table's header (with gfx); the log's table has none
    import types

    from orchestrator.state import JobState
    from orchestrator.steps.shape_sources import reprobe_header
    job = JobState(job_id="j", node="n", container="c", variant="a8w8_blockscale", created=0, request={},
                   facts={"version": "0.1.20", "probes": {"tuned_header": ["gfx", "cu_num", "M", "N", "K"]}})
    asked = []
    ctx = types.SimpleNamespace(facts=job.facts, call=lambda op, req: asked.append((op, req)) or
                                {"tuned_header": ["cu_num", "M", "N", "K", "kernelId"]})
    reprobe_header(ctx, "/srv/tables/mine.csv")
    assert asked == [("probe", {"tuned_csv": "/srv/tables/mine.csv"})]
    from orchestrator.aiter_profiles import profile_from_facts
    assert job.facts["probes"]["tuned_header"][0] == "cu_num"
    assert "gfx column (tuned CSV header)" in job.facts["probed"]


HELP_BACKEND = "usage: gemm_a8w8_tune.py [-h] [-i UNTUNE_FILE] [-o TUNE_FILE] [--backend {ck,opus}]\n"


def test_probed_flags_only_where_the_tuner_has_them():
    frag = (("--backend", "ck"),)
    assert probed_argv(frag, HELP_BACKEND, []) == ["--backend", "ck"]
    assert probed_argv(frag, "usage: gemm_a8w8_tune.py [-h] [-i UNTUNE_FILE]\n", []) == []  # an older tuner
    assert probed_argv(frag, None, []) == []                       # --help did not answer: nothing assumed
    assert probed_argv(frag, HELP_BACKEND, ["--backend=ck"]) == []  # the user's own value stays alone


def test_refused_tune_arg_values():
    from orchestrator.variants import get_variant

    v = get_variant("a8w8")
    for args in (["--backend", "opus"], ["--backend=opus"]):
        with pytest.raises(UsageError, match="--backend opus is not tuned by tune-remote") as e:
            refuse_values(args, v.refused_tune_args, v.name)
        assert "/tmp/opus_a8w8_noscale_tuned_gemm.csv" in str(e.value) and e.value.hint
    refuse_values(["--backend", "ck"], v.refused_tune_args, v.name)
    refuse_values(["--backend", "opus"], get_variant("a8w8_bpreshuffle").refused_tune_args, "a8w8_bpreshuffle")


def test_the_dp_shared_token_contract_buckets_from_16():
    """--tune-arg --token-bucket-contract dp_shared (aiter test_fmoe_tuner_token_buckets: the DP shared-expert
    path buckets nextPow2 from 16 up): tokens 1..16 are one tuning, not five; the runtime's contract is as ever."""
    from orchestrator.steps.shape_rules import dp_shared_contract, runtime_lookups, snap
    from orchestrator.records import JobRequest
    from orchestrator.variants import get_variant
    base = {"model_dim": 7168, "inter_dim": 256, "expert": 257, "topk": 8}
    shapes = [{"token": t, **base} for t in (1, 2, 8, 16, 17, 64)]
    got, notes = runtime_lookups(shapes, "moe", dp_shared=True)
    assert [s["token"] for s in got] == [16, 32, 64]
    assert "from 16 up (--token-bucket-contract dp_shared)" in notes[0]
    assert [s["token"] for s in runtime_lookups(shapes, "moe")[0]] == [1, 2, 8, 16, 32, 64]
    req = JobRequest.from_dict({"tune_args": ["--token-bucket-contract=dp_shared"]})
    assert dp_shared_contract(req) and not dp_shared_contract(JobRequest.from_dict({"tune_args": []}))
    assert snap({"token": 3, **base}, get_variant("moe_2stages"), req)["token"] == 16
