"""The node helper, run as a real subprocess (`python3 node_helper.py <op>` + JSON on stdin).

Fake `rocminfo` / `rocm-smi` live in a tmp bin dir on PATH; fake aiter trees (develop/editable,
install mode, both pip names, and PyPI's unrelated `aiter`) live on PYTHONPATH. Jobs are real
processes started through `launch`; every wait polls a real condition against a deadline.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from orchestrator.remote.detached import ENTRY, helper_files

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "orchestrator" / "nodeside" / "node_helper.py"
FIXTURES = ROOT / "tests" / "fixtures" / "node_helper"
JOB = FIXTURES / "job.py"
PY = os.environ.get("NODE_HELPER_PYTHON", sys.executable)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")


# ------------------------------------------------------------------------------------------------
# plumbing
# ------------------------------------------------------------------------------------------------


def call(op, req=None, *, env=None, helper=HELPER, python=PY, timeout=30, raw=None):
    payload = raw if raw is not None else json.dumps(req if req is not None else {}).encode()
    proc = subprocess.run([python, str(helper), op], input=payload, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def helper_tree(hdir, without=()):
    """The helper dir as NodeHelper pushes it (orchestrator/{__init__.py,nodeside/,shapelib/}) but the files
    named in ``without``; the path of its entry point."""
    for name in helper_files():
        if name.rsplit("/", 1)[1] not in without:
            (hdir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, hdir / name)
    return hdir / ENTRY


def ok(op, req=None, **kw):
    answer = call(op, req, **kw)
    assert answer["ok"] is True, answer
    return answer


def wait_for(predicate, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.01)


def proc_state(pid):
    try:
        data = Path("/proc/%d/stat" % pid).read_bytes()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()[0].decode()


def proc_starttime(pid):
    data = Path("/proc/%d/stat" % pid).read_bytes()
    return int(data[data.rindex(b")") + 2:].split()[19])


def dead(pid):
    return proc_state(pid) in (None, "Z", "X")


def boot_id():
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def status1(run_dir, offset=0, max_bytes=65536):
    answer = ok("status", {"runs": [{"run_dir": str(run_dir), "offset": offset}], "max_bytes": max_bytes})
    assert len(answer["runs"]) == 1
    return answer["runs"][0]


def marker_pids(marker):
    want = ("TUNE_REMOTE_JOB=%s" % marker).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path("/proc/%s/environ" % name).read_bytes()
        except OSError:
            continue
        if want in env.split(b"\0") and not dead(int(name)):
            found.append(int(name))
    return found


@pytest.fixture
def jobs(tmp_path):
    """Launch helper that remembers markers and kills leftovers at teardown."""
    markers = []

    def launch(argv, *, name=None, env=None, cwd=None, log_path=None, step="tune"):
        job_id = "t-" + uuid.uuid4().hex[:12]
        run_dir = tmp_path / (name or job_id)
        markers.append("%s:%s" % (job_id, step))
        req = {"job_id": job_id, "step": step, "run_dir": str(run_dir), "argv": argv,
               "cwd": str(cwd or tmp_path), "env": env or {}, "log_path": log_path}
        return run_dir, req

    yield launch
    for marker in markers:
        for pid in marker_pids(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# ------------------------------------------------------------------------------------------------
# protocol basics
# ------------------------------------------------------------------------------------------------


def test_version_and_handled_errors():
    answer = ok("version")
    assert answer["version"] and answer["python"].count(".") == 2
    assert "launch" in answer["ops"] and "_supervise" not in answer["ops"]
    unknown = call("nope")
    assert unknown["ok"] is False and "unknown op" in unknown["error"] and "launch" in unknown["hint"]
    bad = call("status", raw=b"{not json")
    assert bad["ok"] is False and "JSON" in bad["error"]
    notobj = call("status", raw=b"[1, 2]")
    assert notobj["ok"] is False
    missing = call("cancel", {"run_dir": "/nonexistent/run"})
    assert missing["ok"] is False and missing["hint"]


# ------------------------------------------------------------------------------------------------
# discover
# ------------------------------------------------------------------------------------------------

ROCMINFO_CPU = """\
*******
Agent 1
*******
  Name:                    AMD EPYC 9575F 64-Core Processor
  Uuid:                    CPU-XX
  Marketing Name:          AMD EPYC 9575F 64-Core Processor
  Vendor Name:             CPU
  Device Type:             CPU
  Compute Unit:            128
"""

ROCMINFO_GPU = """\
*******
Agent {n}
*******
  Name:                    {gfx}
  Uuid:                    GPU-{n:016x}
  Marketing Name:          AMD Instinct MI355X
  Vendor Name:             AMD
  Feature:                 KERNEL_DISPATCH
  Device Type:             GPU
  Compute Unit:            {cu}
  SIMDs per CU:            4
  ISA Info:
    ISA 1
      Name:                    amdgcn-amd-amdhsa--{gfx}:sramecc+:xnack-
