"""GPU discovery on the node (nodeside/gpus.py, C-02/R-09, issue 12): physical -> logical mapping, what
counts as free, amd-smi's JSON shapes. The tools are stubbed; the e2e tests run the simulated ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.nodeside import gpus

AGENT = "Agent {n}\n  Name: gfx942\n  Uuid: GPU-{n:016x}\n  Device Type: GPU\n  BDFID: {bdf}\n  Compute Unit: {cu}\n"


def rocminfo(buses, cu=304):
    return "".join(AGENT.format(n=i + 2, bdf=b << 8, cu=cu) for i, b in enumerate(buses))


def smi(use, vram=None, buses=None, pids=None):
    out = "".join("GPU[%d]\t\t: GPU use (%%): %d\n" % (i, u) for i, u in enumerate(use))
    out += "".join("GPU[%d] : GPU Memory Allocated (VRAM%%): %d\n" % (i, v) for i, v in enumerate(vram or []))
    out += "".join("GPU[%d]\t\t: PCI Bus: 0000:%02X:00.0\n" % (i, b) for i, b in enumerate(buses or []))
    out += "===== GPUs Indexed by PID =====\n"
    for pid, devs in (pids or {}).items():
        out += "PID %d is using %d DRM device(s):\n%s \n" % (pid, len(devs), " ".join(map(str, devs)))
    return out


@pytest.fixture
def tools(monkeypatch):
    answers = {}

    def run_tool(argv, timeout=30.0, env=None):
        name = argv[0].rsplit("/", 1)[-1]
        key = name if name != "amd-smi" else "amd-smi " + argv[1]
        return answers.get(key), None

    monkeypatch.setattr(gpus, "run_tool", run_tool)
    monkeypatch.setattr(gpus, "which_tool", lambda t: "/bin/" + t if any(k.split()[0] == t for k in answers) else None)
    monkeypatch.setattr(gpus.time, "sleep", lambda s: None)
    return answers


BUSES = [0x05, 0x26, 0x46, 0x65]


def test_physical_gpus_map_to_rocr_indices_by_pci_bus(tools):
    # the container opens only GPUs 1 and 3: rocminfo lists those two, renumbered 0 and 1
    tools["rocminfo"] = rocminfo([BUSES[1], BUSES[3]])
    tools["rocm-smi"] = smi([0, 0, 97, 0], vram=[0, 0, 80, 0], buses=BUSES)
    problems = []
    f = gpus.gpu_facts(problems, 10, env={})
    assert f["gpu_map"] == {"1": 0, "3": 1} and f["free_gpus"] == [1, 3], problems
    assert f["gpus"]["0"]["busy"] == ["not visible in this container"]
    assert f["gpu_cu_nums"] == [None, 304, None, 304] and f["cu_num"] == 304


def test_the_containers_hip_visible_devices_limits_the_choice(tools):
    tools["rocminfo"] = rocminfo(BUSES)
    tools["rocm-smi"] = smi([0, 0, 0, 0], buses=BUSES)
    f = gpus.gpu_facts([], 10, env={"HIP_VISIBLE_DEVICES": "2,3,9,1"})     # HIP stops at the invalid 9
    assert f["gpu_map"] == {"2": 2, "3": 3} and f["free_gpus"] == [2, 3]
    f = gpus.gpu_facts([], 10, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert f["free_gpus"] == [1]


@pytest.mark.parametrize("vram,pids,free", [([0, 55, 0, 0], {}, [0, 2, 3]),
                                             ([0, 0, 0, 0], {4242: [3]}, [0, 1, 2]),
                                             ([0, 9, 0, 0], {}, [0, 1, 2, 3])])
def test_free_means_low_use_low_vram_and_no_kfd_process(tools, vram, pids, free):
    tools["rocminfo"] = rocminfo(BUSES)
    tools["rocm-smi"] = smi([0, 0, 0, 0], vram=vram, buses=BUSES, pids=pids)
    assert gpus.gpu_facts([], 10, env={})["free_gpus"] == free


def test_without_bus_ids_a_filtered_container_is_unknown_not_guessed(tools):
    tools["rocminfo"] = rocminfo([BUSES[0], BUSES[1]]).replace("BDFID", "XBDF")
    tools["rocm-smi"] = smi([0, 0, 0, 0])
    problems = []
    f = gpus.gpu_facts(problems, 10, env={})
    assert f["free_gpus"] is None and any("cannot match" in p for p in problems)
    tools["rocminfo"] = rocminfo(BUSES).replace("BDFID", "XBDF")        # same count, nothing filtered
    assert gpus.gpu_facts([], 10, env={})["free_gpus"] == [0, 1, 2, 3]


def test_amd_smi_json_in_both_shapes_with_partition_and_cu_num(tools):
    tools["rocminfo"] = rocminfo(BUSES, cu=38)
    tools["amd-smi list"] = json.dumps({"gpu_data": [{"gpu": i, "bdf": "0000:%02x:00.0" % b}
                                                     for i, b in enumerate(BUSES)]})
    tools["amd-smi static"] = json.dumps([{"gpu": i, "asic": {"num_compute_units": 38},
                                           "partition": {"compute_partition": "CPX", "memory_partition": "NPS4"}}
                                          for i in range(4)])
    tools["amd-smi metric"] = json.dumps([{"gpu": i, "usage": {"gfx_activity": {"value": u, "unit": "%"}},
                                           "mem_usage": {"total_vram": {"value": 1000, "unit": "MB"},
                                                         "used_vram": {"value": m, "unit": "MB"}}}
                                          for i, (u, m) in enumerate([(0, 10), (99, 900), (0, 500), ("N/A", 0)])])
    tools["amd-smi process"] = json.dumps([{"gpu": 0, "process_list": [{"process_info": "No running processes"}]},
                                           {"gpu": 3, "process_list": []}])
    problems = []
    f = gpus.gpu_facts(problems, 10, env={})
    assert f["free_gpus"] == [0], (f["gpus"], problems)     # 1 busy, 2 holds VRAM, 3 has no use reading
    assert f["partitions"] == {"0": "CPX", "1": "CPX", "2": "CPX", "3": "CPX"}
    assert f["gpus"]["0"]["memory_partition"] == "NPS4" and f["gpu_cu_nums"] == [38] * 4


def test_samples_start_an_interval_apart_however_slow_the_smi_is(tools, monkeypatch):
    """Real rocm-smi takes ~0.5 s a call: 3 samples 0.25 s apart must not cost 3 calls + 2 full sleeps."""
    clock = [100.0]
    starts = []
    tools["rocm-smi"] = smi([0, 0])
    monkeypatch.setenv("TUNE_REMOTE_KFD_PROC_DIR", "/nonexistent")   # KFD list unknown: every sample

    def run_tool(argv, timeout=30.0, env=None):
        if argv[0].endswith("rocm-smi"):
            starts.append(round(clock[0] - 100.0, 3))
            clock[0] += 0.2     # each call takes 0.2 s
        return tools.get(argv[0].rsplit("/", 1)[-1]), None

    monkeypatch.setattr(gpus, "run_tool", run_tool)
    monkeypatch.setattr(gpus.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(gpus.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    gpus.gpu_facts([], 10, samples=3, interval=0.25, env={})
    assert starts == [0.0, 0.25, 0.5]


def _changing_smi(tools, monkeypatch, outputs):
    """rocm-smi answers the outputs in turn (the last one again), counting the calls."""
    calls = []

    def run_tool(argv, timeout=30.0, env=None):
        name = argv[0].rsplit("/", 1)[-1]
        if name == "rocm-smi":
            calls.append(argv)
            return outputs[min(len(calls), len(outputs)) - 1], None
        return tools.get(name), None

    monkeypatch.setattr(gpus, "run_tool", run_tool)
    tools["rocm-smi"] = outputs[0]
    return calls


@pytest.fixture
def kfd(tmp_path, monkeypatch):
    """KFD's sysfs process list (/sys/class/kfd/kfd/proc/<pid>) as a directory; remove it for 'unreadable'."""
    d = tmp_path / "kfd-proc"
    d.mkdir()
    monkeypatch.setenv("TUNE_REMOTE_KFD_PROC_DIR", str(d))
    return d


