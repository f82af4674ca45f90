"""A Slurm campaign planned while its holders are pending (campaign/slurm_drive.py, bundle.py, nodedrive.py): the
bundle runs with nothing but the stdlib, the plan shards the local shapes evenly over the holders, the shipped
tar holds each shard's sub-jobs (its `ready` last), the holder starts the node driver (or says why not), and
`adopt` takes the nodes' launches home without writing over the laptop's own."""

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from orchestrator.campaign import slurm_drive
from orchestrator.campaign.bundle import package_zip
from orchestrator.campaign.slurm_scripts import HOLDER
from orchestrator.records import Campaign
from orchestrator.remote.transport import CommandResult
from orchestrator.state import JobState, Workspace


def test_the_bundle_runs_and_imports_the_node_path_with_the_stdlib_only(tmp_path):
    z = tmp_path / "drive.zip"
    z.write_bytes(package_zip())
    assert package_zip() == z.read_bytes()                       # the same sources, the same bytes
    cp = subprocess.run([sys.executable, "-I", "-S", str(z)], capture_output=True, text=True, timeout=60,
                        cwd=tmp_path)
    assert cp.returncode == 2 and "usage: python3 drive.zip DIR NODE CONTAINER DOCKER" in cp.stderr, cp.stderr
    (pkg,) = tmp_path.glob("pkg-*")                              # unpacked once, beside the zip
    assert (pkg / "orchestrator" / "nodeside" / "node_helper.py").is_file()
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "import orchestrator.campaign.nodedrive, orchestrator.engine, orchestrator.steps.discover, "
             "orchestrator.steps.shapes, orchestrator.steps.prepare, orchestrator.steps.remote; "
             "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) - {'__main__'}))")
    cp = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(pkg)], capture_output=True, text=True,
                        timeout=60, cwd=tmp_path)
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert cp.stdout.strip() == "['orchestrator']"


def test_the_bundle_holds_no_cache_and_no_laptop_only_files():
    import zipfile
    names = zipfile.ZipFile(io.BytesIO(package_zip())).namelist()
    assert names[0] == "__main__.py" and "orchestrator/campaign/nodedrive.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or n.startswith("orchestrator/sim/")]


def _job(tmp_path, **request) -> JobState:
    job = JobState(job_id="cq", node="slurm:cl", container="login-{node}", variant="a8w8_blockscale", created=0,
                   request={"logs": [], "nk": [], "variants": ["a8w8_blockscale"], "detach": True, **request})
    job.request.campaign = Campaign(nodes=[], sub_jobs=[], source="slurm")
    return job


@pytest.mark.parametrize("request_, why", [
    ({"variants": ["auto"], "logs": ["local:/x.log"]}, "--variant auto"),
    ({"logs": ["node:/var/log/server.log"]}, "on the nodes"),
    ({"logs": ["/in/the/container.log"]}, "on the nodes"),
    ({"model": {"hidden_size": 1}}, "--model"),
    ({"budget": "1h"}, "--budget"),
])
def test_a_plan_that_needs_a_node_waits_for_the_grant_and_says_why(tmp_path, request_, why):
    assert why in slurm_drive.blocker(_job(tmp_path, **request_).request)


def test_local_shapes_need_no_node():
    for req in ({"nk": ["7168,2048"]}, {"logs": ["local:/x.log"]}, {"shapes_csv": "/x.csv"}):
        assert slurm_drive.blocker(dict({"variants": ["a8w8_blockscale"]}, **req)) is None


def _state(n: int) -> dict:
    return {"cluster": "cl", "job_id": "cq", "nodes": n, "dir": "/home/u/.tune-remote/slurm/cq",
            "jobs": {str(i): {"name": f"tr-cq-{i}", "id": str(100 + i)} for i in range(n)}}


def test_the_pending_plan_shards_the_local_shapes_evenly_over_the_holders(tmp_path):
    job = _job(tmp_path, nk=["7168,2048", "4096,1024"], m_preset="1,16,64,256")
    plan = slurm_drive.pending_plan(job, _state(2))
    (shards,) = plan["variants"]["a8w8_blockscale"].values()
    assert sorted(shards) == ["tr-cq-0/pending", "tr-cq-1/pending"]
    assert [len(r) for r in shards.values()] == [4, 4]
    every = sorted((r["n"], r["k"], r["m"]) for rows in shards.values() for r in rows)
    assert every == sorted((n, k, m) for n, k in ((7168, 2048), (4096, 1024)) for m in (1, 16, 64, 256))


