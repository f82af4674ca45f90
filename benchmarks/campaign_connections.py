"""A campaign's SSH connections and wall time on one node behind the test bed's proxy (issue 9: one
connection per node). Two variants, 4 shapes each, tiny simulated work, at +0 and +100 ms RTT; the proxy
counts every TCP connection the laptop opens; "one connect" is the median cost of a bare SSH handshake +
authentication (paramiko, as tune-remote opens it) at the same RTT, for scale.

Run: python benchmarks/campaign_connections.py [--repeats 3]   (root: the test bed's dockerd + sshd)
"""

from __future__ import annotations

import argparse
import io
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    from orchestrator.cli import main as cli
    from orchestrator.inventory import load_inventory
    from orchestrator.context import node_transport
    from tests.fake_remote.testbed import TestBed

    os.environ["TUNE_REMOTE_POLL_S"] = "0.5"
    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    rows = []
    try:
        node = bed.create_node(("current",), proxy=True)
        ctr = next(iter(node.containers.values()))
        configs = ctr.host_path(f"{ctr.aiter_root}/aiter/configs")
        with tempfile.TemporaryDirectory() as d:
            snap = Path(d) / "configs.orig"
            os.system(f"cp -a {configs} {snap}")
            inv = Path(d) / "inventory.yaml"
            inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                                  "containers": {ctr.name: {}}}}}))
            spec = load_inventory(str(inv)).node(node.alias)
            n = 0
            for rtt in (0.0, 0.1):
                node.proxy.set_latency(rtt / 2)
                walls, conns, connects = [], [], []
                for _ in range(a.repeats):
                    os.system(f"rm -rf {configs} && cp -a {snap} {configs}")
                    n += 1
                    before = node.proxy.connections_total
                    t = time.monotonic()
                    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                        rc = cli(["--inventory", str(inv), "--workspace", f"{d}/ws", "run", "--node", node.alias,
                                  "--variant", "a8w8_blockscale,a8w8_blockscale_bpreshuffle", "--log",
                                  "/opt/aiter-sim/logs/vllm_tp8_dsv3.log", "--m-preset", "1,64", "--yes",
                                  "--job-id", f"c{n}"])
                    walls.append(time.monotonic() - t)
                    if rc != 0:
                        print(f"campaign failed with exit {rc}", file=sys.stderr)
                        return 1
                    conns.append(node.proxy.connections_total - before)
                    host = node_transport(spec)
                    t = time.monotonic()
                    host.connect()
                    connects.append(time.monotonic() - t)
                    host.close()
                rows.append((f"+{rtt * 1000:.0f} ms", statistics.median(walls), statistics.median(conns),
                             statistics.median(connects)))
    finally:
        bed.close()
    print(f"campaign: 1 node, 2 variants x 4 shapes, tiny simulated work, median of {a.repeats}; "
          f"{os.cpu_count()} cores")
    print(f"{'RTT':>8} {'campaign wall s':>16} {'SSH connections':>16} {'one connect s':>14}")
    for rtt, wall, conns, one in rows:
        print(f"{rtt:>8} {wall:>16.2f} {conns:>16} {one:>14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
