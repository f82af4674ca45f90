"""A campaign's --tune-arg is checked at plan time against each target's probed tuner --help (the
``probe@<variant>`` riders of its discover, campaign/capable.py), as a single run's capability probe checks it:
a flag a target's tuner lacks is exit 2 before any target job starts, one line naming the target, the variant
and the flag."""

from __future__ import annotations

import pytest

from orchestrator.campaign import plan
from orchestrator.campaign.targets import TargetRef
from orchestrator.context import Settings
from orchestrator.errors import ExitCode, UsageError

from tests.unit.test_plan_probe import Helper, Runner


class NoHelp(Helper):
    def _probe(self, req):
        out = super()._probe(req)
        if "moe" in req.get("tune_script", ""):     # the MoE tuner's --help fails on this node
            out["tuner_help"], out["tuner_help_problem"] = None, "gemm_moe_tune.py --help exited 1: ImportError: x"
        return out


def _probes(helper=None, variants=("moe_2stages", "a8w8_blockscale")):
    probes = plan.probe(Runner(helper or Helper(None)), [TargetRef("n1", "c1")], Settings(), None, list(variants))
    for p in probes:           # the tuners and op_tests are not on this machine: as if they were on the node
        assert p.error is None, p.error
        p.facts["cannot_tune"] = {}
    return probes


def test_a_flag_the_targets_tuner_lacks_is_refused_naming_the_target_variant_and_flag():
    probes = _probes()
    with pytest.raises(UsageError) as exc:
        plan.refuse_tune_args(probes, ["a8w8_blockscale"], ["--warmup", "5", "--bogus"])
    msg = exc.value.one_line()
    assert msg.startswith("n1/c1: a8w8_blockscale: the tuner on this node (") and "has no flag --bogus" in msg
    assert "\n" not in msg and "--iters" in exc.value.hint and exc.value.exit_code == ExitCode.USAGE


def test_flags_the_tuner_lists_pass_and_no_tune_arg_checks_nothing():
    probes = _probes()
    plan.refuse_tune_args(probes, ["a8w8_blockscale", "moe_2stages"], ["--warmup", "5", "--iters=3"])
    plan.refuse_tune_args(probes, ["a8w8_blockscale"], [])
    with pytest.raises(UsageError, match="tuner flag -o is set by tune-remote"):     # as a single run
        plan.refuse_tune_args(probes, ["a8w8_blockscale"], ["-o", "x.csv"])


def test_a_tuner_whose_help_did_not_answer_is_refused_with_why():
    probes = _probes(NoHelp(None))
    plan.refuse_tune_args(probes, ["a8w8_blockscale"], ["--warmup", "5"])
    with pytest.raises(UsageError) as exc:
        plan.refuse_tune_args(probes, ["moe_2stages"], ["--warmup", "5"])
    assert exc.value.message.startswith("n1/c1: moe_2stages: cannot check tuner flags --warmup")
    assert "ImportError: x" in exc.value.message


def test_a_target_that_cannot_tune_the_variant_or_sent_no_probe_is_not_checked():
    (p,) = _probes(variants=("a4w4_blockscale", "a8w8_blockscale"))
    assert p.facts["gfx"] == "gfx942"               # a4w4 needs gfx950: excluded there, not refused for a flag
    plan.refuse_tune_args([p], ["a4w4_blockscale"], ["--bogus"])
    p.facts["cannot_tune"] = {"a8w8_blockscale": "its tuner"}        # its AITER lacks the tuner: excluded
    plan.refuse_tune_args([p], ["a8w8_blockscale"], ["--bogus"])
    p.facts["cannot_tune"] = {}
    p.facts["variant_probes"].pop("a8w8_blockscale")     # an older helper: its job checks
    plan.refuse_tune_args([p], ["a8w8_blockscale"], ["--bogus"])
