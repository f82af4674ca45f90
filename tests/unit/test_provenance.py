"""Export provenance (issue 30, aiter#5155/#5500): commit, command, device id and ROCm version."""

from orchestrator.state import JobState
from orchestrator.steps.provenance import aiter_commit, provenance, tuner_command


def job(facts, remote=None):
    return JobState(job_id="j1", node="n1", container="c1", variant="a8w8", created=0, request={},
                    facts=facts, remote=remote or {})


def test_commit_from_git_describe_or_local_version_only():
    assert aiter_commit({"git_describe": "v0.1.11-5-g1a2b3c4d"}) == "1a2b3c4d"
    assert aiter_commit({"version_raw": "0.1.6.dev500+g0123abc"}) == "0123abc"
    assert aiter_commit({"version_raw": "0.1.29.post1+rocm10.1"}) is None


def test_commit_of_a_checkout_on_a_tag_from_rev_parse():
    """issue 36 defect 3: HEAD on tag v0.1.20 describes as just `v0.1.20`; discover's `git rev-parse HEAD` names it."""
    sha = "77ba72b0c1d2e3f405162738495a6b7c8d9e0f1a"
    assert aiter_commit({"git_describe": "v0.1.20", "git_commit": sha}) == sha
    text = provenance(job({"version_raw": "v0.1.20", "git_describe": "v0.1.20", "git_commit": sha, "gfx": "gfx950"}))
    assert f"commit {sha}" in text and "commit unknown" not in text


def test_section_names_command_hardware_and_guards():
    j = job({"version_raw": "0.1.29", "gpu_name": "AMD Instinct MI355X", "gpu_device_id": "0x75a3", "gfx": "gfx950",
             "cu_num": 256, "rocm_version": "7.0.2", "probes": {"tuning_tests": True}},
            {"tune_argv": ["python3", "csrc/x_tune.py", "-i", "a b.csv"], "tune_env": {"HIP_VISIBLE_DEVICES": "0,1"}})
    assert tuner_command(j) == "env HIP_VISIBLE_DEVICES=0,1 python3 csrc/x_tune.py -i 'a b.csv'"
    text = provenance(j)
    for needle in ("env HIP_VISIBLE_DEVICES=0,1 python3 csrc/x_tune.py", "ROCm: 7.0.2", "MI355X, PCI device id 0x75a3",
                   "commit unknown", "test_config_shape_collision.py"):
        assert needle in text, needle
    bare = provenance(job({"gfx": "gfx942"}))
    assert "not recorded" in bare and "ROCm: unknown" in bare and "not in the node's AITER" in bare



def test_guards_run_at_export_replace_the_present_not_run_line():
    from orchestrator.state import JobState
    from orchestrator.steps.provenance import provenance
    job = JobState(job_id="j", node="n1", container="c1", variant="a8w8", created=0, request={},
                   facts={"gfx": "gfx950", "cu_num": 256, "probes": {"tuning_tests": True}})
    ran = {"test_csv_validation": {"status": "passed", "exit": 0, "tail": "OK"},
           "test_config_shape_collision": {"status": "failed", "exit": 1,
                                           "tail": "AssertionError: x: duplicate shapes in a and b\nFAILED (failures=1)"}}
    text = provenance(job, ran, "m_a8w8_tuned_gemm.csv")
    assert "run by tune-remote on n1/c1" in text and "model_configs/m_a8w8_tuned_gemm.csv" in text
    assert "`test_csv_validation` passed" in text
    assert "`test_config_shape_collision` **FAILED** (AssertionError: x: duplicate shapes in a and b)" in text
    assert "not run by tune-remote" not in text
    assert "could not be run on n1/c1 (ssh: refused)" in provenance(job, {"error": "ssh: refused"}, "f.csv")
    assert "not run by tune-remote" in provenance(job)
