"""torch.cuda stand-in: devices come from <target>/sim/node.json, filtered by *_VISIBLE_DEVICES."""

import json
import os

_NODE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "sim", "node.json")


def _node():
    try:
        with open(_NODE) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {"gpus": 0}


def _visible():
    n = int(_node().get("gpus", 0))
    ids = list(range(n))
    for var in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        val = os.environ.get(var)
        if val is None:
            continue
        sel = []
        for part in val.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                i = int(part)
            except ValueError:
                break  # HIP stops at the first invalid entry
            if i < 0 or i >= len(ids):
                break
            sel.append(ids[i])
        ids = sel
    return ids


def is_available():
    return device_count() > 0


def device_count():
    return len(_visible())


def current_device():
    return 0


class _DeviceProperties(object):
    def __init__(self, idx, node):
        self.name = node.get("marketing_name", "AMD Instinct MI355X")
        self.gcnArchName = node.get("gfx", "gfx950") + ":sramecc+:xnack-"
        self.multi_processor_count = int(node.get("cu_num", 256))
        self.total_memory = int(node.get("vram_bytes", 288 * 1024 ** 3))
        self.major, self.minor = 9, 5
        self._physical = idx

    def __repr__(self):
        return ("_CudaDeviceProperties(name='%s', major=%d, minor=%d, gcnArchName='%s', total_memory=%dMB, "
                "multi_processor_count=%d)" % (self.name, self.major, self.minor, self.gcnArchName,
                                               self.total_memory // (1024 * 1024), self.multi_processor_count))


def get_device_properties(device=0):
    idx = int(getattr(device, "index", device) or 0)
    vis = _visible()
    if idx < 0 or idx >= len(vis):
        raise RuntimeError("HIP error: invalid device ordinal")
    return _DeviceProperties(vis[idx], _node())


def get_device_name(device=0):
    return get_device_properties(device).name


def set_device(device):
    get_device_properties(device)


def synchronize(device=None):
    return None
