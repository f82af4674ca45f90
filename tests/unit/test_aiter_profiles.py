"""AITER versions and capabilities (issue 12, review C-20): the newest profile, dev builds, probing,
and the simulated newest release (aiter-after-v0.1.20.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.aiter_profiles import help_flags, is_dev_build, parse_version, profile_for, profile_from_facts
from orchestrator.errors import UsageError
from orchestrator.sim import SimSpec, install
from orchestrator.sim import perf_model as pm

from .test_sim_common import py, read_csv, write_csv

HELPER = Path(__file__).resolve().parents[2] / "orchestrator" / "nodeside" / "node_helper.py"
# gemm_op_a8w8.py:140-189 at e4048607 (aiter-after-v0.1.20.md §2.2): names it can run as FlyDSL
FLYDSL_RE = re.compile(r"flydsl_bpreshuflle_(\d+)x(\d+)x(\d+)_\w+_\w+_\w+_(\d+)x(\d+)(?:x(\d+))?(?:x(\d+))?"
                       r"(?:_([A-Za-z][A-Za-z0-9]*))?$")


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    base = tmp_path_factory.mktemp("profilenodes")
    return {p: install(base / p, SimSpec(profile=p)) for p in ("current", "legacy", "newest")}


def probe(inst, variant_tuned, script, op_test, fmoe=None):
    req = {"aiter_root": inst.aiter_root, "meta_root": inst.meta_root, "python": sys.executable,
           "tuned_csv": f"{inst.aiter_root}/aiter/configs/{variant_tuned}",
           "tune_script": f"{inst.meta_root}/{script}", "op_test": f"{inst.aiter_root}/{op_test}",
           "fmoe_csv": fmoe and f"{inst.aiter_root}/aiter/configs/{fmoe}"}
    proc = subprocess.run([sys.executable, str(HELPER), "probe"], input=json.dumps(req).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **inst.env},
                          timeout=120)
    answer = json.loads(proc.stdout)
    assert answer["ok"], answer
    return answer


# ------------------------------------------------------------------------------------------------
# versions
# ------------------------------------------------------------------------------------------------

def test_newest_profile_from_version():
    p = profile_for((0, 1, 29))
    assert p.name == "newest" and p.has_flag("--shape_grouped") and p.merge_rejects_duplicates
    cur = profile_for((0, 1, 20))
    assert cur.name == "current" and cur.moe_blockscale_bypass == "none"
    assert profile_for(None).name == "newest"  # unknown = the newest known release


@pytest.mark.parametrize("raw", ["0.1.6.dev500+g1a2b3c4", "0.1.dev1+gabcdef0", "0.1.29.dev3+g5e6f7a8.d20261101"])
def test_dev_builds_are_not_refused_for_their_number(raw):
    assert is_dev_build(raw)
    p = profile_from_facts({"version": raw})
    assert p.name == "newest" and p.dev_build
    assert any("dev build" in a and "lower bound" in a for a in p.assumed)
    assert not p.probed
    with pytest.raises(UsageError):  # a real release that old is still refused
        profile_for((0, 1, 6))
    assert not is_dev_build("0.1.29.post1+rocm10.1")


def test_probes_win_over_the_version():
    legacy_help = "usage: x.py [-h] [-i UNTUNE_FILE] [--mp MP] [-k] [--timeout TIMEOUT] [--warmup W]\n"
    facts = {"version": "0.1.6.dev500+g1a2b", "probes": {
        "tuned_header": ["cu_num", "M", "N", "K", "kernelId"], "tuner_help": legacy_help,
        "op_test_markdown": False, "tuning_tests": False}}
    p = profile_from_facts(facts)
    assert p.has_flag("--timeout") and not p.has_flag("--shape_grouped") and not p.has_flag("--run_config")
    assert any(x.startswith("gfx column") for x in p.probed)
    assert any(x.startswith("tuner flags") for x in p.probed)
    assert not any(x.startswith("gfx column") for x in p.assumed)
    assert any(x.startswith("MoE tuple form") for x in p.assumed)
    # a release: the version is the fallback for what was not probed
    p2 = profile_from_facts({"version": "0.1.20", "probes": {"tuned_header": ["gfx", "cu_num", "M"]}})
    assert p2.name == "current" and any("(from version 0.1.20)" in a for a in p2.assumed)


def test_help_flags():
    text = "usage: t.py [-h] [-k] [--shape_grouped]\n  --timeout TIMEOUT  per-task; a-b --x_y\n"
    assert {"-h", "-k", "--shape_grouped", "--timeout", "--x_y"} <= help_flags(text)
    assert "-b" not in help_flags(text)


# ------------------------------------------------------------------------------------------------
# probing the simulated releases through the node helper
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", ["current", "legacy", "newest"])
def test_probe_op_reads_the_node(sims, profile):
    inst = sims[profile]
    a = probe(inst, "a8w8_bpreshuffle_tuned_gemm.csv", "csrc/ck_gemm_a8w8_bpreshuffle/gemm_a8w8_bpreshuffle_tune.py",
              "op_tests/test_gemm_a8w8.py", fmoe="tuned_fmoe.csv")
    assert a["tuner_help"] and a["tuner_help_problem"] is None
    assert ("gfx" in a["tuned_header"]) == (profile != "legacy")
    assert a["tuning_tests"] is (profile == "newest")
    assert a["moe_gelutanh"] is (True if profile == "newest" else None)
    assert "-mnk" in a["op_test_src_flags"] or "--mnk" in a["op_test_src_flags"]
    facts = {"version": inst.version, "probes": {k: v for k, v in a.items() if v is not None}}
    p = profile_from_facts(facts)
    assert p.name == profile
    assert p.has_flag("--shape_grouped") is (profile != "legacy")
    assert p.has_flag("--timeout") and any(x.startswith("gfx column") for x in p.probed)


def test_probe_of_a_missing_script_says_why(sims):
    a = probe(sims["current"], "nope.csv", "csrc/none/none_tune.py", "op_tests/none.py")
    assert a["tuned_header"] is None and a["tuner_help"] is None and a["op_test_src_flags"] is None


# ------------------------------------------------------------------------------------------------
# the simulated newest release
# ------------------------------------------------------------------------------------------------

def _bpreshuffle_tune(inst, tmp_path, *extra):
    shapes = [s for s in pm.shapes_with_outcome("a8w8_bpreshuffle", "improved",
                                                {"n": 1536, "k": 7168, "q_dtype_w": "torch.int8"}, "m", 1, 12)]
    untuned = write_csv(tmp_path / "u.csv", ("M", "N", "K", "q_dtype_w"),
                        [[s["m"], s["n"], s["k"], s["q_dtype_w"]] for s in shapes])
    tuned = tmp_path / ("%s_t%d.csv" % (inst.spec.profile, len(extra)))
    cp = py(inst, "csrc/ck_gemm_a8w8_bpreshuffle/gemm_a8w8_bpreshuffle_tune.py", "-i", untuned,
            "-o", tuned, "--mp", "1", *extra)
    assert cp.returncode == 0, cp.stderr
    return read_csv(tuned)[1]


def test_newest_flydsl_splitk_rows_only_with_k(sims, tmp_path):
    rows_k = _bpreshuffle_tune(sims["newest"], tmp_path, "-k")
    fly = [r for r in rows_k if r["libtype"] == "flydsl"]
    assert fly and all(int(r["splitK"]) > 0 and FLYDSL_RE.match(r["kernelName"]) for r in fly)
    rows = _bpreshuffle_tune(sims["newest"], tmp_path)
    assert not [r for r in rows if r["libtype"] == "flydsl"]
    assert not [r for r in _bpreshuffle_tune(sims["current"], tmp_path, "-k") if r["libtype"] == "flydsl"]


def test_newest_tables_and_tuning_tests(sims):
    inst = sims["newest"]
    fmoe = Path(inst.host_path(inst.aiter_root)) / "aiter" / "configs" / "tuned_fmoe.csv"
    assert "ActivationType.GeluTanh" in fmoe.read_text()
    cp = subprocess.run([sys.executable, "-m", "unittest", "op_tests.tuning_tests.test_csv_validation"],
                        cwd=inst.host_path(inst.aiter_root), env={**os.environ, **inst.env},
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "OK" in cp.stderr, cp.stderr
    # the check is real: a duplicate key fails it
    dup = fmoe.read_text().splitlines()[-1]
    fmoe.write_text(fmoe.read_text() + dup + "\n")
    try:
        cp = subprocess.run([sys.executable, "-m", "unittest", "op_tests.tuning_tests.test_csv_validation"],
                            cwd=inst.host_path(inst.aiter_root), env={**os.environ, **inst.env},
                            capture_output=True, text=True, timeout=60)
        assert cp.returncode != 0 and "duplicate key" in cp.stderr
    finally:
        fmoe.write_text("\n".join(fmoe.read_text().splitlines()[:-1]) + "\n")
    for prof in ("current", "legacy"):
        other = sims[prof]
        assert not (Path(other.host_path(other.aiter_root)) / "op_tests" / "tuning_tests").exists()
        assert "GeluTanh" not in (Path(other.host_path(other.aiter_root)) / "aiter" / "configs"
                                  / "tuned_fmoe.csv").read_text()


@pytest.mark.parametrize("profile", ["current", "legacy", "newest"])
def test_discover_runs_its_riders_as_the_laptop_would_have_asked_them(sims, profile, tmp_path):
    """probe and tuned_keys ride along with discover (one round trip fewer each); the laptop uses an answer
    only when the request resolved on the node is exactly the one it builds from the facts (steps/riders.py)."""
    from types import SimpleNamespace

    from orchestrator.steps import capabilities, shapes
    from orchestrator.variants import get_variant
    inst = sims[profile]
    ctx = SimpleNamespace(job=SimpleNamespace(variant="a8w8_bpreshuffle"),
                          target=SimpleNamespace(container=SimpleNamespace(python=sys.executable)))
    table = tmp_path / "mine.csv"
    table.write_text("cu_num,M,N,K\n")
    for env, tuned in (({}, None), ({"AITER_CONFIG_GEMM_A8W8_BPRESHUFFLE": f"{table}:other.csv"}, str(table))):
        req = {"aiter_path": inst.aiter_root, "gpu_samples": 1,
               "riders": {"probe": capabilities.probe_template(ctx), "tuned_keys": shapes.model_config_keys_template(ctx)}}
        proc = subprocess.run([sys.executable, str(HELPER), "discover"], input=json.dumps(req).encode(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, **inst.env, **env}, timeout=120)
        facts = json.loads(proc.stdout)
        assert facts["ok"], facts
        variant = get_variant("a8w8_bpreshuffle")
        want = capabilities._request(ctx, variant, facts["aiter_root"], facts["meta_root"], facts.get("gfx") or "gfx942",
                                     tuned or f"{facts['aiter_root']}/{variant.tuned_csv}")
        ridden = facts["riders"]
        assert ridden["probe"]["request"] == want
        assert ridden["tuned_keys"]["request"] == shapes._model_config_keys(
            variant, facts["aiter_root"], facts.get("cu_num"), facts.get("gfx"))
        assert ridden["probe"]["answer"]["tuner_help"]
        assert ridden["probe"]["answer"]["tuned_header"] == (["cu_num", "M", "N", "K"] if tuned else
                                                            probe(inst, "a8w8_bpreshuffle_tuned_gemm.csv",
                                                                  variant.tune_script, variant.bench.script)["tuned_header"])


def test_the_tuners_help_is_read_once_while_its_inputs_are_unchanged(sims, tmp_path):
    """A real tuner's --help imports torch + aiter (10-30 s): a pushed helper keeps the text in its own
    directory, keyed by the interpreter, the script and aiter/utility/*.py; a change to any of them runs it again."""
    from tests.unit.test_node_helper import helper_tree
    hdir = tmp_path / "helper-0123456789ab"          # as NodeHelper pushes it: <base>/helper-<version>/
    entry = helper_tree(hdir)
    inst = sims["current"]
    ran = Path(inst.meta_root) / "ran.log"
    script = Path(inst.meta_root) / "csrc/ck_gemm_a8w8_bpreshuffle/gemm_a8w8_bpreshuffle_tune.py"
    original = script.read_text()
    script.write_text(f"open({str(ran)!r}, 'a').write('x')\n" + original)   # counts the --help runs

    def ask():
        req = {"aiter_root": inst.aiter_root, "python": sys.executable, "tune_script": str(script)}
        proc = subprocess.run([sys.executable, str(entry), "probe"], input=json.dumps(req).encode(),
                              stdout=subprocess.PIPE, env={**os.environ, **inst.env}, timeout=120, check=True)
        return json.loads(proc.stdout)

    try:
        first, second = ask(), ask()
        assert first["tuner_help"] == second["tuner_help"] and "usage:" in first["tuner_help"]
        assert "tuner_help_cached" not in first and second["tuner_help_cached"] is True
        assert ran.read_text() == "x"
        base = Path(inst.aiter_root) / "aiter" / "utility" / "base_tuner.py"     # an aiter upgrade or edit
        base.write_text(base.read_text() + "\n# edited\n")
        assert "tuner_help_cached" not in ask() and ran.read_text() == "xx"
        assert ask()["tuner_help_cached"] is True and ran.read_text() == "xx"
    finally:
        script.write_text(original)
    assert "tuner_help_cached" not in ask()                # the script itself changed
    assert not (HELPER.parent / "cache").exists() and not (HELPER.parents[2] / "cache").exists()  # never in a checkout


def test_the_profile_is_computed_once_per_settling_of_the_facts(monkeypatch):
    import orchestrator.context as context
    import orchestrator.session as session
    from orchestrator.aiter_profiles import settle_profile
    from orchestrator.state import JobState
    calls = []
    real = session.profile_from_facts
    monkeypatch.setattr(session, "profile_from_facts", lambda f: calls.append(1) or real(f))
    job = JobState(job_id="j", node="n", container="c", variant="a8w8", created=0, request={},
                   facts={"version": "0.1.20"})
    ctx = context.Ctx(job=job, workspace=None, target=None, settings=None, ui=None)
    assert ctx.profile is ctx.profile and len(calls) == 1
    job.facts["probes"] = {"tuner_help": "usage: t.py [-h] [--timeout T]\n"}
    settled = settle_profile(job.facts)          # the probes changed: settled into the facts once more
    assert job.facts["profile"] == "current" and job.facts["probed"] == ["tuner flags (tune script --help)"]
    assert ctx.profile == settled and not ctx.profile.has_flag("--shape_grouped") and len(calls) == 2
    job.facts = {"version": "0.1.11"}            # discover replaced the facts
    assert ctx.profile.name == "legacy" and len(calls) == 3


@pytest.mark.parametrize("profile", ["current", "legacy", "newest"])
def test_probe_counts_the_moe_tests_quant_types(sims, profile):
    """l_quant 8 (a16wi4) and 9 (MXFP8) only in the newest MoE test: its -q range is read from the node."""
    inst = sims[profile]
    a = probe(inst, "tuned_fmoe.csv", "csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py",
              "op_tests/test_moe_2stage.py")
    assert a["moe_quant_count"] == (10 if profile == "newest" else 8)
    p = profile_from_facts({"version": inst.version, "probes": {k: v for k, v in a.items() if v is not None}})
    assert p.moe_quant_max == (9 if profile == "newest" else 7)
    assert any(x.startswith("MoE quant types") for x in p.probed)
    assert profile_for(parse_version(inst.version)).moe_quant_max == p.moe_quant_max   # the version agrees
