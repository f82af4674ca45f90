"""fused_moe.get_padded_M's token tiers (issue 36): probed from the node's fused_moe.py, followed by the shapes
tune-remote plans (no tuning of a token the runtime never looks up), simulated per release with the tier
fallback of v0.1.14+ (ROCm/aiter 446260d1)."""

import pytest

from orchestrator.aiter_profiles import profile_from_facts
from orchestrator.nodeside import probe
from orchestrator.shapelib.shapefmt import moe_bucket
from orchestrator.sim import SimSpec, install
from orchestrator.sim.lookups import moe_padded_token
from orchestrator.steps.shape_rules import runtime_lookups

from .test_sim_common import ANSI, py

BASE = {"model_dim": 7168, "inter_dim": 256, "expert": 257, "topk": 8, "act_type": "ActivationType.Silu",
        "dtype": "torch.bfloat16", "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn",
        "q_type": "QuantType.per_1x128", "use_g1u1": 1, "doweight_stage1": 0}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    base = tmp_path_factory.mktemp("moetiers")
    return {p: install(base / p, SimSpec(profile=p)) for p in ("legacy", "current", "head")}


def test_moe_bucket_follows_the_nodes_tiers():
    tiers = (32768, 131072)
    assert [moe_bucket(t, tiers=tiers) for t in (96, 32767, 32768, 40000, 131071, 131072, 500000)] == \
        [128, 32768, 32768, 32768, 32768, 131072, 131072]
    assert [moe_bucket(t, tiers=(32768,)) for t in (40000, 500000)] == [32768, 32768]
    assert [moe_bucket(t, tiers=(1024, 2048, 16384)) for t in (600, 1500, 4096, 20000)] == [1024, 1024, 2048, 16384]
    assert moe_bucket(40000) == 40000        # no tiers known: kept, as before


def test_the_plan_drops_a_token_the_runtime_never_looks_up():
    shapes = [{**BASE, "token": t} for t in (40000, 32768, 200000)]
    out, notes = runtime_lookups(shapes, "moe", tiers=(32768, 131072))
    assert [s["token"] for s in out] == [32768, 131072]
    assert len(notes) == 1 and "40000->32768" in notes[0] and "200000->131072" in notes[0]
    assert "32768/131072" in notes[0]
    same, _ = runtime_lookups(shapes, "moe")
    assert [s["token"] for s in same] == [40000, 32768, 200000]


def test_the_probe_reads_each_releases_get_padded_M(nodes):
    got = {p: probe.op_probe({"moe_runtime": f"{inst.aiter_root}/aiter/fused_moe.py"}).get("moe_padded_tiers")
           for p, inst in nodes.items()}
    assert got == {"legacy": [1024, 2048, 16384], "current": [32768, 131072], "head": [32768, 131072]}
    # the forms upstream shipped: v0.1.11's buckets, and a file without the function says nothing
    v0111 = ("def get_padded_M(M):\n    padded_m = M\n    if M >= 1 and M <= 16:\n        padded_m = nextPow2(padded_m)\n"
             "    elif M < 1024:\n        padded_m = nextPow2(padded_m)\n    elif M < 2048:\n        padded_m = 1024\n"
             "    elif M < 16384:\n        padded_m = 2048\n    else:\n        padded_m = 16384\n    return padded_m\n")
    assert probe.moe_padded_tiers(v0111) == [1024, 2048, 16384]
    assert probe.moe_padded_tiers("import os\n") is None
    p = profile_from_facts({"version": "0.1.20", "probes": {"moe_padded_tiers": [32768]}})
    assert p.moe_padded_tiers == (32768,) and "MoE token lookup (fused_moe.py get_padded_M)" in p.probed
    assert profile_from_facts({"version": "0.1.12", "probes": {}}).moe_padded_tiers == (32768,)


@pytest.mark.parametrize("profile", ["legacy", "current"])
def test_the_sim_runtime_and_the_perf_model_pad_alike(nodes, profile):
    tokens = [1, 3, 16, 17, 1000, 1023, 1024, 2047, 2048, 16383, 16384, 32767, 32768, 40000, 131072, 163840]
    r = py(nodes[profile], "-c", "from aiter.fused_moe import get_padded_M; "
           f"print(' '.join(str(get_padded_M(t)) for t in {tokens}))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(moe_padded_token(t, profile)) for t in tokens]


def test_a_token_above_the_top_tier_falls_back_to_the_smaller_tiers_row(nodes, tmp_path):
    inst = nodes["head"]
    head = ("gfx,cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
            "doweight_stage1,block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage,tflops,bw")
    row = ("gfx950,256,32768,7168,256,257,8,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,"
           "torch.float8_e4m3fn,QuantType.per_1x128,1,0,64,0,10,moe_ck2stages_gemm1_tier,0.1%,10,"
           "moe_ck2stages_gemm2_tier,0.1%,20,0,1,1")
    table = tmp_path / "tuned_fmoe.csv"
    table.write_text(head + "\n" + row + "\n")
    code = ("from aiter.fused_moe import fused_moe, QuantType, ActivationType; from aiter.utility import dtypes; "
            "import torch; fused_moe(163840, 7168, 256, 257, 8, torch.bfloat16, dtypes.fp8, dtypes.fp8, "
            "QuantType.per_1x128, True, ActivationType.Silu, False)")
    r = py(inst, "-c", code, env={"AITER_CONFIG_FMOE": str(table), "AITER_LOG_MORE": "1"})
    assert r.returncode == 0, r.stderr
    err = ANSI.sub("", r.stdout + r.stderr)
    assert "kernelName1='moe_ck2stages_gemm1_tier'" in err and "('gfx950', 256, 131072, 7168," in err
