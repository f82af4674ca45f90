"""Where a shape source lives (--log, --profile): a prefix-free path is in the container."""
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