def test_one_sample_when_the_smi_attributed_every_kfd_process(tools, monkeypatch, kfd):
    """Every user of every GPU is in KFD's list: when rocm-smi attributed each of them, the first sample saw
    them all, and the later ones are skipped (issue 9); a GPU busy by use or process stays busy."""
    (kfd / "77").mkdir()
    tools["rocminfo"] = rocminfo(BUSES)
    calls = _changing_smi(tools, monkeypatch, [smi([0, 0, 95, 0], buses=BUSES, pids={77: [3]}),
                                               smi([99, 99, 99, 99], buses=BUSES)])
    f = gpus.gpu_facts([], 10, env={})
    assert len(calls) == 1 and f["gpu_samples"] == 1
    assert f["free_gpus"] == [0, 1]
    assert f["gpus"]["2"]["busy"] == ["use 95%"] and f["gpus"]["3"]["busy"] == ["KFD process(es) 77"]


@pytest.mark.parametrize("case", ["unreadable", "unattributed"])
def test_every_sample_unless_every_kfd_process_was_attributed(tools, monkeypatch, kfd, case):
    """KFD's list unreadable, or holding a process the smi did not attribute (rocm-smi's 'Unable to get list
    of KFD PIDs', amd-smi not seeing another container's process): a GPU busy in a later sample only is busy."""
    if case == "unreadable":
        kfd.rmdir()
    else:
        (kfd / "4242").mkdir()
    tools["rocminfo"] = rocminfo(BUSES)
    quiet = smi([0, 0, 0, 0], buses=BUSES) + "Unable to get list of KFD PIDs. A kernel update may be needed.\n"
    calls = _changing_smi(tools, monkeypatch, [quiet, quiet, smi([0, 80, 0, 0], buses=BUSES)])
    f = gpus.gpu_facts([], 10, env={})
    assert len(calls) == 3 and f["gpu_samples"] == 3
    assert f["free_gpus"] == [0, 2, 3] and f["gpus"]["1"]["busy"] == ["use 80%"]


