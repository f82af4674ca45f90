"""Generate big AITER-like server logs at test time (never committed), for throughput tests.

``write_log(path, size_bytes)`` writes exactly ``size_bytes`` bytes of realistic vLLM/SGLang + aiter log
lines (GEMM "not found tuned config" misses, fused-MoE dispatch lines, HTTP noise) in which a known,
small set of distinct shapes repeats. It streams a ~1 MiB block, so multi-GB files cost only disk
bandwidth (about 1 GB/s here) and no memory.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

# Distinct shapes embedded in every block (a8w8_blockscale GEMM misses, as logged by vLLM workers).
GEMM_SHAPES = [(72, 512, 7168), (72, 7168, 256), (72, 2112, 7168), (8192, 1024, 3072), (16, 1536, 7168)]
# Fused-MoE misses (current format: tuple starts with 'gfx950', cu_num).
MOE_TUPLES = [(64, 4096, 256, 288, 8), (16384, 6144, 256, 257, 9)]


@dataclass
class LogFill:
    path: Path
    size: int
    lines: int
    seconds: float
    gemm_shapes: list[dict] = field(default_factory=list)
    moe_shapes: list[dict] = field(default_factory=list)
    gemm_miss_lines: int = 0
    container_path: str | None = None

    @property
    def mb_per_s(self) -> float:
        return self.size / 1e6 / self.seconds if self.seconds else float("inf")


def _block(target: int = 1 << 20) -> tuple[bytes, int, int]:
    """A block of whole lines of about ``target`` bytes. Returns (bytes, lines, gemm miss lines)."""
    out: list[str] = []
    size = lines = misses = 0
    i = 0
    while size < target:
        rank = i % 8
        pid = 880 + rank
        m, n, k = GEMM_SHAPES[i % len(GEMM_SHAPES)]
        batch = [
            f"(Worker_TP{rank} pid={pid}) [aiter] shape is M:{m}, N:{n}, K:{k}, not found tuned config in "
            "/tmp/aiter_configs/a8w8_blockscale_tuned_gemm.csv, will use default config!\n",
            f"(APIServer pid=871) INFO:     127.0.0.1:{50000 + i % 9999} - \"POST /v1/completions HTTP/1.1\" 200 OK\n",
            f"(Worker_TP{rank} pid={pid}) INFO 04-10 06:05:{i % 60:02d} [gpu_model_runner.py:1420] "
            f"step {i}: scheduled 37 requests, {i * 7 % 4096} tokens\n",
        ]
        misses += 1
        if i % 4 == 0:
            tok, dim, inter, expert, topk = MOE_TUPLES[(i // 4) % len(MOE_TUPLES)]
            batch.append(
                f"(Worker_TP{rank} pid={pid}) [aiter] [fused_moe] using 2stage default for ('gfx950', 256, {tok}, "
                f"{dim}, {inter}, {expert}, {topk}, 'ActivationType.Silu', 'torch.bfloat16', "
                "'torch.float8_e4m3fn', 'torch.float8_e4m3fn', 'QuantType.per_1x128', True, False)\n")
        for line in batch:
            out.append(line)
            size += len(line)
            lines += 1
        i += 1
    data = "".join(out).encode()
    return data, lines, misses


def write_log(path: str | os.PathLike, size_bytes: int, *, block_bytes: int = 1 << 20) -> LogFill:
    """Write exactly ``size_bytes`` bytes (whole lines) to ``path`` (replaced atomically at the end)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    block, block_lines, block_misses = _block(block_bytes)
    t0 = time.monotonic()
    tmp = path.with_name(path.name + ".partial")
    lines = misses = written = 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while size_bytes - written >= len(block):
            written += os.write(fd, block)
            lines += block_lines
            misses += block_misses
        rest = size_bytes - written
        if rest > 0:
            cut = block[:rest]
            cut = cut[: cut.rfind(b"\n") + 1] if b"\n" in cut else b""
            # count what the partial block holds
            lines += cut.count(b"\n")
            misses += cut.count(b"not found tuned config")
            pad = rest - len(cut)
            if pad:
                cut += b"#" * (pad - 1) + b"\n"
                lines += 1
            written += os.write(fd, cut)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return LogFill(
        path=path, size=path.stat().st_size, lines=lines, seconds=time.monotonic() - t0,
        gemm_shapes=[{"m": m, "n": n, "k": k} for m, n, k in GEMM_SHAPES],
        moe_shapes=[{"token": t, "model_dim": d, "inter_dim": i, "expert": e, "topk": k}
                    for t, d, i, e, k in MOE_TUPLES],
        gemm_miss_lines=misses,
    )