"""


def make_tools(bin_dir: Path, *, gpus=8, gfx="gfx950", cu=256, use=None):
    bin_dir.mkdir(parents=True, exist_ok=True)
    info = ("ROCk module is loaded\n=====================\nHSA System Attributes\n=====================\n"
            "Runtime Version:         1.1\n\n==========\nHSA Agents\n==========\n" + ROCMINFO_CPU)
    for i in range(gpus):
        info += ROCMINFO_GPU.format(n=i + 2, gfx=gfx, cu=cu)
    info += "*** Done ***\n"
    use = use if use is not None else {i: 0 for i in range(gpus)}
    smi = "\n\n========================= ROCm System Management Interface =========================\n"
    smi += "================================ % time GPU is busy ================================\n"
    for i, pct in use.items():
        fmt = "GPU[%d]\t\t: GPU use (%%): %d\n" if i % 2 == 0 else "GPU[%d] : GPU use (%%): %d\n"
        smi += fmt % (i, pct)
    smi += "====================================================================================\n"
    smi += "=============================== End of ROCm SMI Log ================================\n"
    (bin_dir / "rocminfo.out").write_text(info)
    (bin_dir / "rocm-smi.out").write_text(smi)
    for tool in ("rocminfo", "rocm-smi"):
        script = bin_dir / tool
        script.write_text("#!/bin/sh\ncat '%s'\n" % (bin_dir / (tool + ".out")))
        script.chmod(0o755)
    return bin_dir


RAISE = "raise RuntimeError('discover must never import aiter')\n"


def dist_info(site: Path, dirname: str, name: str, version: str, record=(), direct_url=None):
    d = site / dirname
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    (d / "RECORD").write_text("".join("%s,,\n" % r for r in record) + "%s/RECORD,,\n" % dirname)
    (d / "top_level.txt").write_text("aiter\n")
    if direct_url is not None:
        (d / "direct_url.json").write_text(json.dumps(direct_url))


def make_develop(tmp: Path, *, git=True):
    """Editable amd-aiter: checkout at tmp/aiter-src, dist-info (editable) in tmp/site-dev."""
    repo = tmp / "aiter-src"
    (repo / "aiter" / "configs").mkdir(parents=True)
    (repo / "aiter" / "jit").mkdir()
    (repo / "csrc" / "ck_gemm_a8w8").mkdir(parents=True)
    (repo / "aiter" / "__init__.py").write_text(RAISE)
    site = tmp / "site-dev"
    dist_info(site, "amd_aiter-0.1.20.dist-info", "amd-aiter", "0.1.20",
              record=["__editable__.amd_aiter-0.1.20.pth"],
              direct_url={"url": repo.as_uri(), "dir_info": {"editable": True}})
    if git and shutil.which("git"):
        g = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo)]
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run(g + ["add", "-A"], check=True)
        subprocess.run(g + ["commit", "-q", "-m", "init"], check=True)
        subprocess.run(g + ["tag", "v0.1.20"], check=True)
    return repo, site


def make_install(tmp: Path, pip_name: str, version: str):
    site = tmp / ("site-install-" + pip_name)
    (site / "aiter" / "configs").mkdir(parents=True)
    (site / "aiter" / "jit").mkdir()
    (site / "aiter_meta" / "csrc" / "ck_gemm_a8w8").mkdir(parents=True)
    (site / "aiter" / "__init__.py").write_text(RAISE)
    (site / "aiter" / "install_mode").write_text("install\n")
    dirname = "%s-%s.dist-info" % (pip_name.replace("-", "_"), version)
    dist_info(site, dirname, pip_name, version,
              record=["aiter/__init__.py", "aiter/install_mode", "aiter/configs/a8w8_tuned_gemm.csv",
                      "aiter_meta/csrc/ck_gemm_a8w8/gen_instances.py"])
    return site


def make_unrelated(tmp: Path):
    """PyPI's `aiter` (async iterators): owns aiter/ but has no configs/ or jit/."""
    site = tmp / "site-pypi-aiter"
    (site / "aiter").mkdir(parents=True)
    (site / "aiter" / "__init__.py").write_text(RAISE)
    (site / "aiter" / "async_tools.py").write_text("")
    dist_info(site, "aiter-0.13.20191203.dist-info", "aiter", "0.13.20191203",
              record=["aiter/__init__.py", "aiter/async_tools.py"])
    return site


def node_env(pythonpath, bin_dir=None, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AITER_", "HIP_VISIBLE", "PYTHON", "TUNE_REMOTE"))}
    if bin_dir is not None:
        env["PATH"] = "%s:%s" % (bin_dir, env.get("PATH", "/usr/bin:/bin"))
    else:
        env["PATH"] = "/usr/bin:/bin"
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    env.update(extra)
    return env


def test_discover_develop_editable_ignores_pypi_aiter(tmp_path):
    repo, site = make_develop(tmp_path)
    unrelated = make_unrelated(tmp_path)
    bin_dir = make_tools(tmp_path / "bin", use={0: 0, 1: 3, 2: 9, 3: 12, 4: 0, 5: 0, 6: 98, 7: 100})
    env = node_env([repo, unrelated, site], bin_dir, AITER_CONFIG_GEMM_A8W8="/x/a.csv",
                   AITER_REBUILD="1", HIP_VISIBLE_DEVICES="0,1")
    facts = ok("discover", {"aiter_path": None}, env=env)
    assert facts["pip_name"] == "amd-aiter" and facts["version"] == "0.1.20"
    assert facts["install_mode"] == "develop" and facts["editable"] is True
    assert facts["aiter_root"] == str(repo) and facts["meta_root"] == str(repo)
    assert facts["package_dir"] == str(repo / "aiter")
    assert facts["has_csrc"] and facts["has_configs"]
    if shutil.which("git"):
        assert facts["git_describe"] == "v0.1.20"
        # HEAD sits on the tag: describe names no commit; rev-parse does (issue 36 defect 3)
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
        assert facts["git_commit"] == head.strip() and len(facts["git_commit"]) == 40
    assert any("0.13.20191203" in p and "ignored" in p for p in facts["problems"])
    assert facts["gfx"] == "gfx950" and facts["cu_num"] == 256 and facts["gpu_count"] == 8
    assert facts["gpu_name"] == "AMD Instinct MI355X"
    assert facts["gpu_use"] == {"0": 0, "1": 3, "2": 9, "3": 12, "4": 0, "5": 0, "6": 98, "7": 100}
    # the container's own HIP_VISIBLE_DEVICES=0,1 leaves only GPUs 0 and 1 to HIP here (C-02)
    assert facts["free_gpus"] == [0, 1] and facts["gpu_map"] == {"0": 0, "1": 1}
    assert facts["gpus"]["2"]["busy"] == ["not visible in this container"]
    assert facts["env"] == {"AITER_CONFIG_GEMM_A8W8": "/x/a.csv", "AITER_REBUILD": "1"}
    assert facts["visible_devices"] == {"HIP_VISIBLE_DEVICES": "0,1"}
    assert facts["boot_id"] == boot_id() and facts["hostname"]
    # the threshold comes from the request (the laptop sends busy_threshold)
    env.pop("HIP_VISIBLE_DEVICES")
    facts = ok("discover", {"busy_threshold": 50}, env=env)
    assert facts["free_gpus"] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("pip_name,version", [("amd-aiter", "0.1.20"), ("aiter", "0.1.7")])
def test_discover_install_mode(tmp_path, pip_name, version):
    site = make_install(tmp_path, pip_name, version)
    bin_dir = make_tools(tmp_path / "bin", gpus=2, gfx="gfx942", cu=304)
    facts = ok("discover", {}, env=node_env([site], bin_dir))
    assert facts["pip_name"] == pip_name and facts["version"] == version
    assert facts["install_mode"] == "install" and facts["editable"] is False
    assert facts["aiter_root"] == str(site) and facts["meta_root"] == str(site / "aiter_meta")
    assert facts["has_csrc"] and facts["has_configs"] and facts["git_describe"] is None
    assert (facts["gfx"], facts["cu_num"], facts["gpu_count"]) == ("gfx942", 304, 2)
    assert facts["free_gpus"] == [0, 1]


def test_discover_setup_py_develop_egg_info(tmp_path):
    """`python3 setup.py develop` (aiter's README): amd_aiter.egg-info inside the checkout."""
    repo, _ = make_develop(tmp_path, git=False)
    egg = repo / "amd_aiter.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: amd-aiter\nVersion: 0.1.19.dev5+g1234abc\n")
    (repo / "aiter" / "install_mode").write_text("develop\n")
    facts = ok("discover", {}, env=node_env([repo], make_tools(tmp_path / "bin")))
    assert facts["pip_name"] == "amd-aiter" and facts["version"] == "0.1.19.dev5+g1234abc"
    assert facts["install_mode"] == "develop" and facts["aiter_root"] == str(repo)
    assert not [p for p in facts["problems"] if "ignored" in p]


