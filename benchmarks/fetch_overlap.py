"""fetch of one big file, with and without hashing on the node while the copy runs, interleaved in one run.

"lazy": the manifest is asked with `sizes` (what fetch does): a file whose size differs from the laptop's copy
comes without its sha256 and fetch asks for it in a second thread while it copies. "eager": the same manifest
without `sizes`, so the node hashes the whole file before the copy starts (what fetch did before).
Also prints a fetch of the unchanged file (both sides hash it, in parallel) and scp of the same host file (its
own connection each time).

Run (root: the test bed starts dockerd and sshd):
    python benchmarks/fetch_overlap.py [--mb 200] [--repeats 10] [--where mounted|own]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--where", choices=("mounted", "own"), default="mounted",
                    help="the file in the bind-mounted sim dir (read on the host) or in the container's /tmp")
    a = ap.parse_args()
    from orchestrator.context import Ctx, Settings, Target
    from orchestrator.inventory import load_inventory
    from orchestrator.state import JobState, Workspace
    from orchestrator.steps import fetch
    from orchestrator.ui import Ui
    from tests.fake_remote.testbed import TestBed

    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    try:
        node = bed.create_node(("current",), proxy=False)
        ctr = next(iter(node.containers.values()))
        d = Path(tempfile.mkdtemp())
        inv = d / "inventory.yaml"
        inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(node.ssh_config_file),
                                                               "containers": {ctr.name: {}}}}}))
        mounted = "/opt/aiter-sim/fetch-overlap.bin"
        host_file = ctr.host_path(mounted)
        with open(host_file, "wb") as fh:
            for _ in range(a.mb):
                fh.write(os.urandom(1 << 20))
        path = mounted
        if a.where == "own":
            path = "/tmp/fetch-overlap.bin"
            ctr.exec("cp", mounted, path)
        spec = load_inventory(str(inv)).node(node.alias)
        target = Target(spec, spec.container(ctr.name))
        job = JobState(job_id="j", node=node.alias, container=ctr.name, variant="a8w8_blockscale", created=0,
                       request={})
        ctx = Ctx(job=job, workspace=Workspace(d / "ws"), target=target, settings=Settings(), ui=Ui(quiet=True))
        eager = {"on": False}
        plain_call = Ctx.call

        def call(self, op, request=None, **kw):
            if op == "manifest" and request and eager["on"]:
                request = {k: v for k, v in request.items() if k != "sizes"}
            return plain_call(self, op, request, **kw)

        Ctx.call = call
        ctx.call("version")
        local = d / "out.bin"
        times: dict[str, list[float]] = {"lazy": [], "eager": []}
        for _ in range(a.repeats):
            for mode in times:
                eager["on"] = mode == "eager"
                local.unlink(missing_ok=True)
                ctx.prefetched.pop("host_mounts", None)
                t = time.monotonic()
                fetch.pull(ctx, {path: local}, record=False)
                times[mode].append(time.monotonic() - t)
        reads = job.step_state("fetch").info["host_reads_last_pull"]
        again = []                  # the local copy is there and the same: both sides hash, nothing is copied
        for _ in range(a.repeats):
            t = time.monotonic()
            assert fetch.pull(ctx, {path: local}, record=False)[path] == "unchanged"
            again.append(time.monotonic() - t)
        target.close()
        scp = ["scp", "-q", "-F", "/dev/null", "-i", str(node.identity_file), "-o", "BatchMode=yes",
               "-o", f"UserKnownHostsFile={node.known_hosts_file}", "-P", str(node.port),
               f"{node.user}@{node.host}:{host_file}", str(d / "scp.bin")]
        scp_s = []
        for _ in range(max(3, a.repeats // 2)):
            t = time.monotonic()
            subprocess.run(scp, check=True)
            scp_s.append(time.monotonic() - t)
        print(f"cpus {os.cpu_count()}, {a.mb} MB, file {a.where} ({path}), read on the host: {reads}")
        print("| fetch | median s | min s | max s | MB/s (median) |\n|---|---|---|---|---|")
        for name, ts in (*times.items(), ("again, unchanged (0 bytes copied)", again), ("scp (own connection)", scp_s)):
            med = statistics.median(ts)
            print(f"| {name} | {med:.3f} | {min(ts):.3f} | {max(ts):.3f} | {a.mb * 1.048576 / med:.0f} |")
    finally:
        bed.close()


if __name__ == "__main__":
    main()
