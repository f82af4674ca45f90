"""GPU facts for discover (C-02, R-09, C-13; issue 12: partition mode and cu_num per GPU).

Two numberings exist in a container:
  * physical: rocm-smi's GPU[i] / amd-smi's "gpu": i. Both read sysfs, which a container does not
    filter: they list every GPU of the host, busy serving GPUs of other containers included.
  * logical: what HIP_VISIBLE_DEVICES means. ROCr enumerates only the GPUs whose device nodes the
    container can open, filtered by ROCR_VISIBLE_DEVICES; HIP indexes into that list (rocminfo prints
    exactly that list, in that order, each agent with its PCI BDFID).
Physical GPUs are matched to rocminfo's agents by PCI bus id. The tuner's environment sets
HIP_VISIBLE_DEVICES itself (over the container's own HIP/CUDA_VISIBLE_DEVICES), so the logical index
we hand out is the ROCr index, and only GPUs inside the container's own HIP set are offered.

"Free" = visible, low use AND low VRAM AND no KFD process, over a few samples, and not reserved by
another running tune-remote job (locks.py, gpu-<physical>.lock). Unknown is never "busy".

The later samples catch a burst of use the first one missed. A burst needs a process on the GPU, and every
such process is in KFD's list, /sys/class/kfd/kfd/proc/<pid> (sysfs: a container sees the host's whole list).
When that list can be read and the smi tool attributed each of its processes to GPUs (rocm-smi
--showpidgpus; amd-smi sees only the processes it may read), the first sample already saw every user of
every GPU: the other samples are skipped (issue 9: real rocm-smi takes ~0.5 s a call). A GPU idle then can
turn busy only by a process started meanwhile, which no sample window rules out.
"""

import json
import os
import re
import threading
import time

from .common import run_tool, which_tool