def test_amd_smi_one_sample_only_when_it_saw_every_kfd_process(tools, kfd):
    """amd-smi lists only the processes it may read (not another container's): with such a process in KFD's
    list every sample is taken; with none on the host, one is enough."""
    tools["rocminfo"] = rocminfo(BUSES[:2])
    tools["amd-smi list"] = json.dumps([{"gpu": i, "bdf": "0000:%02x:00.0" % b} for i, b in enumerate(BUSES[:2])])
    tools["amd-smi static"] = json.dumps([])
    tools["amd-smi metric"] = json.dumps([{"gpu": i, "usage": {"gfx_activity": 0}} for i in range(2)])
    tools["amd-smi process"] = json.dumps([{"gpu": 0, "process_list": []}, {"gpu": 1, "process_list": []}])
    assert gpus.gpu_facts([], 10, env={})["gpu_samples"] == 1
    (kfd / "31337").mkdir()
    assert gpus.gpu_facts([], 10, env={})["gpu_samples"] == 3


def test_no_smi_tool_takes_no_sample_and_waits_for_none(tools, monkeypatch, kfd):
    slept = []
    monkeypatch.setattr(gpus.time, "sleep", slept.append)
    tools["rocminfo"] = rocminfo(BUSES)
    problems = []
    f = gpus.gpu_facts(problems, 10, env={})
    assert f["gpu_samples"] == 0 and not slept and any("rocm-smi not found" in p for p in problems)


def test_in_use_is_the_free_rule_on_given_gpus_without_rocminfo(tools, kfd):
    """What a chained run waits for before it takes its GPUs: use, VRAM or a KFD process, over the samples;
    rocminfo is not run (the GPUs were chosen at discover), unknown is never busy."""
    tools["rocm-smi"] = smi([0, 97, 0, 0], vram=[0, 0, 60, 0], buses=BUSES, pids={4242: [3]})
    (kfd / "4242").mkdir()
    assert gpus.in_use([0, 1, 2, 3], 10) == {1: ["use 97%"], 2: ["VRAM 60% used"], 3: ["KFD process(es) 4242"]}
    assert gpus.in_use([0, 2], 10) == {2: ["VRAM 60% used"]} and gpus.in_use(["0"], 10) == {}
    assert gpus.in_use([1], 98) == {}                           # the caller's threshold
    del tools["rocm-smi"]
    assert gpus.in_use([1, 2, 3], 10) == {}                      # no smi tool: not busy


def test_rocminfo_chip_id_is_the_pci_device_id(tmp_path, monkeypatch):
    text = ("Agent 2\n  Name: gfx942\n  Marketing Name: AMD Instinct MI300X\n  Device Type: GPU\n"
            "  Chip ID: 29857(0x74a1)\n  Compute Unit: 304\n")
    assert gpus.rocminfo_gpus(text)[0]["device_id"] == "0x74a1"
    (tmp_path / "bin").mkdir()
    (tmp_path / ".info").mkdir()
    (tmp_path / ".info" / "version").write_text("6.4.1-120\n")
    monkeypatch.delenv("ROCM_PATH", raising=False)
    if not Path("/opt/rocm/.info/version").exists():
        assert gpus.rocm_version(str(tmp_path / "bin" / "rocminfo")) == "6.4.1-120"
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    assert gpus.rocm_version(None) == "6.4.1-120"
