"""Shapes ranked by how often the log missed them, the plan's time estimate and --budget (review P-07)."""

import types

import pytest

from orchestrator.context import Ctx, Settings
from orchestrator.errors import UsageError
from orchestrator.state import JobState, StepState, Workspace
from orchestrator.outcome import budget
from orchestrator.steps.shape_sources import collect
from orchestrator.steps.shapes import plan_time
from orchestrator.ui import Ui

MISS = ("(Worker_TP0 pid=11) [aiter] shape is M:{m}, N:{n}, K:{k}, not found tuned config in "
        "/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")


@pytest.mark.parametrize("text,secs", [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("3600", 3600),
                                       ("1d", 86400), ("1.5h", 5400)])
def test_durations(text, secs):
    assert budget.parse_duration(text) == secs


@pytest.mark.parametrize("text", ["2 hours", "h", "0", "0m", "-1h", "2h junk", ""])
def test_a_bad_duration_is_a_usage_error_with_a_hint(text):
    with pytest.raises(UsageError) as e:
        budget.parse_duration(text)
    assert e.value.hint


def _ctx(tmp_path, log_lines, request=None, gpus=4):
    log = tmp_path / "server.log"
    log.write_text("".join(log_lines))
    job = JobState(job_id="j", node="n", container="c", variant="a8w8_blockscale", created=0,
                   request={"logs": [f"local:{log}"], "m_preset": "logged", **(request or {})},
                   facts={"version": "0.1.20", "gfx": "gfx950", "tune_gpus": list(range(gpus))},
                   remote={"aiter_root": "/aiter"})
    target = types.SimpleNamespace(container=types.SimpleNamespace(env={}))
    return Ctx(job=job, workspace=Workspace(tmp_path / "ws"), target=target, settings=Settings(), ui=Ui(quiet=True))


def test_the_most_missed_shapes_come_first_and_the_plan_says_how_often_and_how_long(tmp_path):
    # A missed 5 times, C 3 times, B once; B and C share (N,K) = (7168,256)
    lines = ([MISS.format(m=8, n=7168, k=256)] + [MISS.format(m=64, n=512, k=7168)] * 5
             + [MISS.format(m=16, n=7168, k=256)] * 3)
    ctx = _ctx(tmp_path, lines)
    shapes, described = collect(ctx)
    assert [(s["m"], s["n"], s["k"]) for s in shapes] == [(64, 512, 7168), (16, 7168, 256), (8, 7168, 256)]
    assert ctx.job.step_state("shapes").info["misses"] == [5, 3, 1]
    missed = dict(zip(map(budget.exact_key, shapes), [5, 3, 1]))
    kept = plan_time(ctx, shapes[1:], described, missed)     # one dropped before (model_configs has it)
    assert kept == shapes[1:] and ctx.job.step_state("shapes").info["misses"] == [3, 1]
    # nothing measured in this workspace: 90 s per shape and GPU, 3 small shapes on 4 GPUs = 67.5 s
    assert any(d.startswith("estimated tuning time: 45s for 2 shape(s) on 4 GPU(s) (assumed 90 s")
               for d in described), described


def test_a_swept_m_of_a_much_missed_nk_comes_before_a_rarely_missed_nk(tmp_path):
    lines = [MISS.format(m=64, n=512, k=7168)] * 4 + [MISS.format(m=8, n=7168, k=256)] * 2
    ctx = _ctx(tmp_path, lines, {"m_preset": "1,64"})
    shapes, _ = collect(ctx)
    assert [(s["m"], s["n"]) for s in shapes] == [(64, 512), (8, 7168), (1, 512), (1, 7168), (64, 7168)]
    assert ctx.job.step_state("shapes").info["misses"] == [4, 2, 0, 0, 0]


def test_a_budget_keeps_the_most_missed_that_fit_and_says_what_is_left(tmp_path):
    lines = ([MISS.format(m=8, n=7168, k=256)] + [MISS.format(m=64, n=512, k=7168)] * 5
             + [MISS.format(m=16, n=7168, k=256)] * 3)
    ctx = _ctx(tmp_path, lines, {"budget": "50s"}, gpus=4)     # 22.5 s per shape: two fit
    shapes, described = collect(ctx)
    missed = dict(zip(map(budget.exact_key, shapes), ctx.job.step_state("shapes").info["misses"]))
    kept = plan_time(ctx, shapes, described, missed)
    assert [s["m"] for s in kept] == [64, 16]
    assert ctx.job.step_state("shapes").info["misses"] == [5, 3]
    assert any("--budget 50s: the 2 most-missed shape(s) fit, 1 left for another job" in n for n in ctx.job.notes)


def test_the_rate_is_measured_from_earlier_jobs_of_the_variant(tmp_path):
    ws = Workspace(tmp_path / "ws")
    done = JobState(job_id="old", node="n", container="c", variant="a8w8_blockscale", created=0, request={},
                    state="succeeded", facts={"gfx": "gfx950", "tune_gpus": [0, 1]},
                    shapes=[{"m": 1, "n": 512, "k": 7168}] * 4)
    done.steps["remote"] = StepState(status="done", info={"sub": {"tune": {"started": 1000.0},
                                                                  "after": {"started": 1100.0}}})
    ws.save(done)
    rate, source = budget.seconds_per_shape(ws, "a8w8_blockscale", "gemm", "gfx950")
    assert rate == pytest.approx(100 * 2 / sum(budget.shape_cost(s) for s in done.shapes))
    assert source.startswith("measured")
    assert budget.seconds_per_shape(ws, "a8w8_blockscale", "gemm", "gfx942")[1].startswith("assumed")
    # a demo's simulated node (gfx950 too) says nothing of a real GPU: never measured from (a user's finding)
    for i in range(3):
        demo = JobState(job_id=f"demo{i}", node="demo", container="simulated", variant="a8w8_blockscale",
                        created=0, request={"demo_dir": "/x"}, state="succeeded",
                        facts={"gfx": "gfx950", "tune_gpus": [0, 1]}, shapes=[{"m": 1, "n": 512, "k": 7168}] * 4)
        demo.steps["remote"] = StepState(status="done", info={"sub": {"tune": {"started": 1000.0},
                                                                      "after": {"started": 1001.0}}})
        ws.save(demo)
    assert budget.seconds_per_shape(ws, "a8w8_blockscale", "gemm", "gfx950")[0] == pytest.approx(rate)


def test_with_a_profile_a_budget_keeps_the_most_gpu_time_per_tuning_second():
    """Issue 38: one large prefill shape holds the largest share but costs the budget of many decode shapes
    that together hold more; the budget takes those (and a shape that does not fit is skipped, not a stop)."""
    big = {"m": 8192, "n": 36864, "k": 7168}                  # cost ~127 shapes of the small kind
    small = [{"m": m, "n": 7168, "k": 2048} for m in (1, 2, 4, 8, 16)]
    share = {budget.exact_key(big): 0.30, **{budget.exact_key(s): 0.10 for s in small}}
    shapes = [big, *small]
    kept, left = budget.within_by_share(shapes, budget_s=6 * 90.0, gpus=1, per_shape_s=90.0, share=share)
    assert kept == small and left == [big]
    assert sum(share[budget.exact_key(s)] for s in kept) > share[budget.exact_key(big)]
    # the literal order (largest share first, then within) would have spent the whole budget on the big one
    assert budget.within(shapes, 6 * 90.0 * 200, 1, 90.0)[0][0] == big
    kept, _ = budget.within_by_share(shapes, budget_s=1.0, gpus=1, per_shape_s=90.0, share=share)
    assert kept == [small[0]]                                  # at least one shape, the densest
