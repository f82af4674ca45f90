"""Submit and leave on Slurm (issue 28): `run --slurm --slurm-nodes 2 --detach` while other jobs hold both
nodes (the holders stay PENDING), the queue released, the nodes' own drivers launching, then `resume`.

Measured per repeat, on the test bed's real Slurm cluster (two compute nodes, one login node over SSH):
  detach_s        wall time of `run --detach` (a subprocess: the laptop process is gone after it)
  grant_launch_s  from the grant (the holder writes `node`) to the node driver having launched its shard
                  (`drive.rc`), per shard, the slower of the two
  resume_s        wall time of `resume` once the nodes' tuners are done (in this process)
  resume_rts      SSH commands + helper-channel requests `resume` made (campaign_connections.py's count)

Run (root: the test bed starts dockerd, sshd, munge, slurmctld, slurmd):
    python benchmarks/slurm_pending.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _until(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def one(cluster, inv: Path, ws: Path, job: str, n_k: str, cli, counts) -> dict:
    c = cluster
    blockers = [c.cmd("sbatch", "--parsable", "-J", f"other-{n}", "-N1", "--exclusive", "-w", n, "-o", "/dev/null",
                      "--chdir", "/tmp", "--wrap", "sleep 600").stdout.strip() for n in c.computes]
    try:
        _until(lambda: {j["id"] for j in c.jobs() if j["state"] == "RUNNING"} >= set(blockers), 60, "blockers")
        t = time.monotonic()
        cp = subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inv), "--workspace", str(ws),
                             "run", "--slurm", "testslurm", "--slurm-nodes", "2", "--variant", "a8w8_blockscale",
                             "--nk", n_k, "--m-preset", "1,16,64,256", "--yes", "--job-id", job, "--detach"],
                            capture_output=True, text=True, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
        detach_s = time.monotonic() - t
        if cp.returncode != 0:
            raise SystemExit(cp.stderr[-3000:])
    finally:
        c.cmd("scancel", *blockers, check=False)
    d = Path(json.loads((ws / job / "state.json").read_text())["request"]["campaign"]["slurm"]["dir"])
    _until(lambda: all((d / i / "drive.rc").is_file() for i in ("0", "1")), 300, "the node drivers")
    rcs = [(d / i / "drive.rc").read_text().strip() for i in ("0", "1")]
    if rcs != ["0", "0"]:
        raise SystemExit(f"node drivers: {rcs}: " + (d / "0" / "drive.log").read_text()[-2000:])
    grant = max((d / i / "drive.rc").stat().st_mtime - (d / i / "node").stat().st_mtime for i in ("0", "1"))
    script = "gemm_a8w8_blockscale_tune.py"
    _until(lambda: not any(script in p["args"] for n in c.computes for p in c.container(n).processes()
                           if p["state"] != "Z"), 600, "the tuners")
    for k in counts:
        counts[k] = 0
    t = time.monotonic()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()) as err:
        rc = cli(["--inventory", str(inv), "--workspace", str(ws), "resume", job])
    resume_s = time.monotonic() - t
    if rc != 0:
        raise SystemExit(err.getvalue()[-3000:])
    return {"detach_s": detach_s, "grant_launch_s": grant, "resume_s": resume_s,
            "resume_rts": counts["exec"] + counts["helper_requests"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (the test bed starts dockerd, sshd and Slurm's daemons)")
        return 1
    from slurm_overhead import COUNTS, _count
    _count()
    from orchestrator.cli import main as cli
    from tests.fake_remote.slurm import SlurmCluster, sweep_stale_clusters
    from tests.fake_remote.testbed import TestBed

    os.environ["TUNE_REMOTE_POLL_S"] = "0.5"
    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    sweep_stale_clusters()
    cluster = SlurmCluster(bed, computes=("a", "b"))
    runs = []
    try:
        cluster.start()
        with tempfile.TemporaryDirectory() as d:
            inv = Path(d) / "inventory.yaml"
            inv.write_text(yaml.safe_dump(cluster.inventory("testslurm", gpus_per_node=2)))
            for i in range(args.repeats):
                runs.append(one(cluster, inv, Path(d) / "ws", f"pend{i}", f"{3072 + 256 * i},1536", cli, COUNTS))
    finally:
        cluster.stop()
        bed.close()
    print(f"run --slurm --slurm-nodes 2 --detach with both nodes busy, 4 a8w8_blockscale shapes; median of "
          f"{args.repeats}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for key, label in (("detach_s", "run --detach to exit (holders pending), s"),
                       ("grant_launch_s", "grant to shard launched on the node (slower shard), s"),
                       ("resume_s", "resume once the nodes' tuners are done, s"),
                       ("resume_rts", "resume's round trips (SSH commands + helper requests)")):
        vals = [r[key] for r in runs]
        print(f"| {label} | {statistics.median(vals):.2f} | runs: {', '.join(f'{v:.2f}' for v in vals)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
