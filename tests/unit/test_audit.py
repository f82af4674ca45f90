"""audit (issue 30): each kind of finding on a small table, clean tables (the shipped samples), the CLI contract."""

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.parsing.audit import KINDS, audit_tables, merge_group, unparsable_moe_kernel
from orchestrator.parsing.csvtools import read_tuned_csv

SAMPLES = Path("/work/shared/aiter-samples/configs")
GEMM = "gfx,cu_num,M,N,K,q_dtype_w,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n"
GOOD = "flydsl_bpreshuflle_32x64x512_F8_F8_B16_0x1x4x2_default"
OLD = "flydsl_bpreshuffle_32x64x512_F8_F8_B16_w4_default"          # a name from before the rename (#5069)
FMOE = ("gfx,cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
        "doweight_stage1,block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage,tflops,bw\n")


def gemm_row(m, us, name="a8w8_ck_1", err="0.0", cu=256, n=1536):
    return f"gfx950,{cu},{m},{n},7168,torch.float8_e4m3fn,ck,1,0,{us},{name},1.0,1.0,{err}\n"


def fmoe_row(token, us, err="0.1%"):
    return (f"gfx950,256,{token},7168,256,257,9,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,"
            f"torch.float8_e4m3fn,QuantType.per_1x128,1,0,32,0,10.0,k1,{err},10.0,k2,0.0%,{us},0,1,1\n")


def audit(files, cu=()):
    return audit_tables([(name, read_tuned_csv(text)) for name, text in files.items()], cu)


def kinds(findings):
    return sorted({f["kind"] for f in findings})


def test_clean_table_has_no_findings():
    text = GEMM + "".join(gemm_row(m, 5.0 + m / 100) for m in (1, 2, 4, 8)) + gemm_row(16, 7.0, GOOD)
    assert audit({"a8w8_bpreshuffle_tuned_gemm.csv": text}, cu=[256]) == []


def test_copied_us_across_token_buckets_of_one_shape():
    """aiter#5641: five token buckets, one us; another shape with the same us is not counted with them."""
    text = FMOE + "".join(fmoe_row(t, "359.4797") for t in (1, 2, 4, 8, 16)) + fmoe_row(32, "401.2")
    found = audit({"tuned_fmoe.csv": text})
    assert kinds(found) == ["copied_us"] and len(found) == 5
    assert found[0]["key"]["token"] == "1" and found[0]["key"]["expert"] == "257"
    assert "5 token buckets" in found[0]["detail"]
    two = GEMM + gemm_row(1, 5.0) + gemm_row(2, 5.0) + gemm_row(4, 5.0, n=2048)    # two buckets: chance
    assert audit({"a8w8_bpreshuffle_tuned_gemm.csv": two}) == []


def test_unparsable_flydsl_name():
    found = audit({"a8w8_bpreshuffle_tuned_gemm.csv": GEMM + gemm_row(16, 7.0, OLD) + gemm_row(32, 8.0, GOOD)})
    assert kinds(found) == ["unparsable_kernel"] and found[0]["key"]["M"] == "16" and OLD in found[0]["detail"]


BF16 = "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName,err_ratio,tflops,bw\n"
HGEMM = ("flydsl_gemm5_abf16_wbf16_bf16_t16x64x128_split_k2_block_m_warp1_block_n_warp2_block_k_warp1_"
         "async_copyTrue_b_to_ldsTrue_b_preshuffleFalse_c_to_ldsFalse_gfx950")


def bf16_row(m, name, libtype="flydsl", err="0.0"):
    return f"gfx950,256,{m},6144,2048,False,torch.bfloat16,torch.bfloat16,False,False,{libtype},1,0,{m}.5,{name},{err},1,1\n"


def test_unparsable_a16w16_flydsl_name_and_its_err_ratio_column():
    """aiter#2817: an a16w16 FlyDSL row whose name the catalog does not parse (here: an older field order, and a
    flydsl row with a name of another family); `err_ratio` is that table's spelling of errRatio."""
    old = HGEMM.replace("_split_k2_block_m_warp1", "_block_m_warp1_split_k2")
    text = BF16 + bf16_row(1, HGEMM) + bf16_row(2, old) + bf16_row(4, "hgemm_t16x64", "flydsl") + bf16_row(
        8, "_ZN5aiter39bf16gemm_fp32bf16_tn_64x64_splitk_cleanE", "asm") + bf16_row(16, "F.linear", "torch", "0.2")
    found = audit({"bf16_tuned_gemm.csv": text})
    assert [(f["kind"], f["key"]["M"]) for f in found] == [
        ("unparsable_kernel", "2"), ("unparsable_kernel", "4"), ("err_ratio", "16")]
    assert "aiter#2817" in found[0]["detail"] and found[0]["key"]["bias"] == "False"
    assert merge_group("model_configs/dsv3_bf16_tuned_gemm.csv") == "bf16_tuned_gemm"


