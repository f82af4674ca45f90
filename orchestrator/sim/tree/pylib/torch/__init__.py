"""Minimal stand-in for PyTorch on the simulated AITER node (no GPU, stdlib only).

Only what the simulated AITER scripts and a node probe need: dtype objects whose repr is
``torch.bfloat16``, ``torch.cuda.device_count()`` honouring HIP/CUDA/ROCR_VISIBLE_DEVICES, and
``torch.cuda.get_device_properties(i).multi_processor_count``.
"""

__version__ = "2.9.0+rocm7.1.0.sim"

try:  # a real `import torch` costs seconds (the node's cost model, sim/costs.py)
    import _simcosts
    _simcosts.charge(_simcosts.IMPORT_TORCH_S, "import torch")
except ImportError:  # pragma: no cover - outside a simulated node
    pass


class dtype(object):
    __slots__ = ("_name", "itemsize", "is_floating_point")

    def __init__(self, name, itemsize, is_floating_point):
        self._name = name
        self.itemsize = itemsize
        self.is_floating_point = is_floating_point

    def __repr__(self):
        return "torch." + self._name

    __str__ = __repr__

    def __reduce__(self):
        return (getattr, (__import__("torch"), self._name))


float32 = float = dtype("float32", 4, True)
float64 = double = dtype("float64", 8, True)
float16 = half = dtype("float16", 2, True)
bfloat16 = dtype("bfloat16", 2, True)
float8_e4m3fn = dtype("float8_e4m3fn", 1, True)
float8_e4m3fnuz = dtype("float8_e4m3fnuz", 1, True)
float8_e5m2 = dtype("float8_e5m2", 1, True)
float8_e5m2fnuz = dtype("float8_e5m2fnuz", 1, True)
float8_e8m0fnu = dtype("float8_e8m0fnu", 1, True)
float4_e2m1fn_x2 = dtype("float4_e2m1fn_x2", 1, True)
int4 = dtype("int4", 1, False)
int8 = dtype("int8", 1, False)
uint8 = dtype("uint8", 1, False)
int16 = dtype("int16", 2, False)
int32 = int = dtype("int32", 4, False)
int64 = long = dtype("int64", 8, False)
bool = dtype("bool", 1, False)

from . import cuda  # noqa: E402,F401
from . import version  # noqa: E402,F401
