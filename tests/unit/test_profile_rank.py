"""run --profile (issue 38): a budgeted job on the simulated node tunes the shape with the largest share of
GPU time in the profile, not the most-logged one; the plan states the share."""

import json
import time

from orchestrator.outcome import budget
from orchestrator.state import JobState


def _trace(path, calls):
    """A torch.profiler-shaped trace: per call a cpu_op (record_shapes args), its launch and its kernel."""
    ev, ts = [], 1000.0
    for i, (m, n, k, us) in enumerate(calls):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aiter::gemm_a8w8_blockscale", "pid": 1, "tid": 1,
                   "ts": ts, "dur": 50.0, "args": {"External id": i, "Input Dims": [[m, k], [n, k], [m, k // 128],
                                                                                  [n // 128, k // 128], [m, n]],
                                                  "Input type": ["c10::Float8_e4m3fnuz"] * 2 + ["float"] * 2
                                                  + ["c10::BFloat16"]}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 10,
                   "dur": 5.0, "args": {"correlation": 100 + i, "External id": i}})
        ev.append({"ph": "X", "cat": "kernel", "name": "a8w8_blockscale_1x128x128_256x16x64x256", "pid": 0, "tid": 7,
                   "ts": ts + 20, "dur": us, "args": {"correlation": 100 + i, "External id": i}})
        ts += 100.0 + us
    ev.append({"ph": "X", "cat": "kernel", "name": "other", "pid": 0, "tid": 7, "ts": ts, "dur": 1000.0,
               "args": {"correlation": 9999}})
    path.write_text(json.dumps({"schemaVersion": 1, "record_shapes": 1, "traceEvents": ev}))


def test_budgeted_run_on_a_profile_tunes_the_largest_time_share_first(tmp_path, monkeypatch):
    from orchestrator.cli.base import Env
    from orchestrator.campaign.runs import one
    from orchestrator.context import Settings
    from orchestrator.demo import demo_target, prepare_demo
    env = Env(None, str(tmp_path / "ws"), True)
    ws = env.workspace
    demo_dir, log_path = prepare_demo(tmp_path / "node", variant="a8w8_blockscale")
    # a shape the log never names holds most of the GPU time
    trace = tmp_path / "trace.json"
    _trace(trace, [(3, 4096, 512, 5000.0), (1, 1536, 7168, 10.0)])
    job = JobState(job_id="j1", node="demo", container="simulated", variant="a8w8_blockscale", created=time.time(),
                   request={"logs": [log_path], "profiles": ["local:" + str(trace)], "demo_dir": str(demo_dir),
                            "detach": False, "m_preset": "logged", "nk": [], "shapes_csv": None, "gpus": None,
                            "batch": None, "timeout": None, "repeats": 1, "promote": "none", "budget": "60s"})
    try:
        one(ws, job, demo_target(str(demo_dir)), Settings(yes=True, poll_s=0.2), env.ui())
    except SystemExit:
        pass
    done = ws.load(job.job_id)
    info = done.steps["shapes"].info
    assert done.shapes[0] == {"m": 3, "n": 4096, "k": 512}
    assert info["time_share"][0] > 0.8
    assert "of all GPU time" in info["time_line"]
    assert any("largest-time-share" in s for s in info["sources"])
    assert budget.rank([{"m": 1}, {"m": 2}], {budget.exact_key({"m": 1}): 9}, {},
                       {budget.exact_key({"m": 2}): 0.5})[0][0] == {"m": 2}