def test_duplicate_key_across_merged_files_only():
    """The main table and its model_configs sibling collide; another variant's table with the same key does not."""
    main_t = GEMM + gemm_row(16, 7.0)
    found = audit({"aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv": main_t,
                   "aiter/configs/model_configs/dsv3_a8w8_bpreshuffle_tuned_gemm.csv": GEMM + gemm_row(16, 6.0),
                   "aiter/configs/a8w8_tuned_gemm.csv": main_t})
    assert kinds(found) == ["duplicate_key"] and len(found) == 1
    assert found[0]["file"].endswith("dsv3_a8w8_bpreshuffle_tuned_gemm.csv")
    assert "aiter/configs/a8w8_bpreshuffle_tuned_gemm.csv" in found[0]["detail"]
    assert merge_group("model_configs/dsv3_a4w4_blockscale_tuned_gemm.csv") == "a4w4_blockscale_tuned_gemm"


def test_foreign_cu_num_only_with_the_nodes_cu_num():
    text = GEMM + gemm_row(16, 7.0) + gemm_row(16, 7.0, cu=304)
    assert audit({"a8w8_tuned_gemm.csv": text}) == []
    found = audit({"a8w8_tuned_gemm.csv": text}, cu=[256])
    assert kinds(found) == ["foreign_cu_num"] and found[0]["key"]["cu_num"] == "304"
    # on a gfx950 node, gfx942 rows are the wheel's rows for other GPUs; a gfx950 row for 128 CUs is not
    other = text.replace("gfx950,304", "gfx942,304") + gemm_row(32, 7.0, cu=128)
    found = audit_tables([("t.csv", read_tuned_csv(other))], [256], "gfx950")
    assert [f["key"]["cu_num"] for f in found] == ["128"]


