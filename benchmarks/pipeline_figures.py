"""Figures for the run/resume/fetch issue, measured on this machine:

  * wall time of `tune-remote demo` (local simulated node, no ssh/docker),
  * SSH round trips a `run` makes outside polling, and how many polls it made,
  * the cost of one poll (one helper `status` round trip through ssh + docker exec).

Run: python benchmarks/pipeline_figures.py   (needs root for the test bed: dockerd + sshd)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TUNE_REMOTE = [sys.executable, "-m", "orchestrator"]


def demo_wall_time(runs: int = 3) -> list[float]:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.monotonic()
            subprocess.run([*TUNE_REMOTE, "-q", "demo"], cwd=d, check=True,
                           env={**os.environ, "TUNE_REMOTE_POLL_S": "2"})
            times.append(time.monotonic() - t0)
    return times


def remote_figures() -> dict:
    from orchestrator.context import Ctx, Settings, Target
    from orchestrator.inventory import load_inventory
    from orchestrator.state import JobState, Workspace
    from orchestrator.ui import Ui
    from tests.fake_remote.testbed import TestBed

    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    try:
        node = bed.create_node(("current",), proxy=False)
        ctr = next(iter(node.containers.values()))
        with tempfile.TemporaryDirectory() as d:
            inv = Path(d) / "inv.yaml"
            inv.write_text(f"nodes:\n  {node.alias}:\n    ssh_config: {node.ssh_config_file}\n"
                           f"    containers:\n      {ctr.name}: {{}}\n")
            ws = Path(d) / "ws"
            cmd = [*TUNE_REMOTE, "--inventory", str(inv), "--workspace", str(ws), "-q", "run", "--node", node.alias,
                   "--container", ctr.name, "--variant", "a8w8_blockscale", "--log",
                   "/opt/aiter-sim/logs/vllm_tp8_dsv3.log", "--m-preset", "1,64,1024", "--yes", "--job-id", "bench"]
            t0 = time.monotonic()
            subprocess.run(cmd, check=True, env={**os.environ, "TUNE_REMOTE_POLL_S": "0.5"})
            run_s = time.monotonic() - t0
            state = json.loads((ws / "bench" / "state.json").read_text())
            stats = state["remote"]["stats"][-1]
            # standalone polls: the first one rides in the launch's round trip (helper_ops_batched)
            polls = stats["helper_ops"].get("status", 0) - (stats.get("helper_ops_batched") or {}).get("status", 0)
            # one poll = one helper `status` op through ssh + docker exec on the finished job
            inventory = load_inventory(str(inv))
            spec = inventory.node(node.alias)
            target = Target(spec, spec.container(ctr.name))
            job = JobState.from_dict(dict(state))
            ctx = Ctx(job=job, workspace=Workspace(ws), target=target, settings=Settings(), ui=Ui(quiet=True))
            from orchestrator.steps.remote import poll_once
            poll_once(ctx)  # connect + warm
            costs = []
            for _ in range(20):
                t = time.monotonic()
                poll_once(ctx)
                costs.append(time.monotonic() - t)
            target.close()
        return {"run_wall_s": round(run_s, 2), "round_trips_total": stats["round_trips"],
                "polls": polls, "round_trips_outside_polling": stats["round_trips"] - polls,
                "helper_ops": stats["helper_ops"],
                "poll_ms_median": round(statistics.median(costs) * 1000, 1),
                "poll_ms_p90": round(sorted(costs)[int(len(costs) * 0.9) - 1] * 1000, 1)}
    finally:
        bed.close()


if __name__ == "__main__":
    demo = demo_wall_time()
    print(f"demo wall time: {', '.join(f'{t:.2f}s' for t in demo)} (median {statistics.median(demo):.2f}s)")
    if os.geteuid() == 0:
        fig = remote_figures()
        print(json.dumps(fig, indent=2))
    else:
        print("remote figures need root (the test bed starts dockerd and sshd)")
