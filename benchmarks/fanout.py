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
    finally:
        bed.close()
    t1 = times[ks[0]] * ks[0]
    print(f"fan-out: {args.shapes} a8w8_blockscale shapes, {args.seconds_per_shape:g} s per shape in the "
          f"simulated tuner, {os.cpu_count()} cores")
    print(f"{'targets':>8} {'wall s':>8} {'efficiency T1/(k*Tk)':>22}")
    for k in ks:
        print(f"{k:>8} {times[k]:>8.1f} {t1 / (k * times[k]):>22.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
