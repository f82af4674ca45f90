"""aiter/jit/utils/chip_info.py (simulated): gfx and cu_num from `rocminfo`, as the real one does."""

import functools
import os
import re
import subprocess


@functools.lru_cache(maxsize=1)
def _rocminfo():
    try:
        return subprocess.run(["rocminfo"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True, check=False).stdout
    except OSError:
        from ..._sim import node

        n = node()
        return "Agent 2\n  Name: %s\n  Device Type: GPU\n  Compute Unit: %d\n" % (n["gfx"], n["cu_num"])


@functools.lru_cache(maxsize=1)
def get_gfx_runtime():
    m = re.search(r"\b(gfx\w+)\b", _rocminfo())
    if not m:
        raise RuntimeError("no gfx found in rocminfo output")
    return m.group(1)


def get_gfx():
    archs = os.environ.get("GPU_ARCHS", "native")
    if archs and archs != "native":
        return archs.split(";")[-1]
    return get_gfx_runtime()


@functools.lru_cache(maxsize=1)
def _cu_num_rocminfo():
    cus = []
    for agent in re.split(r"Agent\s*\d+", _rocminfo()):
        dt = re.search(r"Device Type\s*:\s*(\S+)", agent)
        if dt and "GPU" in dt.group(1):
            m = re.search(r"Compute Unit\s*:\s*(\d+)", agent)
            if m:
                cus.append(int(m.group(1)))
    assert cus and all(c == cus[0] for c in cus), "all GPUs must report the same cu_num"
    return cus[0]


def get_cu_num():
    env = int(os.environ.get("CU_NUM", "0") or 0)
    if env:
        return env
    return _cu_num_rocminfo()