def test_discover_only_unrelated_aiter_and_no_tools(tmp_path):
    unrelated = make_unrelated(tmp_path)
    facts = ok("discover", {}, env=node_env([unrelated]))
    assert facts["aiter_root"] is None and facts["pip_name"] is None
    text = " | ".join(facts["problems"])
    assert "ignored distribution aiter 0.13.20191203" in text
    assert "AMD AITER not found" in text
    assert "rocminfo not found" in text and "rocm-smi not found" in text
    assert facts["gfx"] is None and facts["free_gpus"] is None


def test_discover_aiter_path_override(tmp_path):
    site = make_install(tmp_path, "amd-aiter", "0.1.20")
    unrelated = make_unrelated(tmp_path)
    env = node_env([unrelated, site], make_tools(tmp_path / "bin"))
    facts = ok("discover", {"aiter_path": str(site)}, env=env)
    assert facts["source"] == "aiter_path" and facts["pip_name"] == "amd-aiter"
    assert facts["install_mode"] == "install" and facts["aiter_root"] == str(site)
    # the package dir itself is accepted too
    facts = ok("discover", {"aiter_path": str(site / "aiter")}, env=env)
    assert facts["package_dir"] == str(site / "aiter")
    bad = call("discover", {"aiter_path": str(unrelated)}, env=env)
    assert bad["ok"] is False and "not an AITER checkout" in bad["error"] and bad["hint"]
    bad = call("discover", {"aiter_path": str(tmp_path / "nope")}, env=env)
    assert bad["ok"] is False and "does not exist" in bad["error"]


# ------------------------------------------------------------------------------------------------
# launch / status / cancel
# ------------------------------------------------------------------------------------------------


def count_job(tmp_path, rc=0, tag="a"):
    count, stop = tmp_path / ("count-" + tag), tmp_path / ("stop-" + tag)
    return [PY, str(JOB), "count", str(count), str(stop), str(rc)], count, stop


def test_launch_is_prompt_idempotent_and_reports_success(tmp_path, jobs):
    argv, count, stop = count_job(tmp_path, rc=0)
    run_dir, req = jobs(argv, env={"JOB_EXTRA": "x y;$(z)"})
    t0 = time.monotonic()
    first = ok("launch", req, timeout=20)  # pipes: would hang if the daemon kept our stdout
    assert time.monotonic() - t0 < 5.0
    assert first["launched"] is True
    rec = first["record"]
    assert rec["pid"] == rec["pgid"] == rec["sid"] and rec["child_pid"]
    assert rec["marker"] == req["job_id"] + ":tune" and rec["boot_id"] == boot_id()
    assert rec["starttime"] == proc_starttime(rec["pid"])
    on_disk = json.loads((run_dir / "record.json").read_text())
    assert on_disk["pid"] == rec["pid"] and on_disk["child_pid"] == rec["child_pid"]
    command = json.loads((run_dir / "command.json").read_text())
    assert command["argv"] == argv and command["env_names"] == ["JOB_EXTRA"]
    assert "x y" not in (run_dir / "command.json").read_text()  # env values are not stored

    wait_for(lambda: count.exists() and count.read_text().count("\n") == 1, what="job start")
    st = status1(run_dir)
    assert st["state"] == "running" and st["alive"] and st["rc"] is None
    second = ok("launch", req)
    assert second["launched"] is False and second["record"]["pid"] == rec["pid"]

    wait_for(lambda: b"stdin_is_devnull" in (run_dir / "job.log").read_bytes(), what="job output")
    stop.touch()
    st = wait_for(lambda: (lambda s: s if s["state"] != "running" else None)(status1(run_dir)),
                  what="job end")
    assert st["state"] == "succeeded" and st["rc"] == 0 and not st["alive"]
    assert (run_dir / "rc").read_text() == "0\n"
    log = (run_dir / "job.log").read_text()
    assert "marker=%s" % rec["marker"] in log and "unbuffered=1" in log
    assert "extra=x y;$(z)" in log and "stdin_is_devnull=True" in log
    assert count.read_text().count("\n") == 1  # the second launch started nothing
    assert marker_pids(rec["marker"]) == []
    again = ok("launch", req)  # still idempotent after the end
    assert again["launched"] is False and again["record"]["pid"] == rec["pid"]


def _ended(st):
    """The status once the job is over: rc written AND the wrapper gone (between its rc write and its
    exit the node rightly still says 'running')."""
    return st if st["rc"] is not None and st["state"] not in ("running", "starting") else None


