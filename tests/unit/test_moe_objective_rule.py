"""A MoE row's us is never compared across the fused-MoE tuner's objective change (issue 36): audit's copied_us,
recheck and the compare step's kernels table each say so in one line where they skip."""

import io
from types import SimpleNamespace

import pandas as pd

from orchestrator.aiter_profiles import profile_from_facts
from orchestrator.moe_quant import OBJECTIVE_SKIP, objective_of
from orchestrator.parsing.audit import audit_tables, row_objective_key
from orchestrator.recheck.judge import objective_notes
from orchestrator.recheck.rows import Promoted
from orchestrator.state import JobState, Workspace
from orchestrator.steps.compare import tuned_outcome
from orchestrator.variants import get_variant

KEY = "gfx,cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1"
TAIL = "block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage,tflops,bw"
SHAPE = "7168,256,257,8,ActivationType.Silu,torch.bfloat16,torch.float4_e2m1fn_x2,torch.float4_e2m1fn_x2,QuantType.per_1x32,1,0"


def _row(token, us, kernel="moe_ck2stages_gemm1_a"):
    return f"gfx950,256,{token},{SHAPE},32,0,{us},{kernel},0.1%,1.0,k2,0.1%,{us},0,1.0,1.0"


def _table(*rows):
    return "\n".join([KEY + "," + TAIL, *rows]) + "\n"


def test_copied_us_never_groups_rows_tuned_under_two_objectives():
    df = pd.read_csv(io.StringIO(_table(_row(1024, 359.4797), _row(2048, 359.4797), _row(4096, 359.4797))))
    assert [f["kind"] for f in audit_tables([("tuned_fmoe.csv", df)])] == ["copied_us"] * 3
    keys = [c for c in KEY.split(",")]
    objectives = {row_objective_key(r, keys): ("stage_sum" if r["token"] < 4096 else "stage_sum+quant")
                  for _, r in df.iterrows()}
    skipped = []
    found = audit_tables([("tuned_fmoe.csv", df)], objectives={"tuned_fmoe.csv": objectives}, skipped=skipped)
    assert found == []
    assert len(skipped) == 1 and OBJECTIVE_SKIP in skipped[0] and "3 row(s) of tuned_fmoe.csv" in skipped[0]
    # one objective for all three: still one measurement copied
    same = {k: "stage_sum+quant" for k in objectives}
    assert len(audit_tables([("tuned_fmoe.csv", df)], objectives={"tuned_fmoe.csv": same})) == 3


def test_recheck_says_in_one_line_which_promoted_moe_rows_had_another_objective():
    key = dict(zip(KEY.split(",")[3:], SHAPE.split(",")))
    rows = [Promoted("moe_2stages", "/a/tuned_fmoe.csv", {"token": "1024", **key}, {}, "job-old", 1.0,
                     facts={"moe_objective": "stage_sum"}),
            Promoted("moe_2stages", "/a/tuned_fmoe.csv", {"token": "2048", **key}, {}, "job-new", 2.0,
                     facts={"moe_objective": "stage_sum+quant"}),
            Promoted("a8w8", "/a/a8w8.csv", {"m": "1"}, {}, "job-gemm", 3.0, facts={"moe_objective": "stage_sum"})]
    then, lines = objective_notes(rows, "stage_sum+quant", lambda v: get_variant(v).family)
    assert list(then.values()) == ["stage_sum"] and len(lines) == 1
    assert "job job-old" in lines[0] and OBJECTIVE_SKIP in lines[0] and "stage_sum then, stage_sum+quant now" in lines[0]


def test_objective_of_a_job_is_its_probe_else_its_version():
    assert objective_of({"version": "0.1.20", "probes": {"moe_objective": "stage_sum"}}) == "stage_sum"
    assert objective_of({"version": "0.1.11"}) == "stage_sum"
    assert objective_of({"version": "0.1.20"}) == "stage_sum+quant"
    assert objective_of({}) is None


def _job(job_id, created, version, shapes, probes=None):
    return JobState(job_id=job_id, node="n", container="c", variant="moe_2stages", created=created, request={},
                    facts={"gfx": "gfx950", "cu_num": 256, "version": version, "probes": probes or {}},
                    remote={"tuned_csv": "/x/aiter/configs/tuned_fmoe.csv", "tuned_backup": "/x/b/tuned_fmoe.csv"},
                    shapes=shapes)


def test_compare_shows_no_us_of_a_row_kept_from_a_job_under_another_objective(tmp_path):
    shape = dict(zip(KEY.split(",")[3:], SHAPE.split(",")))
    typed = {k: (int(v) if v.isdigit() else v) for k, v in shape.items()}
    s1, s2 = {**typed, "token": 1024}, {**typed, "token": 2048}
    ws = Workspace(tmp_path / "ws")
    ws.save(_job("old", 1.0, "0.1.11", [s1]))                     # tuned on v0.1.11: stage_sum (assumed)
    job = _job("new", 2.0, "0.1.20", [s1, s2], {"moe_objective": "stage_sum+quant"})
    ws.save(job)
    jd = ws.job_dir("new")
    (jd / "backup").mkdir(parents=True)
    (jd / "backup" / "tuned_fmoe.csv").write_text(_table(_row(1024, 50.0)))
    (jd / "tuned_fmoe.csv").write_text(_table(_row(1024, 50.0), _row(2048, 60.0)))
    profile = profile_from_facts(job.facts)
    ctx = SimpleNamespace(job=job, job_dir=jd, workspace=ws, profile=profile,
                          variant=get_variant("moe_2stages").resolve(profile))
    out = tuned_outcome(ctx)
    assert out["moe_objective"] == "stage_sum+quant"
    kept, fresh = out["kernels"]
    assert kept["us"] is None and kept["us_other_objective"] == 50.0 and kept["objective"] == "stage_sum"
    assert fresh["us"] == 60.0 and fresh["objective"] == "stage_sum+quant"
    [note] = [n for n in job.notes if OBJECTIVE_SKIP in n]
    assert note.startswith("1 MoE row(s) kept from before this job")
