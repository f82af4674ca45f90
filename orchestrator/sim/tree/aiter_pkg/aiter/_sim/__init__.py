"""Simulation plumbing of the simulated AITER node (not part of real AITER).

Everything is located relative to this file, so the node works wherever it is mounted:
``<target>/aiter/aiter/_sim`` (develop) or ``<target>/site-packages/aiter/_sim`` (install); the node's
own files live in ``<target>/sim/`` (node.json, control.json, launches.jsonl).
"""

import json
import os
import time

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # .../aiter (package)
AITER_ROOT_DIR = os.path.dirname(PKG_DIR)                                   # checkout or site-packages
TARGET = os.path.dirname(AITER_ROOT_DIR)
SIM_DIR = os.path.join(TARGET, "sim")
NODE_JSON = os.path.join(SIM_DIR, "node.json")

_node = None


def node():
    global _node
    if _node is None:
        with open(NODE_JSON) as fh:
            _node = json.load(fh)
    return _node


PROFILE = "current"
try:
    PROFILE = node()["profile"]
except (OSError, ValueError, KeyError):  # pragma: no cover - node.json missing
    pass
LEGACY = PROFILE == "legacy"
NEWEST = PROFILE in ("newest", "head")   # head = newest + the v0.1.30/HEAD forms
HEAD = PROFILE == "head"


def control_path():
    return os.path.join(SIM_DIR, "control.json")


def launches_path():
    return os.path.join(SIM_DIR, "launches.jsonl")


def read_control():
    """The fault-injection / pacing control file, re-read on every call."""
    d = {"seconds_per_shape": float(node().get("seconds_per_shape", 0.0) or 0.0),
         "crash_after_shapes": None, "hang_after_shapes": None, "fault_once": False,
         "build_seconds": 0.0}
    try:
        with open(control_path()) as fh:
            user = json.load(fh)
        if isinstance(user, dict):
            d.update({k: v for k, v in user.items()})
    except (OSError, ValueError):
        pass
    return d


def clear_fault(key):
    """With fault_once, a fault that fired is removed from the control file (atomically)."""
    try:
        with open(control_path()) as fh:
            cur = json.load(fh)
    except (OSError, ValueError):
        return
    cur[key] = None
    tmp = control_path() + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as fh:
        json.dump(cur, fh)
    os.replace(tmp, control_path())


def physical_gpus():
    """The host's GPUs this process's HIP runtime got, in HIP order (see pylib/_simgpu.py)."""
    try:
        import _simgpu
        return _simgpu.hip_list()
    except ImportError:  # pragma: no cover - pylib not on the path
        return None


def record_launch(script, argv):
    _append_record(launches_path(), {
        "script": os.path.abspath(script), "argv": list(argv), "pid": os.getpid(),
        "time": time.time(), "cwd": os.getcwd(),
        "hip_visible_devices": os.environ.get("HIP_VISIBLE_DEVICES"), "physical_gpus": physical_gpus()})


def record_stall(done_in_run):
    """The test bed's proof that a hang fault fired: this tuner now sleeps forever (stalls.jsonl)."""
    _append_record(os.path.join(SIM_DIR, "stalls.jsonl"),
                   {"pid": os.getpid(), "time": time.time(), "done_in_run": done_in_run})


def _append_record(path, rec):
    line = json.dumps(rec) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


_NOISE_CALLS = {}
_NOISE_PROCESS = []


def _noise_process():
    """This process's index among the node's benchmark processes (one line per process in the sim dir)."""
    if not _NOISE_PROCESS:
        path = os.path.join(SIM_DIR, "noise_processes.log")
        _append_record(path, {"pid": os.getpid()})
        with open(path) as fh:
            _NOISE_PROCESS.append(sum(1 for _ in fh) - 1)
    return _NOISE_PROCESS[0]


def measured_us(variant, shape, gfx, cu_num, tuned_from=None):
    """What one benchmark run measures: the perf model's time, plus run-to-run noise when the control
    file sets ``bench_noise_pct`` (uniform in +-pct; off by default, so values match the model exactly),
    or ``bench_noise: "measured"`` (+ ``bench_noise_seed``): the real GPU's noise (noise_model.py);
    ``tuning_changes_nothing``: an A/A node, whose tuned rows run exactly as the untuned kernel.
    Real fleets drift by several percent at small M, so tests of noise-aware verdicts turn it on."""
    from . import perf_model
    ctl = read_control()
    if ctl.get("tuning_changes_nothing"):    # an A/A node (issue 37): every row runs as the untuned kernel
        tuned_from = None
    us = perf_model.bench_us(variant, shape, gfx, cu_num, tuned_from)
    upgrade = node().get("upgrade")          # sim/upgrade.py: a new AITER under which some rows got slower
    if upgrade and tuned_from is not None:
        from . import upgrade as _upgrade
        us = _upgrade.upgraded_us(variant, shape, gfx, cu_num, tuned_from, upgrade["version"], us)
    if ctl.get("bench_noise") == "measured":   # sim/noise_model.py: the real GPU's measured noise
        from . import noise_model, perf_model as _pm
        key = _pm._canon(variant, shape, gfx, cu_num)
        call = _NOISE_CALLS[key] = _NOISE_CALLS.get(key, -1) + 1
        return noise_model.noisy_us(us, key, noise_model.size_of(shape), int(ctl.get("bench_noise_seed") or 0),
                                    _noise_process(), call)
    pct = float(ctl.get("bench_noise_pct") or 0.0)
    if pct > 0:
        import random
        us = round(us * (1.0 + random.SystemRandom().uniform(-pct, pct) / 100.0), 4)
    return us