USE_RE = re.compile(r"GPU\[(\d+)\]\s*:\s*GPU use \(%\):\s*(\d+)")
VRAM_RE = re.compile(r"GPU\[(\d+)\]\s*:\s*GPU (?:Memory Allocated \(VRAM%\)|memory use \(%\)):\s*(\d+)")
BUS_RE = re.compile(r"GPU\[(\d+)\]\s*:\s*PCI Bus:\s*([0-9A-Fa-f]{4}:)?([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
PIDGPUS_RE = re.compile(r"PID\s+(\d+)\s+is using\s+(\d+)\s+DRM device\(s\):?[ \t]*\n?([\d \t]*)")
PART_RE = re.compile(r"GPU\[(\d+)\]\s*:\s*Compute Partition:\s*([A-Z]+)")
VRAM_FREE_BELOW_PCT = 10        # a serving GPU idle between requests still holds most of its memory
KFD_PROC = "/sys/class/kfd/kfd/proc"    # TUNE_REMOTE_KFD_PROC_DIR: a simulated node's stand-in


def kfd_pids():
    """PIDs of every process holding a GPU on this host (KFD's sysfs list), or None when it cannot be read."""
    try:
        return set(int(n) for n in os.listdir(os.environ.get("TUNE_REMOTE_KFD_PROC_DIR") or KFD_PROC)
                   if n.isdigit())
    except OSError:
        return None


def bus_of(bdf):
    """'0000:05:00.0' / '05:00.0' -> '05:00.0' (lower case); None for anything else."""
    m = re.search(r"([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$", str(bdf or ""))
    return m.group(1).lower() if m else None


def rocm_version(rocminfo_path):
    """ROCm's ``.info/version`` ($ROCM_PATH, /opt/rocm, or the tree rocminfo is in), None when none is found."""
    roots = [os.environ.get("ROCM_PATH"), "/opt/rocm",
             os.path.dirname(os.path.dirname(os.path.realpath(rocminfo_path))) if rocminfo_path else None]
    for root in roots:
        try:
            with open(os.path.join(root, ".info", "version")) as fh:
                return fh.read().strip() or None
        except (OSError, TypeError):
            continue
    return None


def rocminfo_gpus(text):
    """GPU agents in ROCr order: [{"gfx", "cu", "name", "bus", "uuid"}]."""
    agents = []
    for block in re.split(r"Agent\s*\d+", text or ""):
        if not re.search(r"Device Type:\s*GPU", block):
            continue
        a = {"gfx": None, "cu": None, "name": None, "bus": None, "uuid": None, "device_id": None}
        m = re.search(r"\b(gfx\w+)\b", block)
        a["gfx"] = m.group(1) if m else None
        m = re.search(r"Compute Unit\s*:\s*(\d+)", block)
        a["cu"] = int(m.group(1)) if m else None
        m = re.search(r"Marketing Name:\s*(.+)", block)
        a["name"] = m.group(1).strip() if m else None
        m = re.search(r"BDFID:\s*(\d+)", block)
        if m:
            v = int(m.group(1))
            a["bus"] = "%02x:%02x.%x" % (v >> 8 & 0xff, v >> 3 & 0x1f, v & 7)
        m = re.search(r"Uuid:\s*(GPU-\w+)", block)
        a["uuid"] = m.group(1) if m else None
        m = re.search(r"Chip ID:\s*\d+\((0x[0-9a-fA-F]+)\)", block)   # the PCI device id (MI300X 0x74a1)
        a["device_id"] = m.group(1).lower() if m else None
        agents.append(a)
    return agents


def _num(v):
    """amd-smi values: 12, "12", {"value": 12, "unit": "%"}, "N/A" -> float or None."""
    if isinstance(v, dict):
        v = v.get("value")
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _amd_json(tool, args, problems):
    out, problem = run_tool([tool] + args + ["--json"])
    if problem:
        problems.append(problem)
    try:
        data = json.loads(out or "")
    except ValueError:
        if out is not None and not problem:
            problems.append("amd-smi %s --json printed no JSON" % " ".join(args))
        return []
    if isinstance(data, dict):               # newer amd-smi wraps the list: {"gpu_data": [...]}
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    return [d for d in data if isinstance(d, dict) and "gpu" in d]


def _amd_static(tool, problems, gpus):
    for d in _amd_json(tool, ["list"], problems):
        g = gpus.setdefault(int(d["gpu"]), {})
        g["bus"] = bus_of(d.get("bdf")) or g.get("bus")
    for d in _amd_json(tool, ["static", "--asic", "--partition"], problems):
        g = gpus.setdefault(int(d["gpu"]), {})
        asic, part = d.get("asic") or {}, d.get("partition") or {}
        cu = _num(asic.get("num_compute_units")) if isinstance(asic, dict) else None
        if cu:
            g["cu"] = int(cu)
        if isinstance(part, dict):
            mode = part.get("compute_partition") or part.get("accelerator_partition") \
                or part.get("current_compute_partition")
            if isinstance(mode, str) and mode.strip() and mode.strip() != "N/A":
                g["partition"] = mode.strip()
            mem = part.get("memory_partition") or part.get("current_memory_partition")
            if isinstance(mem, str) and mem.strip() and mem.strip() != "N/A":
                g["memory_partition"] = mem.strip()


def _amd_sample(tool, problems, gpus):
    for d in _amd_json(tool, ["metric", "--usage", "--mem-usage"], problems):
        g = gpus.setdefault(int(d["gpu"]), {})
        use = _num((d.get("usage") or {}).get("gfx_activity")) if isinstance(d.get("usage"), dict) else None
        mem = d.get("mem_usage") if isinstance(d.get("mem_usage"), dict) else {}
        used, total = _num(mem.get("used_vram")), _num(mem.get("total_vram"))
        if use is not None:
            g.setdefault("use", []).append(use)
        if used is not None and total:
            g.setdefault("vram", []).append(100.0 * used / total)
    for d in _amd_json(tool, ["process"], problems):
        g = gpus.setdefault(int(d["gpu"]), {})
        pids = g.setdefault("pids", set())
        for p in d.get("process_list") or []:
            info = p.get("process_info") if isinstance(p, dict) else None
            if isinstance(info, dict) and _num(info.get("pid")):
                pids.add(int(_num(info["pid"])))


def _smi_sample(tool, problems, gpus):
    out, problem = run_tool([tool, "--showuse", "--showmemuse", "--showbus", "--showpidgpus"])
    if not USE_RE.search(out or ""):          # an older rocm-smi refusing a flag: use alone
        out, problem = run_tool([tool, "--showuse"])
    if problem:
        problems.append(problem)
    for m in USE_RE.finditer(out or ""):
        gpus.setdefault(int(m.group(1)), {}).setdefault("use", []).append(float(m.group(2)))
    for m in VRAM_RE.finditer(out or ""):
        gpus.setdefault(int(m.group(1)), {}).setdefault("vram", []).append(float(m.group(2)))
    for m in BUS_RE.finditer(out or ""):
        gpus.setdefault(int(m.group(1)), {})["bus"] = m.group(3).lower()
    for m in PIDGPUS_RE.finditer(out or ""):
        for i in m.group(3).split():
            gpus.setdefault(int(i), {}).setdefault("pids", set()).add(int(m.group(1)))
    return out is not None and bool(USE_RE.search(out or ""))


def _hip_set(agents, env):
    """ROCr indices the container's own HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES) allows, like HIP:
    indices or GPU- uuids, stopping at the first invalid entry. None = no restriction."""
    val = env.get("HIP_VISIBLE_DEVICES")
    if val is None:
        val = env.get("CUDA_VISIBLE_DEVICES")
    if val is None:
        return None
    out = []
    for part in val.split(","):
        part = part.strip()
        uuids = [i for i, a in enumerate(agents) if a.get("uuid") and a["uuid"] == part]
        if part.isdigit() and int(part) < len(agents):
            out.append(int(part))
        elif uuids:
            out.append(uuids[0])
        else:
            break
    return out


def _map(agents, gpus, env, problems):
    """physical -> ROCr index for the GPUs HIP can use here; None when it cannot be told."""
    buses = [a["bus"] for a in agents]
    phys_bus = {p: g.get("bus") for p, g in gpus.items()}
    if all(buses) and len(set(buses)) == len(buses) and all(phys_bus.values()) \
            and len(set(phys_bus.values())) == len(phys_bus):
        by_bus = {b: i for i, b in enumerate(buses)}
        mapping = {p: by_bus[b] for p, b in phys_bus.items() if b in by_bus}
    elif len(agents) == len(gpus) and not env.get("ROCR_VISIBLE_DEVICES"):
        mapping = {p: i for i, p in enumerate(sorted(gpus))}   # same enumeration, nothing filtered
    else:
        problems.append("cannot match rocm-smi/amd-smi GPUs to the %d GPU(s) HIP sees in this container (no PCI "
                        "bus ids); free GPUs not computed" % len(agents))
        return None
    allowed = _hip_set(agents, env)
    if allowed is not None:
        mapping = {p: i for p, i in mapping.items() if i in allowed}
    return mapping


def _every_user_seen(gpus):
    """The first sample saw every process on every GPU (module docstring): KFD's list is readable and each
    of its processes is one the smi tool attributed to GPUs (an empty list: nothing uses any GPU)."""
    kfd = kfd_pids()
    if kfd is None or not any(g.get("use") for g in gpus.values()):
        return False
    seen = set()
    for g in gpus.values():
        seen.update(g.get("pids") or ())
    return kfd <= seen


def _sample(smi, amd, problems, gpus, samples, interval, early_exit):
    """Up to `samples` readings of rocm-smi (else amd-smi) into gpus; how many were taken."""
    first = time.monotonic()
    taken = 0
    for n in range(max(1, int(samples))):
        if n:   # samples START `interval` apart: a slow smi (real rocm-smi takes ~0.5 s) is not waited for twice
            time.sleep(max(0.0, first + n * interval - time.monotonic()))
        if smi is not None:
            ok = _smi_sample(smi, problems if n == 0 else [], gpus)
            if not ok and n == 0:
                problems.append("rocm-smi --showuse printed no 'GPU[i] : GPU use (%)' line")
        elif amd is not None:
            _amd_sample(amd, problems if n == 0 else [], gpus)
        else:
            break                       # nothing to sample (a problem says so)
        taken += 1
        if n == 0 and early_exit and _every_user_seen(gpus):
            break
    return taken


def _in_use(g, busy_threshold):
    """Why one sampled GPU is in use (the free rule: use, VRAM, a KFD process); [] when it is not."""
    use, vram, pids = g.get("use") or [], g.get("vram") or [], sorted(g.get("pids") or ())
    why = []
    if use and max(use) >= busy_threshold:
        why.append("use %d%%" % max(use))
    if vram and max(vram) >= VRAM_FREE_BELOW_PCT:
        why.append("VRAM %d%% used" % max(vram))
    if pids:
        why.append("KFD process(es) %s" % ",".join(map(str, pids)))
    return why


def in_use(physical, busy_threshold, samples=3, interval=0.25):
    """{gpu: [why]} for those of the given physical GPUs something uses now, by discover's free rule without
    the container mapping (a chained run about to take GPUs discover already chose); {} when none is, or
    when no smi tool answers (unknown is never busy). Reservations are not looked at (locks.py)."""
    gpus = {}
    _sample(which_tool("rocm-smi"), which_tool("amd-smi"), [], gpus, samples, interval, True)
    out = {}
    for p in sorted(set(int(x) for x in physical)):
        why = _in_use(gpus.get(p) or {}, busy_threshold)
        if why:
            out[p] = why
    return out


def gpu_facts(problems, busy_threshold, samples=3, interval=0.25, env=None, early_exit=True):
    """rocminfo + rocm-smi (or amd-smi) -> facts; see the module docstring."""
    env = dict(os.environ if env is None else env)
    facts = {"gfx": None, "cu_num": None, "gpu_count": None, "gpu_name": None, "gpu_use": {},
             "free_gpus": None, "gpu_map": None, "gpus": {}}
    agents = []
    tool = which_tool("rocminfo")
    rocminfo = {}
    if tool is not None:     # ROCr applies ROCR_VISIBLE_DEVICES + device nodes; runs while the samples are taken
        runner = threading.Thread(target=lambda: rocminfo.update(r=run_tool([tool], env=env)), daemon=True)
        runner.start()
    smi, amd = which_tool("rocm-smi"), which_tool("amd-smi")
    gpus = {}
    if amd is not None:
        _amd_static(amd, problems, gpus)
    if smi is None and amd is None:
        problems.append("rocm-smi not found (nor amd-smi): GPU use unknown, free_gpus not computed")
    facts["gpu_samples"] = _sample(smi, amd, problems, gpus, samples, interval, early_exit)
    if tool is None:
        problems.append("rocminfo not found on PATH or in /opt/rocm/bin: gfx, cu_num, gpu_count unknown")
    else:
        runner.join()
        out, problem = rocminfo["r"]
        if problem:
            problems.append(problem)
        agents = rocminfo_gpus(out)
        facts["gpu_count"] = len(agents) if out else None
        gfx = [a["gfx"] for a in agents if a["gfx"]]
        g = re.search(r"\b(gfx\w+)\b", out or "")       # aiter's get_gfx_runtime: first gfx name anywhere
        facts["gfx"] = gfx[0] if gfx else (g.group(1) if g else None)
        names = [a["name"] for a in agents if a["name"]]
        facts["gpu_name"] = names[0] if names else None
        ids = [a["device_id"] for a in agents if a["device_id"]]
        facts["gpu_device_id"] = ids[0] if ids else None
        facts["rocm_version"] = rocm_version(tool)
        if out and not agents:
            problems.append("rocminfo lists no GPU agent")
    mapping = _map(agents, gpus, env, problems) if gpus and agents else None
    if not gpus and agents:                      # no smi at all: rocminfo order, use unknown
        mapping = {i: i for i in range(len(agents))}
    cus = {}
    for p, g in sorted(gpus.items()):
        logical = mapping.get(p) if mapping else None
        cu = g.get("cu")
        if cu is None and logical is not None and agents[logical]["cu"] is not None:
            cu = agents[logical]["cu"]
        cus[p] = cu
        use, vram, pids = g.get("use") or [], g.get("vram") or [], sorted(g.get("pids") or ())
        why = ["not visible in this container"] if mapping is not None and logical is None else []
        why += _in_use(g, busy_threshold)
        facts["gpus"][str(p)] = {"logical": logical, "bus": g.get("bus"), "use": max(use) if use else None,
                                 "vram_pct": round(max(vram), 1) if vram else None, "pids": pids, "cu": cu,
                                 "partition": g.get("partition"), "memory_partition": g.get("memory_partition"),
                                 "busy": why}
        if use:
            facts["gpu_use"][str(p)] = int(max(use))
    if mapping is not None:
        facts["gpu_map"] = {str(p): i for p, i in sorted(mapping.items())}
    if any(g.get("use") for g in gpus.values()) and mapping is not None:
        facts["free_gpus"] = sorted(int(p) for p, g in facts["gpus"].items()
                                    if not g["busy"] and g["use"] is not None)
    if not gpus and agents:
        cus = {i: a["cu"] for i, a in enumerate(agents)}
    known = [cus.get(p) for p in range(max(cus) + 1)] if cus else []
    if known and any(c is not None for c in known):
        facts["gpu_cu_nums"] = known    # per physical GPU (None: not known here), partition modes differ
        vis = [c for p, c in cus.items() if c is not None and (mapping is None or p in mapping)] \
            or [c for c in known if c is not None]
        facts["cu_num"] = vis[0]
        if len({c for c in known if c is not None}) > 1:
            facts["cu_nums"] = known
            problems.append("GPUs report different Compute Unit counts %s (partition mode?); "
                            "aiter asserts they are equal" % sorted({c for c in known if c is not None}))
    parts = {g.get("partition") for g in gpus.values() if g.get("partition")}
    if parts:
        facts["partitions"] = {str(p): g.get("partition") for p, g in sorted(gpus.items())}
    return facts
