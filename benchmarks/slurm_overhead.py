"""Overhead of the Slurm path (issue 11): the same shapes tuned on the same two containers, once as two
inventory nodes (SSH + docker exec, persistent helper channel) and once through Slurm (`run --slurm`:
sbatch of two holder jobs through the login node; the persistent helper is one long `srun --overlap
--jobid J -w NODE docker exec` step per node, other commands one step each), measured in one run,
alternating, median of --repeats.

The test bed gives both paths the very same sshd (the Slurm login node) and the very same containers
(`<login>-a`, `<login>-b`, one per Slurm compute node), so the difference is Slurm's alone.

Counted in this process:
  round trips = SSH exec channels opened (paramiko exec_command) + requests over persistent helper channels
  of which:  srun steps (work on a compute node), Slurm control (sbatch/squeue/scontrol/scancel/holder files)

Run (root: the test bed starts dockerd, sshd, munge, slurmctld, slurmd):
    python benchmarks/slurm_overhead.py [--repeats 3] [--m-preset 1,16,64,256]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COUNTS = {"exec": 0, "srun": 0, "slurm": 0, "helper_requests": 0}


def _count() -> None:
    """Count every SSH command and every persistent-channel request this process makes."""
    import paramiko

    from orchestrator.remote import channel
    exec_command = paramiko.Channel.exec_command
    request = channel.HelperChannel.request

    def counted_exec(self, command):
        text = command.decode() if isinstance(command, bytes) else command
        COUNTS["exec"] += 1
        if " srun " in f" {text} ":
            COUNTS["srun"] += 1
        elif any(w in text for w in ("sbatch", "squeue", "scontrol", "scancel", "/.tune-remote/slurm/")):
            COUNTS["slurm"] += 1
        return exec_command(self, command)

    def counted_request(self, *a, **kw):
        COUNTS["helper_requests"] += 1
        return request(self, *a, **kw)

    paramiko.Channel.exec_command = counted_exec
    channel.HelperChannel.request = counted_request


def one_run(cli, inv: Path, ws: Path, where: list[str], job: str, shapes: list[str]) -> dict:
    for k in COUNTS:
        COUNTS[k] = 0
    argv = ["--inventory", str(inv), "--workspace", str(ws), "run", *where, "--variant", "a8w8_blockscale",
            *shapes, "--promote", "none", "--yes", "--job-id", job]
    t0 = time.monotonic()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()) as err:
        rc = cli(argv)
    wall = time.monotonic() - t0
    if rc != 0:
        raise SystemExit(f"{job}: exit {rc}\n{err.getvalue()[-3000:]}")
    state = json.loads((ws / job / "state.json").read_text())
    n = len(list((ws / job / "comparison.csv").read_text().splitlines())) - 1
    return {"wall": wall, "round_trips": COUNTS["exec"] + COUNTS["helper_requests"], **COUNTS,
            "shapes": n, "targets": state["node"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--nk", default="7168,2048")
    ap.add_argument("--m-preset", default="1,16,64,256")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (the test bed starts dockerd, sshd and Slurm's daemons)")
        return 1
    _count()
    from orchestrator.cli import main as cli
    from tests.fake_remote.slurm import SlurmCluster, sweep_stale_clusters
    from tests.fake_remote.testbed import TestBed

    os.environ["TUNE_REMOTE_POLL_S"] = "0.5"
    shapes = ["--nk", args.nk, "--m-preset", args.m_preset]
    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    sweep_stale_clusters()
    cluster = SlurmCluster(bed, computes=("a", "b"))
    runs: dict[str, list[dict]] = {"inventory": [], "slurm": []}
    try:
        cluster.start()
        login = cluster.login
        node = {"host": login.alias, "ssh_config": str(login.ssh_config_file)}   # as the Slurm entry's login
        with tempfile.TemporaryDirectory() as d:
            inv = Path(d) / "inventory.yaml"
            doc = {"nodes": {f"n{c}": dict(node, containers={f"{login.name}-{c}": {}}) for c in cluster.computes}}
            doc.update(cluster.inventory("testslurm"))
            inv.write_text(yaml.safe_dump(doc))
            for i in range(args.repeats):           # alternating, so load drifts hit both paths alike
                runs["inventory"].append(one_run(cli, inv, Path(d) / "ws", ["--node", "na", "--node", "nb"],
                                                 f"inv{i}", shapes))
                runs["slurm"].append(one_run(cli, inv, Path(d) / "ws", ["--slurm", "testslurm", "--slurm-nodes",
                                                                        "2"], f"slurm{i}", shapes))
    finally:
        cluster.stop()
        bed.close()

    def med(path: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[path])

    n_shapes = runs["slurm"][0]["shapes"]
    print(f"Slurm path vs two inventory nodes: {n_shapes} a8w8_blockscale shapes ({args.nk} x M {args.m_preset}), "
          f"the same 2 containers and sshd, --promote none; median of {args.repeats}, alternating; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print("| measure | inventory (2 nodes) | Slurm (--slurm-nodes 2) | Slurm - inventory |")
    print("|---|---|---|---|")
    for key, label, fmt in (("wall", "wall time of `run`", "{:.1f} s"),
                            ("round_trips", "round trips (SSH commands + helper-channel requests)", "{:.0f}"),
                            ("exec", "  SSH commands (exec channels)", "{:.0f}"),
                            ("helper_requests", "  requests over persistent helper channels", "{:.0f}"),
                            ("srun", "  of the SSH commands: srun --overlap steps", "{:.0f}"),
                            ("slurm", "  of the SSH commands: Slurm control + holder files", "{:.0f}")):
        a, b = med("inventory", key), med("slurm", key)
        diff = b - a
        print(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {'+' if diff >= 0 else ''}{fmt.format(diff)}"
              + (f" ({b / a:.2f}x)" if key == "wall" and a else "") + " |")
    print("runs (wall s): " + "; ".join(f"{p}: " + ", ".join(f"{r['wall']:.1f}" for r in rs) for p, rs in runs.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
