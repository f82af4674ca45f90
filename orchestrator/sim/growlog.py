"""A server log that grows between two cycles of ``tune-remote watch``: miss lines appended as a vLLM TP
server prints them (one per rank), and a rotation (the file renamed away, a new one started), as logrotate
does. Used by the watch's tests and by ``tune-remote demo --watch``."""
from __future__ import annotations

import os
from pathlib import Path

from .logs import gemm_miss

PREFIX = "(Worker_TP{rank} pid={pid}) [aiter] "


def miss_lines(variant: str, shapes: list[tuple], times: int = 1) -> str:
    """``times`` miss lines per (m, n, k) shape (ranks 0..times-1), with a vLLM start-up line between."""
    out = ["INFO 11-28 09:00:00 [core.py:71] Initializing a V1 LLM engine"]
    for m, n, k in shapes:
        for rank in range(times):
            out.append(PREFIX.format(rank=rank, pid=1000 + rank) + gemm_miss(variant, m, n, k))
    return "\n".join(out) + "\n"


def append_misses(path, variant: str, shapes: list[tuple], times: int = 1) -> int:
    """Appends the lines (the file keeps its inode, as a server's log does); returns the bytes written."""
    data = miss_lines(variant, shapes, times).encode()
    with open(path, "ab") as fh:
        fh.write(data)
    return len(data)


def rotate(path) -> Path:
    """``path`` -> ``path.1`` (an older ``.1`` replaced), and an empty ``path``: another inode."""
    path = Path(path)
    old = path.with_name(path.name + ".1")
    os.replace(path, old)
    path.touch()
    return old


def upgrade_rocm(root, version: str) -> str:
    """A ROCm upgrade of a simulated node (its ``.info/version`` beside ``bin/rocminfo``); returns the old one."""
    path = Path(root) / ".info" / "version"
    old = path.read_text().strip()
    path.write_text(version + "\n")
    return old
