"""Throughput of the streaming log parser (runs on the node for `--log`): MB/s on a generated log.

Run: python benchmarks/shapelog_throughput.py [SIZE_MB]   (default 200; the file is deleted after)
"""

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.remote.helpers import shapelog  # noqa: E402
from orchestrator.sim.logs import write_large_log  # noqa: E402

size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 200
with tempfile.TemporaryDirectory() as d:
    path = Path(d) / "big.log"
    write_large_log(path, size_mb * 1024 * 1024)
    t0 = time.monotonic()
    res = shapelog.parse_files([str(path)])
    dt = time.monotonic() - t0
    n = sum(len(v) for v in res.shapes.values())
    print(f"{res.bytes / 1e6:.0f} MB, {res.lines} lines in {dt:.2f}s = {res.bytes / 1e6 / dt:.0f} MB/s; "
          f"{n} distinct shapes")
