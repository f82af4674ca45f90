"""A campaign's plan probes what a single run probes (issue 36): one ``probe@<variant>`` rider per variant it
considers, answered in its one discover round trip (nodeside/probe.py run_riders), so the profile the plan mines
with (the MoE token tiers) is the node's, not the version's."""

from __future__ import annotations

from types import SimpleNamespace

from orchestrator.campaign import capable, plan
from orchestrator.campaign.targets import TargetRef
from orchestrator.context import Settings
from orchestrator.nodeside import probe as nodeprobe
from orchestrator.records import JobRequest
from orchestrator.steps.capabilities import probe_template

# an AITER whose version (0.1.11: get_padded_M buckets 1024/2048/16384) is not what its fused_moe.py does
# (v0.1.12's, ROCm/aiter 0d38e26f: nextPow2 below 32768)
VERSION, NODE_TIERS = "0.1.11", [32768]
TUPLE = ("(256, {t}, 7168, 256, 257, 8, 'ActivationType.Silu', 'torch.bfloat16', 'torch.float8_e4m3fn', "
         "'torch.float8_e4m3fn', 'QuantType.per_1x128', True, False)")
LOG = "".join(f"[aiter] [fused_moe] using 2stage default for {TUPLE.format(t=t)} \n" for t in (1500, 4096, 20000))


class Helper:
    """The node's discover as nodeside/discovery.py runs its riders (the real run_riders); the probe op answers
    what the node's files say (``tiers``), recording each request it was given."""

    def __init__(self, tiers):
        self.tiers, self.calls, self.probed = tiers, [], []

    def _probe(self, req):
        self.probed.append(req)
        out = {"tuned_header": None, "tuner_help": "usage: tune.py [--warmup] [--iters]", "tune_script_exists": True}
        if req.get("moe_runtime") and self.tiers:
            out["moe_padded_tiers"] = list(self.tiers)
        return out

    def call(self, op, req, timeout=300):
        self.calls.append((op, timeout))
        assert op == "discover", op
        facts = {"aiter_root": "/opt/aiter", "meta_root": "/opt/aiter", "version": VERSION, "gfx": "gfx942",
                 "cu_num": 304, "free_gpus": [0, 1]}
        ops = {"probe": self._probe, "paths_exist": nodeprobe.op_paths_exist}
        facts["riders"] = nodeprobe.run_riders(req.get("riders") or {}, facts, {}, ops)
        return facts


class Runner:
    def __init__(self, helper):
        self.helper = helper

    def open(self, ref):
        return SimpleNamespace(connect=lambda: None, close=lambda: None, helper=self.helper, host_helper=self.helper,
                               container=SimpleNamespace(python="python3", name=ref.container, env={},
                                                         aiter_path=None),
                               node=SimpleNamespace(name=ref.node))

    def granted_gpus(self, ref):
        return None


def _plan(tmp_path, tiers, variants=("moe_2stages", "a8w8_blockscale")):
    log = tmp_path / "server.log"
    log.write_text(LOG)
    helper = Helper(tiers)
    runner, ref = Runner(helper), TargetRef("n1", "c1")
    (p,) = plan.probe(runner, [ref], Settings(), None, list(variants))
    assert p.error is None, p.error
    found = plan.mine(runner, p, JobRequest(logs=[f"local:{log}"]).to_dict(), ["moe_2stages"], Settings())
    return helper, p, found


def test_the_plan_mines_with_the_tiers_the_node_shows_not_its_versions(tmp_path):
    helper, p, found = _plan(tmp_path, NODE_TIERS)
    assert [c[0] for c in helper.calls] == ["discover"]            # one round trip: every probe rode along
    assert sorted(r["tune_script"].rsplit("/", 1)[1] for r in helper.probed) == \
        ["gemm_a8w8_blockscale_tune.py", "gemm_moe_tune.py"]
    assert p.facts["variant_probes"]["moe_2stages"]["moe_padded_tiers"] == NODE_TIERS
    # the node pads like v0.1.12: 1500 -> 2048, 4096 stays, 20000 -> 32768 (its version would say 1024/2048/16384)
    assert sorted(s["token"] for s in found["moe_2stages"]) == [2048, 4096, 32768]
    facts = plan.variant_facts(p.facts, "moe_2stages")
    assert "MoE token lookup (fused_moe.py get_padded_M)" in facts["probed"]
    line = plan.profile_line(p.facts, "moe_2stages")
    assert line.startswith("MoE token tiers 32768; probed on the node: ") and "tuner flags" in line
    assert "MoE token lookup" not in line.split("assumed from")[1]
    assert capable.probe_timeout(["moe_2stages", "a8w8_blockscale"]) > capable.probe_timeout(["moe_2stages"])


def test_a_node_that_answers_no_tiers_leaves_the_versions(tmp_path):
    _, p, found = _plan(tmp_path, None, variants=("moe_2stages",))
    assert sorted(s["token"] for s in found["moe_2stages"]) == [1024, 2048, 16384]
    line = plan.profile_line(p.facts, "moe_2stages")
    assert line.startswith("MoE token tiers 1024/2048/16384; ") and "MoE token lookup" in line.split("assumed")[1]


def test_the_plans_probe_is_the_single_runs(tmp_path):
    ctx = SimpleNamespace(job=SimpleNamespace(variant="moe_2stages"),
                          target=SimpleNamespace(container=SimpleNamespace(python="/usr/bin/python3")))
    riders = capable.probe_riders(["moe_2stages", "a8w8"], "/usr/bin/python3")
    assert riders["probe@moe_2stages"] == probe_template(ctx) and set(riders) == {"probe@moe_2stages", "probe@a8w8"}
    # --variant auto: what local logs show, else (a log read on the node only after discover) every variant
    log = tmp_path / "server.log"
    log.write_text(LOG)
    assert plan.considered(["auto"], [f"local:{log}"]) == ["moe_2stages"]
    assert plan.considered(["a8w8"], None) == ["a8w8"]
    assert len(plan.considered(["auto"], ["container:/x.log"])) == len(plan.VARIANTS)
