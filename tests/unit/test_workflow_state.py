import json

from orchestrator.state import JobState, Workspace
from orchestrator.variants import VARIANTS, get_variant, profile_for
from orchestrator.workflow import STEPS, next_step


def job():
    return JobState(job_id="j1", node="n", container="c", variant="a8w8", created=0.0, request={})


def test_next_step_walks_the_steps_in_order():
    j = job()
    seen = []
    while (s := next_step(j)) is not None:
        seen.append(s)
        j.step_state(s).status = "done"
    assert tuple(seen) == STEPS


def test_failed_or_cancelled_job_has_no_next_step():
    j = job()
    j.step_state("discover").status = "failed"
    assert next_step(j) is None
    j = job()
    j.state = "cancelled"
    assert next_step(j) is None


def test_state_round_trip_is_atomic_json(tmp_path):
    ws = Workspace(tmp_path)
    j = job()
    j.step_state("remote").info["offsets"] = {"/x": 3}
    ws.save(j)
    assert not [p for p in (tmp_path / "j1").iterdir() if p.name.startswith(".state")]
    back = ws.load("j1")
    assert back.step_state("remote").info["offsets"] == {"/x": 3}
    assert json.loads((tmp_path / "j1" / "state.json").read_text())["job_id"] == "j1"


def test_profiles_follow_the_reference_thresholds():
    assert profile_for((0, 1, 20)).name == "current" and profile_for((0, 1, 20)).has_flag("--timeout")
    legacy = profile_for((0, 1, 11))
    assert legacy.name == "legacy" and not legacy.merge_rejects_duplicates and legacy.moe_blockscale_bypass == "small"
    assert profile_for((0, 1, 10)).moe_blockscale_bypass == "all"
    assert not profile_for((0, 1, 9)).has_flag("--timeout")
    assert profile_for((0, 1, 13)).has_flag("--run_config")


def test_blockscale_bpreshuffle_script_by_version():
    v = get_variant("a8w8_blockscale_bpreshuffle")
    assert v.resolve(profile_for((0, 1, 20))).tune_script.endswith("gemm_a8w8_blockscale_tune.py")
    assert v.resolve(profile_for((0, 1, 20))).tune_flags == ("--preshuffle",)
    assert v.resolve(profile_for((0, 1, 11))).tune_script.endswith("gemm_a8w8_blockscale_bpreshuffle_tune.py")


def test_every_variant_has_key_columns_and_a_config_env():
    from orchestrator.shapelib.variant_facts import FILE_STEMS, MOE_VARIANT
    from orchestrator.sim.variant_table import VARIANTS as GENERATED
    # the registry is exactly what the committed generated facts were written from (no count to keep by hand)
    assert list(VARIANTS) == list(GENERATED) and len(VARIANTS) > 1
    named = {v for _, v in FILE_STEMS} | {MOE_VARIANT}
    # a tuner writing another variant's table (a4w4 bpreshuffle -> the CK a4w4 one) is named through that one
    shared = {n for n, v in VARIANTS.items() if n not in named and
              any(o.tuned_csv == v.tuned_csv for m, o in VARIANTS.items() if m in named)}
    assert shared == {"a4w4_blockscale_bpreshuffle"}
    assert set(VARIANTS) <= named | shared
    for v in VARIANTS.values():
        assert v.key_columns and v.config_env.startswith("AITER_CONFIG_")


def test_two_runs_started_in_the_same_second_get_different_job_ids(tmp_path):
    """Generated ids have a one-second clock; an audit saw the second `run --slurm` of a script exit 2
    'already exists'. Each claim creates its directory, so concurrent claims cannot both win."""
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.state import Workspace
    ws = Workspace(tmp_path / "ws")
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda _: ws.claim("20261126-101500-n1-a8w8"), range(8)))
    assert len(set(ids)) == 8 and "20261126-101500-n1-a8w8" in ids and "20261126-101500-n1-a8w8-8" in ids
    assert all((tmp_path / "ws" / i).is_dir() for i in ids) and ws.jobs() == []


def test_status_members_are_their_json_words():
    from orchestrator.state import TERMINAL, Status
    assert Status.DONE == "done" and str(Status.SUCCEEDED) == "succeeded" and f"{Status.LOST}" == "lost"
    assert {"succeeded", "failed"} == {Status.SUCCEEDED, Status.FAILED} and "lost" in TERMINAL
    assert json.dumps({"state": Status.CANCELLED}) == '{"state": "cancelled"}'
    assert Status.read("done") is Status.DONE and Status.read("paused-by-a-newer-writer") == "paused-by-a-newer-writer"


def test_a_loaded_job_holds_members(tmp_path):
    ws = Workspace(tmp_path)
    j = job()
    j.step_state("discover").status = "done"      # a plain word, as old code and old files have it
    ws.save(j)
    back = ws.load("j1")
    from orchestrator.state import Status
    assert back.state is Status.RUNNING and back.step_state("discover").status is Status.DONE
    assert json.loads((tmp_path / "j1" / "state.json").read_text())["steps"]["discover"]["status"] == "done"
