"""The simulated node's upgrade knob: a new AITER version under which some tuned rows lose their gain.

An AITER (or ROCm) upgrade changes the kernels behind the names in a tuned table: a row that was the
fastest kernel for its shape when it was tuned can be slower than the default kernel afterwards, and
nothing notices (issue 29). ``apply(inst, version)`` upgrades a laid-out node in place, the way a ``pip
install -U`` would on a running container: a new ``dist-info`` (the version pip and ``importlib.metadata``
report, what discover reads) and ``node.json``'s ``upgrade`` record, read by every new process.

Under an upgrade, a deterministic subset of tuned rows (``SLOW_FRACTION`` of the row keys, by a hash of
the key and the new version, never ``random``) dispatches to a kernel that is now ``1.06..1.20 x`` the
default kernel's time; every other row keeps its time. ``slowed`` says which; ``upgraded_us`` is the time
a benchmark measures. Stdlib only, Python 3.8+: copied into the node beside perf_model.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .perf_model import _canon, _u, default_us

SLOW_FRACTION = 0.34


def slowed(variant: str, key_shape: dict, gfx: str, cu_num: int, version: str) -> bool:
    """The tuned row of ``key_shape`` is slower than the default kernel under AITER ``version``."""
    return _u(_canon(variant, key_shape, gfx, cu_num), "upgrade:" + str(version)) < SLOW_FRACTION


def upgraded_us(variant: str, shape: dict, gfx: str, cu_num: int, tuned_from, version: str, us: float) -> float:
    """What the benchmark of ``shape`` measures under the upgrade when the module dispatched to the tuned row
    of ``tuned_from`` (None: the default kernel, unchanged); ``us`` = the time before the upgrade."""
    if tuned_from is None or not slowed(variant, tuned_from, gfx, cu_num, version):
        return us
    factor = 1.06 + 0.14 * _u(_canon(variant, tuned_from, gfx, cu_num), "upgrade-factor:" + str(version))
    return round(default_us(variant, shape, gfx, cu_num) * factor, 4)


class _Dist:
    def __init__(self, name: str, version: str):
        self.dist_name, self.pip_version = name, version


def apply(node, version: str) -> dict:
    """Upgrade a laid-out simulated node to AITER ``version`` while it runs: ``node`` is its ``SimInstall`` or
    its host directory (a test bed container's, a demo node's). The dist-info of the old version goes, a new
    one is written (develop: the editable ``.pth`` too) and ``node.json`` gets ``"upgrade": {"version",
    "from"}``. Returns that record."""
    from . import PIP_VERSIONS, _write_dist_info
    host = Path(getattr(node, "host_dir", None) or node)
    node_json = host / "sim" / "node.json"
    info = json.loads(node_json.read_text())
    target = info["target_dir"].rstrip("/")

    def on_host(path: str) -> Path:
        return host / path[len(target):].lstrip("/") if path.startswith(target) else Path(path)
    old = (info.get("upgrade") or {}).get("version") or PIP_VERSIONS.get(info["profile"], info["version"])
    name = info.get("pip_name") or "amd-aiter"
    norm = name.replace("-", "_")
    develop = info.get("install_mode", "develop") == "develop"
    where = host / "pylib" if develop else on_host(info["aiter_root"])
    for p in list(where.glob(f"{norm}-*.dist-info")) + list(where.glob(f"__editable__.{norm}-*.pth")):
        if p.is_dir():
            for f in p.iterdir():
                f.unlink()
            p.rmdir()
        else:
            p.unlink()
    roots = () if develop else (on_host(info["aiter_root"]) / "aiter", on_host(info["meta_root"]))
    _write_dist_info(where, _Dist(name, version), editable_target=info["aiter_root"] if develop else None,
                     record_roots=roots)
    record = {"version": version, "from": old}
    info["upgrade"] = record
    tmp = node_json.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=1))
    os.replace(tmp, node_json)
    return record