def test_failed_rc_and_signal_rc(tmp_path, jobs):
    argv, _, stop = count_job(tmp_path, rc=3, tag="f")
    run_dir, req = jobs(argv)
    ok("launch", req)
    stop.touch()
    st = wait_for(lambda: _ended(status1(run_dir)), what="rc and wrapper gone")
    assert st["state"] == "failed" and st["rc"] == 3

    argv, count, _ = count_job(tmp_path, tag="s")
    run_dir, req = jobs(argv)
    rec = ok("launch", req)["record"]
    wait_for(count.exists, what="job start")
    os.kill(rec["child_pid"], signal.SIGTERM)  # the job dies by a signal, the wrapper survives
    st = wait_for(lambda: _ended(status1(run_dir)), what="rc and wrapper gone")
    assert st["state"] == "failed" and st["rc"] == 128 + signal.SIGTERM

    run_dir, req = jobs([str(tmp_path / "no-such-program")])
    answer = ok("launch", req)
    assert answer["launched"] is True and "error" in answer["record"]
    st = wait_for(lambda: _ended(status1(run_dir)), what="rc and wrapper gone")
    assert st["state"] == "failed" and st["rc"] == 127
    assert "cannot start" in st["last_line"]


def test_sigkilled_job_is_lost(tmp_path, jobs):
    argv, count, _ = count_job(tmp_path, tag="k")
    run_dir, req = jobs(argv)
    rec = ok("launch", req)["record"]
    wait_for(count.exists, what="job start")
    os.killpg(rec["pgid"], signal.SIGKILL)  # wrapper and job: nobody writes rc
    st = wait_for(lambda: (lambda s: s if s["state"] != "running" else None)(status1(run_dir)),
                  what="lost")
    assert st["state"] == "lost" and st["rc"] is None and not st["alive"] and st["reason"]
    assert not (run_dir / "rc").exists()


def fake_run(tmp_path, name, pid, starttime, marker, child_pid=None):
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "command.json").write_text(json.dumps({"marker": marker, "created": 0,
                                                      "log_path": str(run_dir / "job.log")}))
    (run_dir / "record.json").write_text(json.dumps({
        "pid": pid, "pgid": pid, "starttime": starttime, "boot_id": boot_id(), "marker": marker,
        "child_pid": child_pid, "child_starttime": None, "log_path": str(run_dir / "job.log")}))
    return run_dir


def test_zombie_is_not_alive(tmp_path):
    marker = "zombie:tune"
    env = dict(os.environ, TUNE_REMOTE_JOB=marker)
    child = subprocess.Popen([sys.executable, "-c", "pass"], env=env)  # never reaped until the end
    try:
        wait_for(lambda: proc_state(child.pid) == "Z", what="zombie")
        run_dir = fake_run(tmp_path, "z", child.pid, proc_starttime(child.pid), marker)
        st = status1(run_dir)
        assert st["alive"] is False and st["state"] == "lost"
    finally:
        child.wait()


def test_pid_reuse_and_missing_marker_are_not_alive(tmp_path):
    marker = "reuse:tune"
    loop = "import time\nwhile True: time.sleep(0.05)"
    marked = subprocess.Popen([sys.executable, "-c", loop], env=dict(os.environ, TUNE_REMOTE_JOB=marker))
    plain_env = {k: v for k, v in os.environ.items() if k != "TUNE_REMOTE_JOB"}
    plain = subprocess.Popen([sys.executable, "-c", loop], env=plain_env)
    try:
        start = proc_starttime(marked.pid)
        good = fake_run(tmp_path, "good", marked.pid, start, marker)
        assert status1(good)["state"] == "running"
        reused = fake_run(tmp_path, "reused", marked.pid, start + 1, marker)  # same pid, other process
        st = status1(reused)
        assert st["alive"] is False and st["state"] == "lost"
        nomarker = fake_run(tmp_path, "nomarker", plain.pid, proc_starttime(plain.pid), marker)
        assert status1(nomarker)["state"] == "lost"
        # cancel must not touch a process that lacks the marker
        res = ok("cancel", {"run_dir": str(nomarker), "grace_s": 0.2})
        assert plain.pid not in res["signalled"] + res["killed"] and plain.poll() is None
        assert res["state"] == "cancelled"
    finally:
        for p in (marked, plain):
            p.kill()
            p.wait()


def test_cancel_kills_tree_including_setsid_child(tmp_path, jobs):
    tree_dir = tmp_path / "tree"
    tree_dir.mkdir()
    run_dir, req = jobs([PY, str(JOB), "tree", str(tree_dir)])
    bystander = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    try:
        rec = ok("launch", req)["record"]
        pids_file = tree_dir / "pids.json"
        wait_for(pids_file.exists, what="tree ready")
        pids = json.loads(pids_file.read_text())
        assert os.getsid(pids["setsid_child"]) == pids["setsid_child"] != rec["pid"]
        assert status1(run_dir)["state"] == "running"
        t0 = time.monotonic()
        res = ok("cancel", {"run_dir": str(run_dir), "grace_s": 0.5})
        assert time.monotonic() - t0 < 8
        assert res["state"] == "cancelled" and res["remaining"] == []
        for key in ("job", "child", "setsid_child", "stubborn"):
            assert dead(pids[key]), key
        assert dead(rec["pid"])
        assert pids["setsid_child"] in res["signalled"]
        assert pids["stubborn"] in res["killed"]  # ignored TERM, got KILL after the grace
        assert bystander.poll() is None and bystander.pid not in res["signalled"] + res["killed"]
        assert (run_dir / "cancelled").exists()
        st = status1(run_dir)
        assert st["state"] == "cancelled" and not st["alive"]
        again = ok("cancel", {"run_dir": str(run_dir), "grace_s": 0.5})
        assert again["already_finished"] is True and again["signalled"] == []
    finally:
        bystander.kill()
        bystander.wait()


def test_cancel_after_success_keeps_state(tmp_path, jobs):
    argv, _, stop = count_job(tmp_path, rc=0, tag="d")
    stop.touch()
    run_dir, req = jobs(argv)
    ok("launch", req)
    wait_for(lambda: status1(run_dir)["state"] == "succeeded", what="success")
    res = ok("cancel", {"run_dir": str(run_dir), "grace_s": 1})
    assert res["state"] == "succeeded" and res["already_finished"] is True
    assert not (run_dir / "cancelled").exists()


# ------------------------------------------------------------------------------------------------
# log reads: byte-exact offsets, progress, last line
# ------------------------------------------------------------------------------------------------

