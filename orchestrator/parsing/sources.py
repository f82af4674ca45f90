"""Command-line values read before anything else: where a shape source lives (--log, --profile: a prefix-free
path is in the container) and the values of a flag in an argv tail. Stdlib only (preconnect imports it first)."""
from __future__ import annotations


def split_log_sources(logs: list[str]) -> dict[str, list[str]]:
    """'node:PATH' -> on the node's host, 'local:PATH' -> this machine, anything else -> in the container."""
    out: dict[str, list[str]] = {"container": [], "node": [], "local": []}
    for spec in logs:
        if spec.startswith("node:"):
            out["node"].append(spec[5:])
        elif spec.startswith("local:"):
            out["local"].append(spec[6:])
        else:
            out["container"].append(spec)
    return out


def flag_values(argv: list[str], flag: str) -> list[str]:
    """The values given to ``flag`` in an argv tail (``--flag v`` or ``--flag=v``)."""
    out = []
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith(flag + "="):
            out.append(a.split("=", 1)[1])
    return out
