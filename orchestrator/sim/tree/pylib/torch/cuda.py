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
    """Physical GPUs HIP shows this process, in HIP order (ROCr's device nodes and ROCR_VISIBLE_DEVICES,
    then HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES): see _simgpu."""
    import _simgpu
    return _simgpu.hip_list()


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
        import _simgpu
        self.multi_processor_count = _simgpu.cu(idx, node)     # per GPU: partition modes differ
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
