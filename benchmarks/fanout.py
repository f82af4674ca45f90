"""Campaign fan-out efficiency: tuning wall time of one shape set on 1, 2 and 4 simulated targets.

    efficiency(k) = T1 / (k x Tk)        (issue 10's target: >= 0.9 at k = 4)

Each target is a test-bed node (real sshd + docker exec) whose simulated tuner spends
--seconds-per-shape on each shape (real tuning spends minutes); every run is a whole `tune-remote run`
(discover, mine, baseline, tune, after, compare, report, fetch). Also prints the poll cost per node with
k targets (helper round trips per second of polling).

Run: python benchmarks/fanout.py [--shapes 16] [--seconds-per-shape 5]   (root: the test bed's dockerd + sshd)
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=int, default=16, help="shapes in the set (M values x 1 (N,K))")
    ap.add_argument("--seconds-per-shape", type=float, default=5.0)
    ap.add_argument("--ks", default="1,2,4")
    args = ap.parse_args()
    from orchestrator.cli import main as cli
    from tests.fake_remote.testbed import TestBed

    ks = [int(k) for k in args.ks.split(",")]
    ms = ",".join(str(m) for m in range(1, args.shapes + 1))
    os.environ["TUNE_REMOTE_POLL_S"] = "0.5"
    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    times: dict[int, float] = {}
    phases: dict[int, dict] = {}
    try:
        nodes = [bed.create_node(("current",), proxy=False) for _ in range(max(ks))]
        for n in nodes:
            next(iter(n.containers.values())).slow(args.seconds_per_shape)
        with tempfile.TemporaryDirectory() as d:
            inv = Path(d) / "inventory.yaml"
            inv.write_text(yaml.safe_dump({"nodes": {
                n.alias: {"ssh_config": str(n.ssh_config_file), "containers": {c: {} for c in n.containers}}
                for n in nodes}}))
            for k in ks:
                argv = ["--inventory", str(inv), "--workspace", f"{d}/ws{k}", "run"]
                for n in nodes[:k]:
                    argv += ["--node", n.alias]
                argv += ["--variant", "a8w8_blockscale", "--nk", "7168,2048", "--m-preset", ms, "--yes",
                         "--job-id", f"fan{k}"]
                t0 = time.monotonic()
                with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                    rc = cli(argv)
                times[k] = time.monotonic() - t0
                if rc != 0:
                    print(f"k={k}: run failed with exit {rc}", file=sys.stderr)
                    return 1
                phases[k] = _phases(Path(d) / f"ws{k}" / f"fan{k}" / "targets")
    finally:
        bed.close()
    t1 = times[ks[0]] * ks[0]
    u1 = phases[ks[0]]["tuning_s"] * ks[0]
    print(f"fan-out: {args.shapes} a8w8_blockscale shapes, {args.seconds_per_shape:g} s per shape in the "
          f"simulated tuner, {os.cpu_count()} cores")
    print("  whole run = discover .. fetch on the laptop; tuning = first tuner start to last tuner end over the"
          " targets (node clock);\n  polls/s and round trips/s per node while the node pipeline ran (one helper"
          " channel per node, long polls)")
    print(f"{'targets':>8} {'wall s':>8} {'eff. run':>9} {'tuning s':>9} {'eff. tuning':>12} "
          f"{'polls/s per node':>17} {'round trips/s per node':>23}")
    for k in ks:
        p = phases[k]
        print(f"{k:>8} {times[k]:>8.1f} {t1 / (k * times[k]):>9.2f} {p['tuning_s']:>9.1f} "
              f"{u1 / (k * p['tuning_s']):>12.2f} {p['polls_per_s']:>17.2f} {p['rt_per_s']:>23.2f}")
    return 0


def _phases(targets_dir: Path) -> dict:
    """Tuning span over the campaign's target jobs and their polling cost, from their state.json."""
    import json
    starts, ends, polls, rts = [], [], [], []
    paths = sorted(targets_dir.glob("*/state.json")) or [targets_dir.parent / "state.json"]   # k=1: one job
    for st_path in paths:
        st = json.loads(st_path.read_text())
        info = st["steps"]["remote"]["info"]
        sub = info.get("sub") or {}
        starts.append(sub["tune"]["started"])
        ends.append(sub["after"]["started"])
        secs = info.get("poll_seconds") or 0
        stats = (st["remote"].get("stats") or [{}])[-1]
        if secs:
            polls.append((stats.get("helper_ops") or {}).get("status", 0) / secs)
            rts.append(stats.get("round_trips", 0) / max(1e-9, time_of_run(st)))
    return {"tuning_s": max(ends) - min(starts), "polls_per_s": sum(polls) / max(1, len(polls)),
            "rt_per_s": sum(rts) / max(1, len(rts))}


def time_of_run(st: dict) -> float:
    """Seconds from the job's creation to its last step (the laptop's clock)."""
    steps = [s.get("finished") or 0 for s in st["steps"].values()]
    return max(steps + [st["created"]]) - st["created"]


if __name__ == "__main__":
    sys.exit(main())