AITER_LINES = [
    "[aiter] import [module_aiter_enum] under /opt/aiter/aiter/jit/module_aiter_enum.so",
    "Distributing 100 task groups across 8 GPUs",
    "Waiting for 100 tasks to complete (timeout=1800s each)...",
    "[aiter] processed 1 batches of 4, Processing Status ====> 25.0% tuned in GemmA8W8BlockScaleTuner",
    "Tuning result for 'gfx': 'gfx950', 'cu_num': 256, 'M': 16, 'N': 1536, 'K': 7168 is kernelId=8 "
    "a8w8_x splitK=0, 4.8294us, err_ratio=0.0, tflops=2.61 TFLOPS, bw=1304.22 GB/s",
    "[aiter] processed 3 batches of 4, Processing Status ====> 75.0% tuned in GemmA8W8BlockScaleTuner",
    "r\u00e9sum\u00e9 \u00b5s \u2713 multi-byte text \U0001F680",
]


FINISH_BUILD = ("[aiter] [pid=1 pname=MainProcess] "
                "\x1b[32mfinish build [module_gemm_a8w8_tune], cost 12.3s \x1b[0m")


def strip(text):
    return text.replace("\x1b[32m", "").replace("\x1b[0m", "")


def make_log_bytes(filler_kib=0):
    text = "\n".join(AITER_LINES) + "\n"
    if filler_kib:
        text += ("x" * 1023 + "\n") * filler_kib
    text += "progress 10%\rprogress 50%\r\n"
    text += FINISH_BUILD + "\n\n"
    return text.encode("utf-8")


def test_offset_reads_are_byte_exact_and_progress_is_parsed(tmp_path, jobs):
    data = make_log_bytes()
    src = tmp_path / "src.log"
    src.write_bytes(data)
    run_dir, req = jobs([PY, str(JOB), "cat", str(src)])
    ok("launch", req)
    wait_for(lambda: status1(run_dir, max_bytes=0)["state"] == "succeeded", what="cat job")
    got, offset, calls = b"", 0, 0
    while True:
        st = status1(run_dir, offset=offset, max_bytes=97)  # splits multi-byte characters
        chunk = base64.b64decode(st["data_b64"])
        assert st["next_offset"] == offset + len(chunk) and len(chunk) <= 97
        got += chunk
        offset = st["next_offset"]
        calls += 1
        if st["eof"]:
            break
    assert got == data and calls > 5 and st["log_size"] == len(data)
    assert st["progress"] == {"done": 3, "total": 4, "pct": 75.0, "tuner": "GemmA8W8BlockScaleTuner"}
    assert st["last_line"] == strip(FINISH_BUILD).strip()
    assert 0 <= st["log_age_s"] < 60
    # an offset past the end (log replaced) restarts at 0 and says so
    st = status1(run_dir, offset=len(data) + 10, max_bytes=10)
    assert st["reset"] is True and base64.b64decode(st["data_b64"]) == data[:10]


def test_progress_found_far_from_the_end_and_long_last_line(tmp_path):
    run_dir = fake_run(tmp_path, "big", 0, None, "big:tune")
    log = run_dir / "job.log"
    log.write_bytes(make_log_bytes(filler_kib=700) + b"\x1b[31m" + b"y" * 1000 + b"\x1b[0m\n")
    (run_dir / "rc").write_text("1\n")
    st = status1(run_dir, max_bytes=0)
    assert st["state"] == "failed" and st["rc"] == 1 and st["data_b64"] == ""
    assert st["progress"]["done"] == 3 and st["progress"]["pct"] == 75.0
    assert st["last_line"] == "y" * 300


# ------------------------------------------------------------------------------------------------
# bench_prepare
# ------------------------------------------------------------------------------------------------


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_script(script, args, cwd):
    return subprocess.run([PY, str(script)] + args, cwd=str(cwd), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=30)


def test_bench_prepare_patches_a_copy(tmp_path):
    repo = tmp_path / "aiter"
    shutil.copytree(FIXTURES / "op_tests", repo / "op_tests")
    script = repo / "op_tests" / "bench_fake_gemm.py"
    before = sha(script)
    values = ["-m", "16384", "32", "-n", "9000", "-k", "512"]
    assert run_script(script, values, repo).returncode == 2  # argparse rejects them
    res = ok("bench_prepare", {
        "script": str(script), "patched_dir": str(tmp_path / "patched"),
        "args": {"-m": ["16384", "32"], "-n": ["9000"], "-k": ["512"], "--dtype": ["bf16"],
                 "-q": ["per_token"], "--nope": ["1"]}})
    assert res["patched"] is True and res["script"] == str(tmp_path / "patched" / "bench_fake_gemm.py")
    assert sorted(res["removed_choices"]) == ["-k", "-m", "-n"]
    assert res["unverified_choices"] == ["-q"] and res["unknown_flags"] == ["--nope"]
    assert sha(script) == before  # original untouched
    patched = Path(res["script"]).read_text(encoding="utf-8")
    assert "choices=[1, 32" not in patched and "choices=range" not in patched and "choices=KS" not in patched
    assert 'choices=["bf16", "fp16"]' in patched and "choices=list(fake_sibling" in patched  # kept
    assert patched.count("\n") == script.read_text(encoding="utf-8").count("\n") + 1  # + the prelude line
    assert "# N, with a comma, in a comment" in patched and "help=\"M größe µs\"" in patched
    out = run_script(res["script"], values, repo)  # same cwd as the original run
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["RESULT", "sibling-ok", "op_tests", "[16384,", "32]",
                                           "[9000]", "[512]", "bf16", "per_token"]
    # choices still enforced where we did not remove them
    assert run_script(res["script"], ["-d", "fp32"], repo).returncode == 2


def test_bench_prepare_leaves_accepting_scripts_alone(tmp_path):
    script = tmp_path / "op_tests" / "bench_fake_gemm.py"
    shutil.copytree(FIXTURES / "op_tests", tmp_path / "op_tests")
    res = ok("bench_prepare", {"script": str(script), "patched_dir": str(tmp_path / "p"),
                               "args": {"-m": ["32", "64"], "-n": ["7168"], "-k": ["256"], "-d": ["fp16"]}})
    assert res["patched"] is False and res["script"] == str(script) and res["removed_choices"] == []
    assert not (tmp_path / "p").exists()
    bad = call("bench_prepare", {"script": str(tmp_path / "missing.py"), "args": {}, "patched_dir": "/tmp"})
    assert bad["ok"] is False and "not found" in bad["error"]