def test_no_local_shapes_is_bad_input_before_anything_is_shipped(tmp_path):
    from orchestrator.errors import UsageError
    csv = tmp_path / "empty.csv"
    csv.write_text("M,N,K\n")
    with pytest.raises(UsageError, match="no shapes to tune"):
        slurm_drive.pending_plan(_job(tmp_path, shapes_csv=str(csv)), _state(2))


class _Spec:
    name = "cl"

    @staticmethod
    def container_on(node: str) -> str:
        return f"login-{node}"


class _Login:
    def __init__(self, answer: bytes = b""):
        self.calls, self.answer = [], answer

    def run(self, cmd, stdin=None, timeout=None, check=True):
        self.calls.append((cmd, stdin))
        return CommandResult(cmd, 0, self.answer, b"")


class _Source:
    def __init__(self, state, login):
        self.state, self.login, self.spec, self.saved = state, login, _Spec(), 0

    def save(self):
        self.saved += 1

    def squeue(self):
        return {}


def _shipped(tmp_path):
    ws = Workspace(tmp_path / "ws")
    job = _job(tmp_path, nk=["7168,2048"], m_preset="1,16,64,256", variants=["a8w8_blockscale", "a8w8"])
    ws.save(job)
    src = _Source(_state(2), _Login())
    plan = slurm_drive.pending_plan(job, src.state)
    slurm_drive.ship(job, ws, src, plan, ["plan"])
    return ws, job, src


def test_ship_puts_each_holders_sub_jobs_and_the_package_in_one_round_trip_ready_last(tmp_path):
    ws, job, src = _shipped(tmp_path)
    ((cmd, stdin),) = src.login.calls
    assert cmd.argv == ("tar", "-C", "/home/u/.tune-remote/slurm/cq", "-xf", "-")
    names = tarfile.open(fileobj=io.BytesIO(stdin)).getnames()
    assert names[0] == "drive.zip" and names[-2:] == ["0/drive/ready", "1/drive/ready"]
    subs = job.request.campaign.sub_jobs
    assert sorted(subs) == ["cq.slurm0.cl.a8w8", "cq.slurm0.cl.a8w8_blockscale", "cq.slurm1.cl.a8w8",
                            "cq.slurm1.cl.a8w8_blockscale"]
    assert src.state["jobs"]["0"]["subs"] == ["cq.slurm0.cl.a8w8_blockscale", "cq.slurm0.cl.a8w8"]  # chain order
    tar = tarfile.open(fileobj=io.BytesIO(stdin))
    st = json.loads(tar.extractfile("0/drive/cq.slurm0.cl.a8w8/state.json").read())
    assert st["node"] == "tr-cq-0" and st["request"]["parent"] == "cq" and st["request"]["gpus"] is None
    assert json.loads(tar.extractfile("1/drive/order.json").read())["subs"] == src.state["jobs"]["1"]["subs"]
    assert tar.extractfile("1/drive/shards/cq.slurm1.cl.a8w8.csv").read().count(b"\n") == 3   # header + 2 of 4
    assert src.state["pending_plan"] and job.step == "remote" and src.saved


