"""Log mining vs `grep -c`: throughput and peak memory on a generated vLLM log, and on one with a 200 MB line.

Run: python benchmarks/shapelog_throughput.py [SIZE_MB]   (default 1024; files are deleted after)

The log is `orchestrator.sim.logs.write_large_log` output (64 MB, repeated to SIZE_MB): every other
line is an AITER miss, as in a serving log with untuned shapes. Each parse runs in a fresh process
(`python3 -m orchestrator.shapelib.shapelog --summary`, what the node helper runs) so that its
peak RSS is its own; times are the best of 3 with the file in the page cache.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.sim.logs import write_large_log  # noqa: E402

SHAPELOG = ("-m", "orchestrator.shapelib.shapelog")    # run from ROOT (cwd), as the node helper's package


def timed(argv, runs=3):
    """(best wall seconds, peak RSS MB of that child, stdout); RSS from GNU time (a fork of this
    process would report this process's RSS as the child's high-water mark)."""
    best = None
    for _ in range(runs):
        t0 = time.monotonic()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], capture_output=True, cwd=ROOT)
        dt = time.monotonic() - t0
        rss_mb = int(proc.stderr.decode().strip().splitlines()[-1]) / 1024
        if best is None or dt < best[0]:
            best = (dt, rss_mb, proc.stdout)
    return best


def make_log(path, size):
    seed = path.with_suffix(".seed")
    write_large_log(seed, min(size, 64 << 20))
    data = seed.read_bytes()
    seed.unlink()
    with open(path, "wb") as f:
        written = 0
        while written < size:
            f.write(data)
            written += len(data)
    return written


def make_long_line_log(path, line_mb=200):
    miss = (b"(Worker_TP0 pid=888) [aiter] shape is M:%d, N:512, K:7168, not found tuned config in "
            b"/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n")
    with open(path, "wb") as f:
        f.write(miss % 1)
        chunk = b"\r[Tuning] 37% |#####     | tuned 1/3 " * 1000
        for _ in range(line_mb * (1 << 20) // len(chunk)):
            f.write(chunk)
        f.write(b"\n" + miss % 2)
    return path.stat().st_size


def row(name, size, grep, mine, procs=1):
    """RSS: GNU time reports the largest process of the tree; with several, their sum is at most procs x that."""
    g_s, g_mb, _ = grep
    m_s, m_mb, _ = mine
    rss = f"{m_mb:.0f} MB RSS" if procs == 1 else f"{m_mb:.0f} MB RSS per process, <= {procs * m_mb:.0f} MB together"
    print(f"| {name} | {size / 1e6:.0f} MB | grep -c {g_s:.2f} s = {size / g_s / 1e6:.0f} MB/s, {g_mb:.0f} MB RSS "
          f"| shapelog {m_s:.2f} s = {size / m_s / 1e6:.0f} MB/s, {rss} | {g_s / m_s:.2f}x |")


def main():
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    d = Path(tempfile.mkdtemp(prefix="shapelog-bench-"))
    try:
        print(f"cpus {os.cpu_count()}, python {sys.version.split()[0]}")
        print("| log | size | grep | shapelog | shapelog / grep throughput |\n|---|---|---|---|---|")
        big = d / "vllm.log"
        size = make_log(big, size_mb << 20)
        grep = timed(["grep", "-c", "not found tuned config", str(big)])
        mine = timed([sys.executable, *SHAPELOG, "--summary", str(big)])
        one = timed([sys.executable, *SHAPELOG, "--summary", "--procs", "1", str(big)])
        procs = json.loads(mine[2])["ranges"]["processes"]
        row(f"generated vLLM, {procs} process(es) (the default here)", size, grep, mine, procs)
        row("generated vLLM, 1 process (--procs 1)", size, grep, one)
        big.unlink()
        long_log = d / "long_line.log"
        size = make_long_line_log(long_log)
        grep = timed(["grep", "-c", "not found tuned config", str(long_log)])
        mine = timed([sys.executable, *SHAPELOG, "--summary", str(long_log)])
        row("200 MB line", size, grep, mine)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