# ------------------------------------------------------------------------------------------------
# write_files / backup / manifest
# ------------------------------------------------------------------------------------------------


def test_write_files_backup_and_manifest(tmp_path):
    target = tmp_path / "cfg dir" / "a b;$(touch pwned).csv"
    backups = tmp_path / "backups"
    def write(content):
        return ok("write_files", {"files": [{"path": str(target), "content": content,
                                              "backup_dir": str(backups)}]})

    res = write("M,N,K\n1,2,3\n")
    f = res["files"][0]
    assert f["backup"] is None and f["changed"] is True
    assert f["sha256"] == hashlib.sha256(b"M,N,K\n1,2,3\n").hexdigest()
    assert target.read_text() == "M,N,K\n1,2,3\n" and not (tmp_path / "pwned").exists()
    target.chmod(0o640)
    res = write("M,N,K\n4,5,6\n")
    b = Path(res["files"][0]["backup"])
    assert b.parent == backups and b.read_text() == "M,N,K\n1,2,3\n"
    assert stat.S_IMODE(b.stat().st_mode) == 0o640 and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.read_text() == "M,N,K\n4,5,6\n"
    same = write("M,N,K\n4,5,6\n")
    assert same["files"][0]["changed"] is False and same["files"][0]["backup"] is None
    blob = bytes(range(256))
    binary = tmp_path / "bin.dat"
    ok("write_files", {"files": [{"path": str(binary), "content_b64": base64.b64encode(blob).decode(),
                                  "backup_dir": None}]})
    assert binary.read_bytes() == blob
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]

    res = ok("backup", {"paths": [str(target), str(tmp_path / "missing.csv")], "backup_dir": str(backups)})
    copy = Path(res["backups"][str(target)])
    assert copy.read_text() == "M,N,K\n4,5,6\n" and stat.S_IMODE(copy.stat().st_mode) == 0o640
    assert res["backups"][str(tmp_path / "missing.csv")] is None
    assert len(list(backups.iterdir())) == 2

    res = ok("manifest", {"paths": [str(target), str(backups), str(tmp_path / "missing.csv")]})
    files = res["files"]
    assert files[str(target)]["size"] == 12 and files[str(target)]["sha256"] == sha(target)
    assert files[str(tmp_path / "missing.csv")] is None
    assert str(copy) in files
    assert sorted(res["dirs"][str(backups)]) == sorted(p.name for p in backups.iterdir())


def test_manifest_carries_small_changed_files_inline_and_nothing_for_unchanged(tmp_path):
    small, big, same = tmp_path / "small.log", tmp_path / "big.bin", tmp_path / "same.csv"
    small.write_bytes(b"line\n" * 10)
    big.write_bytes(b"x" * 5000)
    same.write_bytes(b"M,N,K\n")
    have = {str(small): None, str(big): "0" * 64, str(same): sha(same)}
    res = ok("manifest", {"paths": [str(small), str(big), str(same)], "have": have, "inline_max": 4096})
    files = res["files"]
    assert base64.b64decode(files[str(small)]["data_b64"]) == small.read_bytes()
    assert files[str(small)]["sha256"] == sha(small)
    assert "data_b64" not in files[str(big)] and files[str(big)]["sha256"] == sha(big)   # over inline_max
    assert "data_b64" not in files[str(same)] and files[str(same)]["sha256"] == sha(same)  # laptop has it
    plain = ok("manifest", {"paths": [str(small)]})["files"][str(small)]          # without have: no data
    assert "data_b64" not in plain and plain["sha256"] == sha(small)



def test_manifest_with_compress_sends_small_text_zlibbed_and_rates_a_big_files_start(tmp_path):
    """Logs and CSVs shrink ~5-10x: inline as data_z64 (zlib, base64), and a big one is rated (``z``) so that
    the laptop asks for it through gzip; random bytes come plain (zlib would only cost)."""
    import zlib
    text, rand = tmp_path / "tune.log", tmp_path / "rand.bin"
    text.write_bytes(b"".join(b"[aiter] tuning shape %d of 4096, kernel a8w8_blockscale_1x128x128\n" % i
                              for i in range(2000)))
    rand.write_bytes(os.urandom(100000))
    big_text, big_rand = tmp_path / "big.log", tmp_path / "big.bin"
    big_text.write_bytes(text.read_bytes() * 10)
    big_rand.write_bytes(os.urandom(300000))
    paths = [str(p) for p in (text, rand, big_text, big_rand)]
    res = ok("manifest", {"paths": paths, "have": {p: None for p in paths}, "inline_max": 200000,
                          "compress": True})["files"]
    z = base64.b64decode(res[str(text)]["data_z64"])
    assert zlib.decompress(z) == text.read_bytes() and len(z) < text.stat().st_size / 5
    assert "data_b64" not in res[str(text)] and res[str(text)]["sha256"] == sha(text)
    assert base64.b64decode(res[str(rand)]["data_b64"]) == rand.read_bytes() and "data_z64" not in res[str(rand)]
    assert res[str(big_text)]["z"] < 0.2 and res[str(big_rand)]["z"] > 0.99
    plain = ok("manifest", {"paths": paths, "have": {p: None for p in paths}, "inline_max": 200000})["files"]
    assert "data_b64" in plain[str(text)] and "z" not in plain[str(big_text)]    # an older laptop's request


def test_manifest_with_sizes_leaves_a_big_file_of_another_size_unhashed_and_says_where_it_is_stored(tmp_path):
    big, same_size, small = tmp_path / "big.bin", tmp_path / "same.bin", tmp_path / "small.log"
    big.write_bytes(b"x" * 5000)
    same_size.write_bytes(b"y" * 5000)
    small.write_bytes(b"z" * 10)
    paths = [str(big), str(same_size), str(small)]
    req = {"paths": paths, "have": dict.fromkeys(paths), "inline_max": 4096, "sources": True,
           "sizes": {str(big): None, str(same_size): 5000, str(small): 3}}
    files = ok("manifest", req)["files"]
    assert files[str(big)]["sha256"] is None and files[str(big)]["size"] == 5000     # copied anyway: hashed later
    assert files[str(same_size)]["sha256"] == sha(same_size)     # the same size: only the hash can tell
    assert files[str(small)]["sha256"] == sha(small) and "data_b64" in files[str(small)]
    assert "source" in files[str(big)] and "source" in files[str(same_size)] and "source" not in files[str(small)]

