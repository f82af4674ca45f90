"""Shared helpers for the simulated-AITER tests (no tests here)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from orchestrator.sim import SimInstall
from orchestrator.sim.localnode import run

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def py(inst: SimInstall, *args, env=None, cwd=None, timeout=60):
    """python3 <args> inside the node (cwd = AITER root); returns CompletedProcess."""
    return run(inst, ["python3", *[str(a) for a in args]], env=env, cwd=cwd, timeout=timeout)


def write_csv(path: Path, header, rows) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def read_csv(path: Path):
    with open(path, newline="") as fh:
        r = csv.reader(fh)
        rows = list(r)
    return rows[0], [dict(zip(rows[0], x)) for x in rows[1:]]


def markdown_table(text: str, name: str):
    """Rows of the `[aiter] <name> summary (markdown):` pipe table as dicts of strings."""
    lines = ANSI.sub("", text).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.endswith(f"{name} summary (markdown):"))
    tab = []
    for ln in lines[start + 1:]:
        if not ln.startswith("|"):
            break
        tab.append([c.strip() for c in ln.strip().strip("|").split("|")])
    header, body = tab[0], tab[2:]
    return [dict(zip(header, r)) for r in body]
