"""What a quiet cycle of `tune-remote watch` costs (issue 29): round trips, bytes read on the node, seconds.

On a test-bed node (sshd + docker exec, behind the fault proxy) whose server log already holds --log-mb MB:
  1. the first cycle (`watch --once`): reads the whole log once
  2. quiet cycles as separate `watch --once` processes (cron / scrontab): SSH connection + one round trip
  3. quiet cycles of one long-lived `watch --interval 1` (systemd): the helper channel stays open
  4. a cycle after 1 KiB of new lines: only those bytes are read
each at RTT +0 ms and +100 ms (the proxy's added latency). --min-misses is set beyond reach, so nothing is
launched: the figures are the watch's own. Round trips are counted twice: the watch's own count (ledger,
output line) and TUNE_REMOTE_TRACE's lines (every container round trip, including the helper's start).

Run (root: the test bed starts dockerd and sshd):
    python benchmarks/watch_quiet_cycle.py [--log-mb 64] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.sim.growlog import append_misses  # noqa: E402

_EXE = Path(sys.executable).parent / "tune-remote"
TR = [str(_EXE)] if _EXE.exists() else [sys.executable, "-m", "orchestrator"]
NEVER = str(10 ** 9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log-mb", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from tests.fake_remote.testbed import TestBed
    bed = TestBed(owner=f"bench-{os.getpid()}").provision()
    try:
        node = bed.create_node(("current",), proxy=True)
        ctr = next(iter(node.containers.values()))
        fill = ctr.fill_log(args.log_mb << 20, name="watch-big.log")
        host_log = ctr.logs_host_dir / "watch-big.log"
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            inv = d / "inventory.yaml"
            inv.write_text(f"nodes:\n  {node.alias}:\n    ssh_config: {node.ssh_config_file}\n"
                           f"    containers:\n      {ctr.name}: {{}}\n")
            env = dict(os.environ, TUNE_REMOTE_TRACE="1")
            for rtt in (0.0, 0.1):
                node.proxy.set_latency(rtt / 2)
                name = f"bench{int(rtt * 1000)}"
                base = [*TR, "--inventory", str(inv), "--workspace", str(d / "ws"), "--json", "watch", "--node",
                        node.alias, "--log", fill.container_path, "--min-misses", NEVER, "--name", name]

                def once():
                    t0 = time.monotonic()
                    cp = subprocess.run([*base, "--once"], capture_output=True, env=env, timeout=900)
                    wall = time.monotonic() - t0
                    assert cp.returncode == 0, cp.stderr.decode()[-2000:]
                    line = json.loads(cp.stdout.decode().splitlines()[-1])
                    traced = sum(1 for ln in cp.stderr.decode().splitlines() if ln.startswith("tune-remote trace:"))
                    return line, traced, wall

                first, traced, wall = once()
                print(f"RTT +{rtt * 1000:.0f} ms  first cycle: {first['bytes']} bytes read on the node, "
                      f"{first['round_trips']} round trip(s) (traced {traced}), cycle {first['seconds']:.3f} s, "
                      f"process {wall:.2f} s")
                quiet = [once() for _ in range(args.repeats)]
                print(f"RTT +{rtt * 1000:.0f} ms  quiet --once: bytes {max(q[0]['bytes'] for q in quiet)}, "
                      f"round trips {statistics.median(q[0]['round_trips'] for q in quiet)} "
                      f"(traced {statistics.median(q[1] for q in quiet)}), cycle "
                      f"{statistics.median(q[0]['seconds'] for q in quiet):.3f} s, process "
                      f"{statistics.median(q[2] for q in quiet):.2f} s (median of {args.repeats})")
                append_misses(host_log, "a8w8_blockscale", [(72, 512, 7168)] * 8)
                grown, traced, wall = once()
                print(f"RTT +{rtt * 1000:.0f} ms  after {host_log.stat().st_size - first['bytes']} new bytes: "
                      f"{grown['bytes']} bytes read, {grown['round_trips']} round trip(s), "
                      f"cycle {grown['seconds']:.3f} s")
                loop = subprocess.Popen([*base, "--interval", "1"], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env)
                lines = []
                try:
                    while len(lines) < args.repeats + 1:
                        out = loop.stdout.readline()
                        if not out:
                            break
                        lines.append(json.loads(out))
                finally:
                    loop.send_signal(signal.SIGTERM)
                    loop.wait(timeout=60)
                loop_quiet = lines[1:]
                print(f"RTT +{rtt * 1000:.0f} ms  quiet cycles of one watch process: bytes "
                      f"{max(x['bytes'] for x in loop_quiet)}, round trips "
                      f"{statistics.median(x['round_trips'] for x in loop_quiet)}, cycle "
                      f"{statistics.median(x['seconds'] for x in loop_quiet):.3f} s (median of {len(loop_quiet)}; "
                      f"exit {loop.returncode})")
    finally:
        bed.close()


if __name__ == "__main__":
    main()