# ------------------------------------------------------------------------------------------------
# shapes (shapelog is someone else's file: test the op with a stub beside a copy of the helper)
# ------------------------------------------------------------------------------------------------

STUB_SHAPELOG = '''
class ShapeLogResult:
    def __init__(self):
        self.shapes, self.hits, self.misses, self.warnings, self.lines, self.bytes = {}, {}, {}, [], 0, 0

def parse_files(paths, variant=None):
    r = ShapeLogResult()
    v = variant or "a8w8"
    for p in paths:
        with open(p, "rb") as f:
            for line in f:
                r.lines += 1
                r.bytes += len(line)
                if b"not found tuned config" in line:
                    r.misses[v] = r.misses.get(v, 0) + 1
                    r.shapes.setdefault(v, [{"m": 16, "n": 1536, "k": 7168}])
    return r
'''


def test_shapes_with_stub_shapelog(tmp_path):
    hdir = tmp_path / "helper dir"
    hdir.mkdir()
    entry = helper_tree(hdir, without=("shapelog.py",))  # the whole helper package except shapelog.py
    logs = tmp_path / "logs $(x); `y`"
    logs.mkdir()
    log = logs / "server 1.log"
    log.write_text("[aiter] shape is M:16, N:1536, K:7168, not found tuned config in x.csv, "
                   "will use default config!\nok\n")
    req = {"logs": [str(log), str(logs / "gone.log")], "variant": None}
    missing_mod = call("shapes", req, helper=entry)
    assert missing_mod["ok"] is False and "shapelog" in missing_mod["error"]
    (hdir / "orchestrator" / "shapelib" / "shapelog.py").write_text(STUB_SHAPELOG)
    res = ok("shapes", req, helper=entry)
    assert res["missing"] == [str(logs / "gone.log")]
    assert res["shapes"] == {"a8w8": [{"m": 16, "n": 1536, "k": 7168}]} and res["misses"] == {"a8w8": 1}
    assert res["lines"] == 2 and res["bytes"] == log.stat().st_size
    res = ok("shapes", {"logs": [str(logs)], "variant": "moe_2stages"}, helper=entry)
    assert res["misses"] == {"moe_2stages": 1} and res["missing"] == []


def test_an_ops_module_is_loaded_when_the_op_is_first_asked(tmp_path):
    """A helper that only polls never imports argpatch & co. (issue 9: a shorter start); an op whose
    module is missing says which file, and every other op still answers."""
    hdir = tmp_path / "helper"
    hdir.mkdir()
    entry = helper_tree(hdir, without=("argpatch.py",))
    assert ok("version", helper=entry)["version"]
    gone = call("bench_prepare", {"script": str(tmp_path / "x.py")}, helper=entry)
    assert gone["ok"] is False and "argpatch.py is missing" in gone["error"] and "pushes the helper again" in gone["hint"]
    probe = ("import sys; sys.argv = ['node_helper.py']; sys.path.insert(0, %r); "
             "import orchestrator.nodeside.node_helper; "
             "print(sorted(m for m in ('argpatch', 'discovery', 'jitlogs', 'killing', 'staging', 'tables') "
             "if 'orchestrator.nodeside.' + m in sys.modules))" % str(ROOT))
    out = subprocess.run([PY, "-c", probe], stdout=subprocess.PIPE, check=True).stdout.decode().strip()
    assert out == "[]"


def test_a_helper_started_ahead_preloads_its_discover_modules():
    """The persistent helper's preload (channel.serve's, while no request came) imports discover's modules
    of its own package: a preload that fails is silent (the op then pays the import), so it is checked here."""
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from orchestrator.nodeside import node_helper; "
             "node_helper._preload(); "
             "print(sorted(m for m in ('discovery', 'gpus') if 'orchestrator.nodeside.' + m in sys.modules))")
    out = subprocess.run([PY, "-I", "-c", probe, str(ROOT)], stdout=subprocess.PIPE, check=True).stdout.decode()
    assert out.strip() == "['discovery', 'gpus']"


# ------------------------------------------------------------------------------------------------
# the container's python may be old: smoke-test the oldest supported one when it is installed
# ------------------------------------------------------------------------------------------------