def test_err_ratio_over_the_upstream_bound():
    found = audit({"a8w8_tuned_gemm.csv": GEMM + gemm_row(16, 7.0, err="0.06") + gemm_row(32, 7.5, err="0.05")})
    assert kinds(found) == ["err_ratio"] and found[0]["key"]["M"] == "16"
    moe = audit({"tuned_fmoe.csv": FMOE + fmoe_row(1, "9.0", err="60.0%") + fmoe_row(2, "9.5", err="40%")})
    assert kinds(moe) == ["err_ratio"] and moe[0]["key"]["token"] == "1"


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="the shared AITER samples are not on this machine")
def test_shipped_sample_tables_are_clean():
    for d in SAMPLES.iterdir():
        if d.is_dir():
            files = [p for p in d.glob("*tuned*.csv") if "untuned" not in p.name]
            assert audit({p.name: p.read_text() for p in files}) == [], d


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_exit_codes(tmp_path, capsys):
    bad = tmp_path / "a8w8_bpreshuffle_tuned_gemm.csv"
    bad.write_text(GEMM + gemm_row(16, 7.0, OLD) + gemm_row(32, 7.0, cu=304)
                   + gemm_row(64, 7.0, cu=304).replace("gfx950", "gfx942"))   # MI300X's row, shipped: not flagged
    clean = tmp_path / "a8w8_tuned_gemm.csv"
    clean.write_text(GEMM + gemm_row(16, 7.0))
    code, out, _ = run(["audit", str(bad), "--cu-num", "256", "--json"], capsys)
    found = json.loads(out)
    assert code == 1 and {f["kind"] for f in found} == {"unparsable_kernel", "foreign_cu_num"}
    assert [f["key"]["M"] for f in found if f["kind"] == "foreign_cu_num"] == ["32"]
    assert all(set(f) == {"kind", "file", "key", "detail"} and f["kind"] in KINDS for f in found)
    code, out, _ = run(["audit", str(bad), "--cu-num", "256"], capsys)
    assert code == 1 and out.splitlines()[0].split()[:4] == ["kind", "file", "key", "detail"]
    assert run(["audit", str(clean), "--json"], capsys)[:2] == (0, "[]\n")
    for argv in (["audit"], ["audit", str(clean), "--node", "n1"], ["audit", str(clean), "--container", "c"],
                 ["audit", str(tmp_path / "nope.csv")], ["audit", str(tmp_path)]):
        code, _, err = run(argv, capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1, (argv, err)
    (tmp_path / "untuned.csv").write_text("M,N,K\n1,2,3\n")
    assert run(["audit", str(tmp_path / "untuned.csv")], capsys)[0] == 2


@pytest.mark.parametrize("profile", ["legacy", "current", "newest"])
def test_sim_plants_one_defect_of_each_kind(tmp_path, profile):
    """SimSpec.table_defects: each kind found once more than in the shipped tables, nothing else."""
    from orchestrator.sim import SimSpec, install

    def found(defects):
        where = tmp_path / ("planted" if defects else "clean")
        install(where, SimSpec(profile=profile, table_defects=defects))
        cfg = next(where.glob("**/aiter/configs"))
        files = [p for p in cfg.rglob("*tuned*.csv") if "untuned" not in p.name]
        return audit_tables([(str(p.relative_to(cfg)), read_tuned_csv(str(p))) for p in files], [256], "gfx950")

    shipped = [f["kind"] for f in found(())]
    planted = [f["kind"] for f in found(KINDS)]
    assert sorted(planted) == sorted(shipped + ["copied_us"] * 5 + list(KINDS[1:]))


def test_config_env_tables_as_aiter_reads_them():
    from orchestrator.audit import config_env_tables
    named, notes = config_env_tables({"AITER_CONFIG_FMOE": "/a/x.csv:rel/y.csv::", "AITER_LOG_TUNED_CONFIG": "1",
                                      "AITER_CONFIG_GEMM_A8W8": "/a/x.csv", "AITER_CONFIG_GEMM_BF16": ""}, "/r")
    assert named == {"/a/x.csv": "AITER_CONFIG_FMOE", "/r/rel/y.csv": "AITER_CONFIG_FMOE"}
    assert notes == ["AITER_CONFIG_FMOE: rel/y.csv is relative; AITER resolves it against the server's working "
                     "directory, audited as /r/rel/y.csv"]


def test_env_merged_tables_are_grouped_by_their_variable_not_their_name():
    import pandas as pd
    from orchestrator.parsing.audit import audit_tables
    row = {"cu_num": 256, "token": 1, "model_dim": 7168, "us": 5.0}
    a, b = pd.DataFrame([row]), pd.DataFrame([{**row, "us": 6.0}])
    tables = [("aiter/configs/tuned_fmoe.csv", a), ("/data/my_tuned_fmoe.csv", b)]
    assert [f["kind"] for f in audit_tables(tables)] == ["duplicate_key"]
    assert audit_tables(tables, merged_as={"/data/my_tuned_fmoe.csv": "AITER_CONFIG_FMOE"}) == []


def test_a_row_whose_flydsl_name_does_not_parse_is_never_promoted():
    """aiter#2817: promote drops (and notes) the keys whose tuned kernel AITER could not run."""
    from types import SimpleNamespace

    from orchestrator.steps.promote import refuse_unparsable
    from orchestrator.variants import get_variant
    shape = {"m": 2, "n": 6144, "k": 2048, "bias": False, "dtype": "torch.bfloat16", "outdtype": "torch.bfloat16",
             "scaleab": False, "bpreshuffle": False}
    kernels = [dict(shape, kernel=HGEMM), dict(shape, m=4, kernel=HGEMM.replace("split_k2", "splitk2"))]
    notes = []
    job = SimpleNamespace(step_state=lambda name: SimpleNamespace(info={"tuned": {"kernels": kernels}}),
                          note=notes.append)
    ctx = SimpleNamespace(variant=get_variant("a16w16"), job=job)
    keys = [[2, 6144, 2048, False, "torch.bfloat16", "torch.bfloat16", False, False],
            ["4", "6144", "2048", "False", "torch.bfloat16", "torch.bfloat16", "False", "False"]]
    assert refuse_unparsable(ctx, keys) == keys[:1]
    assert len(notes) == 1 and notes[0].startswith("not promoted: {'m': '4'") and "aiter#2817" in notes[0]


SHIPPED_0182 = ("gfx942,80,128,128,5120,torch.int8,asm,0,8,7.3189,_ZN5aiter41I8gemm_bf16_perTokenI8_BpreShuffle_16x128E,"
                "22.92,183.56,0.182\n")


def test_cli_err_ratio_is_upstreams_level0_guard_bound(tmp_path, capsys):
    """issue 36 defect 1: the shipped gfx942 int8 asm row (errRatio 0.182) is healthy by upstream's own guard
    (test_csv_validation flags only errRatio > 0.2); a row over 0.2 is still a finding."""
    shipped = tmp_path / "a8w8_bpreshuffle_tuned_gemm.csv"
    shipped.write_text(GEMM + SHIPPED_0182)
    assert run(["audit", str(shipped), "--json"], capsys)[:2] == (0, "[]\n")
    shipped.write_text(GEMM + SHIPPED_0182 + SHIPPED_0182.replace(",128,128,", ",256,128,").replace("0.182", "0.25"))
    code, out, _ = run(["audit", str(shipped), "--json"], capsys)
    found = json.loads(out)
    assert code == 1 and [(f["kind"], f["key"]["M"]) for f in found] == [("err_ratio", "256")]
    assert "level-0 guard" in found[0]["detail"] and "0.2" in found[0]["detail"]


def test_guard_bound_read_from_the_guards_text():
    from orchestrator.parsing.audit import UPSTREAM_GUARD_ERR_BOUND, guard_err_bound
    assert UPSTREAM_GUARD_ERR_BOUND == 0.2
    text = ("                err_col = pd.to_numeric(df['errRatio'], errors='coerce')\n"
            "                high = df[err_col > 0.3]\n")
    assert guard_err_bound(text) == 0.3
    assert guard_err_bound("import unittest\n") is None and guard_err_bound(None) is None
    sim = Path("orchestrator/sim/tree/op_tests/tuning_tests/test_csv_validation.py").read_text()
    assert guard_err_bound(sim) == 0.2          # the simulated guard is upstream's
    found = audit_tables([("t.csv", read_tuned_csv(GEMM + gemm_row(16, 7.0, err="0.25")))], err_bound=0.3)
    assert found == []


def test_unparsable_fused_moe_kernel_names_in_every_kernel_column():
    """issue 36 defect 2: AITER's MoE runtime looks a FlyDSL kernelName1/kernelName2 up in its registry
    (flydsl_moe{stage}_a{a}_w{b}_{out}_t{M}x{N}x{K}[_flags]) and raises 'Invalid FlyDSL kernel name' for one it
    cannot parse: a tile without its `t`, in kernelName2, is a finding; the shipped names are not."""
    bad = "flydsl_moe2_afp4_wfp4_bf16_256x256x256_atomic"
    good1, good2 = "flydsl_moe1_afp8_wfp4_bf16_t32x64x256_w4_gui_kw4_fp8", "flydsl_moe2_afp8_wfp4_bf16_t32x256x128_atomic"
    rows = (fmoe_row(1, "9.0").replace(",k1,", f",{good1},").replace(",k2,", f",{bad},")
            + fmoe_row(2, "9.5").replace(",k1,", f",{good1},").replace(",k2,", f",{good2},")
            + fmoe_row(4, "9.7").replace(",k1,", ",flydsl_moe1_afp8_wfp4_bf16_t32x64_w4,"))
    found = audit({"tuned_fmoe.csv": FMOE + rows})
    assert [(f["kind"], f["key"]["token"]) for f in found] == [("unparsable_kernel", "1"), ("unparsable_kernel", "4")]
    assert found[0]["detail"].startswith(f"kernelName2 {bad}: ") and "Invalid FlyDSL kernel name" in found[0]["detail"]
    assert found[1]["detail"].startswith("kernelName1 ")
    for name in ("flydsl_moe2_layout_afp4_wfp4_bf16_t64x256x256_atomic_persist_nt_sbm64",
                 "flydsl_moe2_afp4_wfp4_bf16_t64x128x256_atomic_persist_async_w4_cumul3",
                 "moe_ck2stages_gemm2_256x32x64x128_1x4_MulABScale_v1_Nswizzle0_Quant2_MulRoutedWeight1_B16"):
        assert unparsable_moe_kernel(name) is None, name


def test_cli_flags_the_fused_moe_name(tmp_path, capsys):
    t = tmp_path / "tuned_fmoe.csv"
    t.write_text(FMOE + fmoe_row(1, "9.0").replace(",k2,", ",flydsl_moe2_afp4_wfp4_bf16_256x256x256_atomic,"))
    code, out, _ = run(["audit", str(t), "--json"], capsys)
    assert code == 1 and [f["kind"] for f in json.loads(out)] == ["unparsable_kernel"]


def test_flydsl_bpreshuffle_rows_aiter_sends_to_another_runner_are_not_judged_by_the_mfma_parser():
    """aiter/ops/gemm_op_a8w8.py: on gfx1250 every FlyDSL bpreshuffle row goes to the WMMA runner, and a
    `flydsl_bpreshuffle_8w_` name to the 8-wave runner, before the MFMA name parser: upstream's 48 shipped gfx1250
    `flydsl_bpreshuffle_wmma_*` rows are not findings; the same name on gfx950 still is (it would run CK)."""
    wmma = "flydsl_bpreshuffle_wmma_t128x64x128_mw4_nw1_nb3_sk1_cm1_cn1"
    text = (GEMM + gemm_row(16, 7.0, wmma).replace("gfx950,256", "gfx1250,32")
            + gemm_row(32, 7.0, "flydsl_bpreshuffle_8w_t64x256x128") + gemm_row(64, 7.0, wmma))
    found = audit({"a8w8_bpreshuffle_tuned_gemm.csv": text})
    assert [(f["kind"], f["key"]["M"]) for f in found] == [("unparsable_kernel", "64")]
