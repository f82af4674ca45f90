"""The fused-MoE tuner's objective (issue 36; test_fmoe_tune_objective.py, 1c87c39f; charge since v0.1.12): the
simulated tuners write it, the probe reads it from the tuner's source, the profile records it probed or assumed."""

import pytest

from orchestrator.aiter_profiles import profile_from_facts
from orchestrator.nodeside import probe
from orchestrator.sim import SimSpec, install
from orchestrator.sim import flydsl_moe, perf_model as pm
from orchestrator.variants import VARIANTS

from .test_sim_common import py, read_csv, write_csv

FP4 = {"token": 512, "model_dim": 7168, "inter_dim": 256, "expert": 257, "topk": 8,
       "act_type": "ActivationType.Silu", "dtype": "torch.bfloat16", "q_dtype_a": "torch.float4_e2m1fn_x2",
       "q_dtype_w": "torch.float4_e2m1fn_x2", "q_type": "QuantType.per_1x32", "use_g1u1": 1, "doweight_stage1": 0}
FP8 = {**FP4, "q_dtype_a": "torch.float8_e4m3fn", "q_dtype_w": "torch.float8_e4m3fn", "q_type": "QuantType.per_1x128"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    base = tmp_path_factory.mktemp("moeobj")
    return {p: install(base / p, SimSpec(profile=p)) for p in ("legacy", "current", "head")}


def _tune(inst, tmp_path, shapes):
    cols = VARIANTS["moe_2stages"].untuned_columns
    unt = write_csv(tmp_path / "untuned.csv", cols, [[s[c.lower()] for c in cols] for s in shapes])
    out = tmp_path / "tuned.csv"
    v = VARIANTS["moe_2stages"]
    r = py(inst, v.tune_script, "-i", unt, "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    return {int(row["token"]): row for row in read_csv(out)[1]}, r.stdout


@pytest.mark.parametrize("profile", ["current", "head"])
def test_the_tuner_charges_a_non_fused_stage1_kernel_the_quant_launch_from_v0_1_12(nodes, tmp_path, profile):
    rows, out = _tune(nodes[profile], tmp_path, [FP4])
    raw = pm.tune_result("moe_2stages", FP4)
    q = flydsl_moe.quant_launch_us(FP4, raw["block_m"])
    row = rows[512]
    assert float(row["us1"]) == pytest.approx(raw["us1"] + q, abs=1e-3)
    assert float(row["us"]) == pytest.approx(raw["us1"] + q + raw["us2"], abs=1e-3)
    assert float(row["us"]) > raw["us"]
    assert f"quant_sort benchmark: blockM={raw['block_m']}, us={q}" in out


def test_legacy_reports_us1_plus_us2_as_run_and_no_quant_type_but_per_1x32_is_charged(nodes, tmp_path):
    rows, _ = _tune(nodes["legacy"], tmp_path, [FP4])
    assert float(rows[512]["us"]) == pm.tune_result("moe_2stages", FP4)["us"]
    rows, _ = _tune(nodes["head"], tmp_path, [FP8])
    assert float(rows[512]["us"]) == pm.tune_result("moe_2stages", FP8)["us"]


def test_the_probe_reads_the_objective_from_each_tuners_source(nodes):
    script = VARIANTS["moe_2stages"].tune_script
    found = {p: probe.op_probe({"tune_script": f"{inst.aiter_root}/{script}", "moe_tuner_src": True,
                                "help_timeout": 60})
             for p, inst in nodes.items()}
    assert {p: a.get("moe_objective") for p, a in found.items()} == {
        "legacy": "stage_sum", "current": "stage_sum+quant", "head": "stage_sum+quant"}
    head_src = open(f"{nodes['head'].aiter_root}/{script}").read()
    cur_src = open(f"{nodes['current'].aiter_root}/{script}").read()
    # both upstream forms: the named helpers of 1c87c39f (head), the inline `us_quant_sort` of v0.1.20
    assert "def add_intermediate_quant_cost" in head_src and "us_quant_sort" not in head_src
    assert "us_quant_sort" in cur_src and "add_intermediate_quant_cost" not in cur_src
    assert probe.moe_objective("import os\n") is None      # not a fused-MoE tuner: nothing said


def test_the_profile_records_the_objective_probed_or_assumed_from_the_version():
    p = profile_from_facts({"version": "0.1.20", "probes": {"moe_objective": "stage_sum"}})
    assert p.moe_objective == "stage_sum" and "MoE tuner objective (tuner source)" in p.probed
    a = profile_from_facts({"version": "0.1.11", "probes": {}})
    assert a.moe_objective == "stage_sum" and any(x.startswith("MoE tuner objective (from version") for x in a.assumed)
    assert profile_from_facts({"version": "0.1.12", "probes": {}}).moe_objective == "stage_sum+quant"