def _python38():
    for cand in (os.environ.get("NODE_HELPER_PY38"),
                 os.path.expanduser("~/.pyenv/versions/3.8.18/bin/python3"), shutil.which("python3.8")):
        if not cand or not os.access(cand, os.X_OK):
            continue
        try:
            out = subprocess.run([cand, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.stdout.strip() == b"True":
            return cand
    return None


def test_python38_smoke(tmp_path):
    py = _python38()
    if py is None:   # CI must check the promise (.ci/run finds one); elsewhere it is only skipped
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("no Python 3.8 interpreter: set NODE_HELPER_PY38 (see .ci/run)")
        pytest.skip("no Python 3.8 interpreter here")
    # the fault-matrix modules too: table check/repair and the watchdog, as the node runs them
    table = tmp_path / "t38.csv"
    table.write_text("gfx,cu_num,M,N,K,us\ngfx942,304,1,2,3,1.0\ngfx942,30")
    cp = subprocess.run([py, str(HELPER), "_stall", "0", "0", str(table), "--keys", "gfx,cu_num,M,N,K",
                         "--keep", str(tmp_path / "dmg38"), "--", "exit 3"], capture_output=True, timeout=30)
    assert cp.returncode == 3 and b"repaired" in cp.stdout, cp
    assert ok("table_check", {"table": str(table), "keys": ["M", "N", "K"]}, python=py)["sound"] is True
    assert ok("version", python=py)["python"].startswith("3.8.")
    # ops' modules load on first use: every helper file must still parse and import under 3.8
    mods = [n[:-3].replace("/", ".") for n in helper_files() if n.endswith(".py") and n != ENTRY]
    cp = subprocess.run([py, "-c", "import sys; sys.path.insert(0, sys.argv[1]); [__import__(m) for m in sys.argv[2:]]",
                         str(helper_tree(tmp_path / "helper38").parents[2]), *mods], capture_output=True, timeout=60)
    assert cp.returncode == 0, cp.stderr.decode()
    site = make_install(tmp_path, "amd-aiter", "0.1.20")
    facts = ok("discover", {}, python=py, env=node_env([site], make_tools(tmp_path / "bin")))
    assert facts["pip_name"] == "amd-aiter" and facts["install_mode"] == "install"
    shutil.copytree(FIXTURES / "op_tests", tmp_path / "op_tests")
    res = ok("bench_prepare", {"script": str(tmp_path / "op_tests" / "bench_fake_gemm.py"),
                               "patched_dir": str(tmp_path / "patched"), "args": {"-k": ["512"]}}, python=py)
    assert res["patched"] and res["removed_choices"] == ["-k"]
    out = run_script(res["script"], ["-k", "512"], tmp_path)
    assert out.returncode == 0, out.stderr.decode()
    stop = tmp_path / "stop38"
    stop.touch()
    run_dir = tmp_path / "run38"
    req = {"job_id": "py38-" + uuid.uuid4().hex[:8], "step": "tune", "run_dir": str(run_dir),
           "argv": [py, str(JOB), "count", str(tmp_path / "c38"), str(stop), "0"],
           "cwd": str(tmp_path), "env": {}}
    assert ok("launch", req, python=py)["launched"] is True
    wait_for(lambda: ok("status", {"runs": [{"run_dir": str(run_dir), "offset": 0}]}, python=py)
             ["runs"][0]["state"] == "succeeded", what="py38 job")


def test_a_batch_runs_its_ops_in_order_in_one_request_and_stops_at_the_first_failure(tmp_path):
    # issue 9: several ops in one round trip; an op after a failed one is not run (it depends on it)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    res = call("batch", {"ops": [
        {"op": "write_files", "req": {"files": [{"path": str(a), "content": "1\n", "backup_dir": None}]}},
        {"op": "manifest", "req": {"paths": [str(a)]}},
        {"op": "nosuch", "req": {}},
        {"op": "write_files", "req": {"files": [{"path": str(b), "content": "2\n", "backup_dir": None}]}},
    ]})
    answers = res["answers"]
    assert [x["ok"] for x in answers] == [True, True, False] and "unknown op" in answers[2]["error"]
    assert answers[1]["files"][str(a)]["size"] == 2 and not b.exists()
    bad = call("batch", {"ops": [{"op": "batch", "req": {"ops": []}}]})
    assert bad["ok"] is False and "cannot hold a batch" in bad["error"]


def test_bench_prepare_of_a_missing_script_fails_unless_missing_ok(tmp_path):
    """prepare sends every checked bench script in its one batch before it knows which exist."""
    req = {"script": str(tmp_path / "op_tests" / "nope.py"), "args": {}, "patched_dir": str(tmp_path / "p")}
    proc = subprocess.run([sys.executable, str(HELPER), "bench_prepare"], input=json.dumps(req).encode(),
                          stdout=subprocess.PIPE, timeout=60)
    assert json.loads(proc.stdout)["ok"] is False
    proc = subprocess.run([sys.executable, str(HELPER), "bench_prepare"],
                          input=json.dumps(dict(req, missing_ok=True)).encode(), stdout=subprocess.PIPE, timeout=60)
    answer = json.loads(proc.stdout)
    assert answer["ok"] and answer["missing"] is True and not (tmp_path / "p").exists()


# ------------------------------------------------------------------------------------------------
# chained runs (a detached campaign's later variants on one target)
# ------------------------------------------------------------------------------------------------


def _chain_pair(tmp_path, jobs):
    work = tmp_path / "work"
    argv_a, count_a, stop_a = count_job(tmp_path, tag="ca")
    argv_b, count_b, stop_b = count_job(tmp_path, tag="cb")
    run_a, req_a = jobs(argv_a)
    run_b, req_b = jobs(argv_b)
    for req, variant in ((req_a, "va"), (req_b, "vb")):
        req["lock"] = {"workdir": str(work), "variant": variant, "owner": {"who": "me@laptop"}, "gpus": [0]}
    req_b["after"] = str(run_a)
    return work, (run_a, req_a, count_a, stop_a), (run_b, req_b, count_b, stop_b)


def test_a_chained_run_waits_on_the_node_then_takes_the_gpus(tmp_path, jobs):
    work, (run_a, req_a, count_a, stop_a), (run_b, req_b, count_b, stop_b) = _chain_pair(tmp_path, jobs)
    ok("launch", req_a)
    wait_for(count_a.exists, what="the first run started")
    second = ok("launch", req_b)     # GPU 0 is the first run's: a chained launch is not refused
    assert second["launched"] is True and second["record"]["waiting_for"] == str(run_a)
    st = status1(run_b)
    assert st["state"] == "running" and st["waiting_for"] == str(run_a) and not count_b.exists()
    gpu_lock = work / ".tune-remote" / "locks" / "gpu-0.lock"
    assert json.loads(gpu_lock.read_text())["job_id"] == req_a["job_id"]
    stop_a.touch()
    wait_for(count_b.exists, what="the chained run started once the first ended")
    assert status1(run_b)["waiting_for"] is None
    assert json.loads(gpu_lock.read_text())["job_id"] == req_b["job_id"]   # the GPUs handed on
    stop_b.touch()
    st = wait_for(lambda: _ended(status1(run_b)), what="the chained run ended")
    assert st["state"] == "succeeded"


def test_cancel_of_a_waiting_chained_run_ends_it_before_it_starts(tmp_path, jobs):
    _, (run_a, req_a, count_a, stop_a), (run_b, req_b, count_b, _) = _chain_pair(tmp_path, jobs)
    ok("launch", req_a)
    ok("launch", req_b)
    res = ok("cancel", {"run_dir": str(run_b), "grace_s": 10})
    assert res["state"] == "cancelled" and res["remaining"] == []
    st = status1(run_b)
    assert st["state"] == "cancelled" and not st["alive"] and st["rc"] is not None   # nothing left to start it
    assert status1(run_a)["state"] == "running"        # the run it waited for goes on
    stop_a.touch()
    wait_for(lambda: _ended(status1(run_a)), what="the first run ended")
    assert not count_b.exists()
