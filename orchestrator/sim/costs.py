"""What a real node charges, as the simulated node sleeps it (issue 26). Stdlib only: the node runs it too
(copied to ``aiter/_sim/costs.py``).

Real costs (issue 26; an H200 with 16 cores, the same order as MI300X/MI355X): ``import torch`` 3.4 s, a
whole one-shape benchmark process 4.2 s (so aiter's import + HIP init ~0.8 s), a cold ninja build of a
27-instance CK module 57.9 s, ``module_aiter_enum``-like small modules 8-20 s. The simulator sleeps
``real seconds x AITER_SIM_COST_SCALE`` (ONE factor, read from the environment of each process; the test
bed and the demo set it from ``SimSpec.cost_scale``, a fast default; unset or 0 = free, as before).
``projected real seconds = simulated seconds / scale``.
"""

import json
import os
import time

SCALE_ENV = "AITER_SIM_COST_SCALE"
LOG_ENV = "AITER_SIM_COST_LOG"    # where each charge is appended as a JSON line (the node's sim/costs.jsonl)
DEFAULT_SCALE = 0.001           # SimSpec's default: a 27-instance build sleeps 58 ms, a process start 4 ms

IMPORT_TORCH_S = 3.4            # python + import torch
AITER_IMPORT_S = 0.8            # import aiter + HIP init (4.2 s whole process - 3.4 s torch)
PROCESS_START_S = IMPORT_TORCH_S + AITER_IMPORT_S
BUILD_BASE_S = 3.5              # codegen, dispatch + pybind TUs, link
BUILD_PER_INSTANCE_S = 2.0      # one CK instance (27 instances -> 57.5 s, measured 57.9 s)
SMALL_MODULE_S = 12.0           # a module not generated from a tuned table (module_aiter_enum: 8-20 s)


def scale(env=None):
    """The cost scale factor of this process (0.0 when unset or invalid: nothing sleeps)."""
    raw = (os.environ if env is None else env).get(SCALE_ENV, "")
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        return 0.0
    return value if value > 0 else 0.0


def build_s(instances):
    """Real seconds of a cold build of a module with ``instances`` CK instances (None/0 = a small module
    such as module_aiter_enum, not generated from a tuned table)."""
    if not instances:
        return SMALL_MODULE_S
    return BUILD_BASE_S + BUILD_PER_INSTANCE_S * int(instances)


def charge(real_seconds, what, env=None):
    """Sleep ``real_seconds`` scaled and record the charge (``what``: "import torch", "import aiter",
    "build <module>"); returns the seconds slept."""
    env = os.environ if env is None else env
    s = real_seconds * scale(env)
    if s > 0:
        time.sleep(s)
    log = env.get(LOG_ENV)
    if log:
        try:
            with open(log, "a") as fh:
                fh.write(json.dumps({"what": what, "real_s": real_seconds, "slept_s": s, "pid": os.getpid(),
                                     "t": time.time()}) + "\n")
        except OSError:
            pass
    return s


def summary(lines):
    """Counts and projected real seconds of a cost log's lines (dicts): builds, process starts."""
    builds = [x for x in lines if str(x.get("what", "")).startswith("build ")]
    starts = [x for x in lines if x.get("what") == "import torch"]
    return {"builds": len(builds), "process_starts": len(starts),
            "modules": sorted({x["what"][len("build "):] for x in builds}),
            "real_s": round(sum(float(x.get("real_s") or 0) for x in lines), 1)}
