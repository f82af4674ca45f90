"""The simulated node's GPUs as each tool sees them (not part of any real package).

Physical GPUs 0..gpus-1 (rocm-smi / amd-smi numbering, every GPU of the host: sysfs is not filtered
by a container). ROCr enumerates only the GPUs whose device nodes the container has (node.json
``dri_gpus``; empty = all), then applies ROCR_VISIBLE_DEVICES (indices into that list or GPU- uuids,
stopping at the first invalid entry); HIP indexes into ROCr's list with HIP_VISIBLE_DEVICES (or
CUDA_VISIBLE_DEVICES when HIP's is unset). rocminfo prints ROCr's list; torch.cuda sees HIP's.
"""

import json
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
NODE_JSON = os.path.join(os.path.dirname(_HERE), "sim", "node.json")
BUSES = (0x05, 0x26, 0x46, 0x65, 0x85, 0xA6, 0xC6, 0xE5)   # an MI300X/MI355X board's PCI buses


def node():
    try:
        with open(os.environ.get("AITER_SIM_NODE") or NODE_JSON) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {"gpus": 0}


def count(n=None):
    return int((n or node()).get("gpus", 0))


def bus(p):
    b = BUSES[p] if p < len(BUSES) else 0x05 + 0x10 * p
    return "%02x:00.0" % b


def bdfid(p):
    return int(bus(p).split(":")[0], 16) << 8


def uuid(p):
    return "GPU-%016x" % (0x5A3C1E0F00000000 + p)


def _select(ids, value):
    out = []
    for part in value.split(","):
        part = part.strip()
        match = [i for i in ids if uuid(i) == part]
        if part.isdigit() and int(part) < len(ids):
            out.append(ids[int(part)])
        elif match:
            out.append(match[0])
        else:
            break                       # HIP/ROCr stop at the first invalid entry
    return out


def rocr_list(env=None):
    env = os.environ if env is None else env
    n = node()
    dri = [int(g) for g in n.get("dri_gpus") or []]
    ids = [p for p in range(count(n)) if not dri or p in dri]
    if env.get("ROCR_VISIBLE_DEVICES") is not None:
        ids = _select(ids, env["ROCR_VISIBLE_DEVICES"])
    return ids


def hip_list(env=None):
    env = os.environ if env is None else env
    ids = rocr_list(env)
    val = env.get("HIP_VISIBLE_DEVICES")
    if val is None:
        val = env.get("CUDA_VISIBLE_DEVICES")
    return ids if val is None else _select(ids, val)


def use(p, n=None):
    return 98 if p in set((n or node()).get("busy_gpus") or []) else 0


def vram_pct(p, n=None):
    n = n or node()
    if p in set(n.get("busy_gpus") or []):
        return 85
    return 60 if p in set(n.get("vram_gpus") or []) else 0


def kfd_pids(p, n=None):
    """A serving process holds every busy GPU; kfd_gpus have a process that is idle right now."""
    n = n or node()
    if p in set(n.get("busy_gpus") or []) or p in set(n.get("kfd_gpus") or []):
        return [40000 + p]
    return []


def cu(p, n=None):
    n = n or node()
    cus = n.get("gpu_cu_nums") or []
    return int(cus[p]) if p < len(cus) else int(n.get("cu_num", 256))
