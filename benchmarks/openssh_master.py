"""tune-remote on the user's own OpenSSH ControlMaster (ssh_config ControlPath + ControlMaster auto +
ControlPersist: remote/openssh.py) against its paramiko connection, side by side in one run on one test-bed
node behind the fault proxy (RTT +0 and +100 ms):

  1. a whole `tune-remote run` (4 shapes, --repeats 1): paramiko (a handshake per command) / the master up
     (started by an untimed first run) / the hand-written bash over ITS ControlMaster, up as well, and fresh
     (issue 9's reference: benchmarks/handwritten_run.sh)
  2. one more command afterwards: `tune-remote fetch JOB` with nothing new (a command's own cost)
  3. fetch of 200 MB random bytes (mounted dir / container's own fs) through either, against scp

Run (root: the test bed starts dockerd and sshd):
    python benchmarks/openssh_master.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import issue9_figures as F


def _master_inventory(b: F.Bench, sock_dir: str) -> Path:
    cfg = b.d / "ssh_config_master"
    cfg.write_text(b.node.ssh_config_file.read_text() + f"\nHost *\n    ControlMaster auto\n"
                   f"    ControlPath {sock_dir}/cm-%C\n    ControlPersist 600\n")
    inv = b.d / "inventory_master.yaml"
    inv.write_text(f"nodes:\n  {b.node.alias}:\n    ssh_config: {cfg}\n    containers:\n      {b.ctr.name}: {{}}\n")
    return inv


def _runs(b: F.Bench, inv: Path, n: int) -> tuple[float, dict]:
    b.inv = inv
    walls, state = [], None
    for _ in range(n):
        w, state = b.one_run()
        walls.append(w)
    return statistics.median(walls), state


def _fetch_cmd_s(b: F.Bench, inv: Path, job: str, n: int) -> float:
    argv = [*F.TR, "--inventory", str(inv), "--workspace", str(b.ws), "-q", "fetch", job]
    return F.median_s(lambda: subprocess.run(argv, check=True, capture_output=True, stdin=subprocess.DEVNULL), n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (the test bed starts dockerd and sshd)")
    from tests.fake_remote.testbed import TestBed
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    rows = []
    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    sock_dir = tempfile.mkdtemp(prefix="trcm", dir="/tmp")
    try:
        node = bed.create_node(("current",), proxy=True)
        ctr = next(iter(node.containers.values()))
        with tempfile.TemporaryDirectory() as d:
            b = F.Bench(node, ctr, Path(d), a.repeats)
            plain, with_master = b.inv, _master_inventory(b, sock_dir)
            try:
                for rtt in (0.0, 0.1):
                    node.proxy.set_latency(rtt / 2)
                    tag = f"RTT +{rtt * 1000:.0f} ms"
                    para_s, state = _runs(b, plain, a.repeats)
                    _runs(b, with_master, 1)                       # starts the master (untimed)
                    master_s, _ = _runs(b, with_master, a.repeats)
                    fresh_bash = statistics.median([b.handwritten(state) for _ in range(a.repeats)])
                    stop, b.cm_stop = b.cm_stop, lambda: None      # the bash's master stays up between runs
                    subprocess.run(b.cm_argv("true"), check=True)
                    warm_bash = statistics.median([b.handwritten(state) for _ in range(a.repeats)])
                    b.cm_stop = stop
                    rows.append((f"whole run, 4 shapes ({tag})",
                                 f"paramiko {para_s:.2f} s; the user's master up {master_s:.2f} s",
                                 f"bash, its master up {warm_bash:.2f} s; fresh {fresh_bash:.2f} s",
                                 f"{master_s / warm_bash:.2f}x (both up); {para_s / fresh_bash:.2f}x (both fresh)"))
                    job = state["job_id"]
                    f_para = _fetch_cmd_s(b, plain, job, a.repeats * 2)
                    f_master = _fetch_cmd_s(b, with_master, job, a.repeats * 2)
                    rows.append((f"`fetch JOB`, nothing new ({tag})", f"paramiko {f_para:.2f} s",
                                 f"the user's master {f_master:.2f} s", f"{f_master / f_para:.2f}x"))
                node.proxy.set_latency(0)
                for name, inv in (("paramiko", plain), ("the user's master", with_master)):
                    b.inv = inv
                    for r in F.fetch_rows(b, text=False)[:2]:
                        rows.append((f"{r[0]} ({name})", r[1], r[2], r[3]))
            finally:
                b.cm_stop()
                subprocess.run(["ssh", "-F", str(b.d / "ssh_config_master"), "-O", "exit", node.alias],
                               capture_output=True)
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
        bed.close()
    print("| measure | tune-remote | reference | ratio |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