def _tar(files: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_adopt_takes_what_the_node_launched_and_names_the_node_of_what_it_did_not(tmp_path):
    ws, job, src = _shipped(tmp_path)
    subws = Workspace(ws.job_dir("cq") / "targets")
    launched = subws.load("cq.slurm0.cl.a8w8_blockscale")
    launched.node, launched.container, launched.step = "a", "login-a", "remote"
    launched.remote.run_dir = "/aiter/tune_logs/x/pipeline"
    local_csv = launched.request.shapes_csv
    launched.request["shapes_csv"] = "/home/u/.tune-remote/slurm/cq/0/drive/shards/x.csv"
    src.login.answer = _tar({"0/node": b"a\n", "0/gpus": b"0,1\n", "0/drive.rc": b"0\n",
                             "0/drive/cq.slurm0.cl.a8w8_blockscale/state.json": launched.to_json().encode(),
                             "1/node": b"b\n", "1/gpus": b"2,3\n", "1/drive.rc": b"1\n",
                             "1/drive.log": b"nodedrive: discover failed\n"})
    events = []
    ui = type("U", (), {"event": lambda self, t: events.append(t)})()
    assert slurm_drive.adopt(job, ws, src, ui)
    got = subws.load("cq.slurm0.cl.a8w8_blockscale")
    assert got.remote.run_dir == "/aiter/tune_logs/x/pipeline" and got.node == "a"
    assert got.request.shapes_csv == local_csv                           # the laptop's copy of the shard
    other = subws.load("cq.slurm1.cl.a8w8")                              # its node driver failed: placed on b
    assert (other.node, other.container, other.request.gpus, other.remote.get("run_dir")) == \
        ("b", "login-b", [2, 3], None)
    assert src.state["jobs"]["1"]["node"] == "b" and any("discover failed" in e for e in events)
    # a sub-job the laptop itself launched since is never written over by the node's copy
    mine = subws.load("cq.slurm1.cl.a8w8")
    mine.remote.run_dir = "/aiter/tune_logs/mine/pipeline"
    subws.save(mine)
    theirs = subws.load("cq.slurm1.cl.a8w8")
    theirs.remote.run_dir = "/elsewhere"
    src.login.answer = _tar({"1/node": b"b\n", "1/drive/cq.slurm1.cl.a8w8/state.json": theirs.to_json().encode()})
    slurm_drive.adopt(job, ws, src, ui)
    assert subws.load("cq.slurm1.cl.a8w8").remote.run_dir == "/aiter/tune_logs/mine/pipeline"


def _fake_bin(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)


def _holder(tmp_path, python_ok: bool):
    """HOLDER run here with a docker that says the container runs and a python3 that records its argv."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _fake_bin(bin_, "docker", 'echo true\n')
    _fake_bin(bin_, "python3", ('case "$1" in -c) exit %d;; --version) echo "Python 3.6.8"; exit 0;; esac\n'
                                'echo "$@" > "$2/argv"\n') % (0 if python_ok else 1))
    d = tmp_path / "cq" / "0"
    (d / "drive").mkdir(parents=True)
    (d / "holder.sh").write_text(HOLDER)
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", SLURMD_NODENAME="a", ROCR_VISIBLE_DEVICES="0,1")
    proc = subprocess.Popen(["sh", str(d / "holder.sh"), str(d), "login-{node}", "cq", "docker"], env=env)
    return d, proc


def _until(cond, timeout=20.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("python_ok", [True, False])
def test_the_holder_starts_the_node_driver_once_its_shard_is_ready_or_says_why_not(tmp_path, python_ok):
    d, proc = _holder(tmp_path, python_ok)
    try:
        _until(lambda: (d / "node").exists())
        assert not (d / "drive.rc").exists()                     # nothing shipped yet: no driver
        (d / "drive" / "ready").write_text("")
        _until(lambda: (d / "drive.rc").exists() and (d / "drive.rc").read_text().strip())
        if python_ok:
            assert (d / "drive.rc").read_text().strip() == "0"
            assert (d / "argv").read_text().split() == [f"{d}/../drive.zip", str(d), "a", "login-a", "docker"]
        else:
            assert (d / "drive.rc").read_text().strip() == "127"
            assert "no python3 >= 3.10 on node a (Python 3.6.8)" in (d / "drive.log").read_text()
        (d / "release").write_text("")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_target_planned_before_its_grant_gets_its_kind_from_its_discover(tmp_path):
    from orchestrator.campaign import driver
    ws, job, src = _shipped(tmp_path)
    subws = Workspace(ws.job_dir("cq") / "targets")
    for sid, node in (("cq.slurm0.cl.a8w8_blockscale", "a"), ("cq.slurm1.cl.a8w8", "b")):
        sub = subws.load(sid)
        sub.node, sub.container = node, f"login-{node}"
        if node == "a":
            sub.facts.update(gfx="gfx942", cu_num=304, profile="current")
        subws.save(sub)
    driver.fill_kinds(job, ws)
    kinds = job.request.campaign.kinds
    assert kinds["a/login-a"] == "gfx942/304/current"
    assert kinds["b/login-b"] == "gfx942/304/current"      # never discovered: the partition's one kind
