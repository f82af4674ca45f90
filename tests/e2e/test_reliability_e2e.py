"""Reliability and security of tune-remote end to end, over the real test bed (sshd + docker + sim).

Each test drives the real CLI (a subprocess: `tune-remote ...`) against a node behind the fault
proxy, injects a fault (SIGKILL of the laptop process, cut/refused connections, a crashing or hanging
tuner, unknown/changed host keys, a hostile log path) and checks the node's truth: the tuner's launch
counter, /proc in the container, the files on the node.

No sleeps for synchronisation: every wait polls a real condition with a deadline (`poll`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.fake_remote.provision import poll

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]
_EXE = Path(sys.executable).parent / "tune-remote"
TR = [str(_EXE)] if _EXE.exists() else [sys.executable, "-m", "orchestrator"]
LOG = "/opt/aiter-sim/logs/vllm_tp8_dsv3.log"
VARIANT = "a8w8_blockscale"
TUNE_SCRIPT = "gemm_a8w8_blockscale_tune.py"
MARKER_VAR = "TUNE_REMOTE_JOB"


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------

def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Bed:
    """One node + container + inventory + workspace, and the CLI pointed at them."""

    def __init__(self, node, tmp_path: Path, *, ssh_config: Path | None = None, job_id: str = "job1",
                 reconnect_s: float | None = None):
        self.node = node
        self.c = next(iter(node.containers.values()))
        self.tmp = tmp_path
        self.ws = tmp_path / "ws"
        self.inv = tmp_path / "inventory.yaml"
        self.job_id = job_id
        self.inv.write_text(yaml.safe_dump({"nodes": {node.alias: {
            "ssh_config": str(ssh_config or node.ssh_config_file),
            "containers": {self.c.name: {}}}}}))
        self.env = dict(os.environ, TUNE_REMOTE_POLL_S="0.2")
        self.env.pop("TUNE_REMOTE_DEBUG", None)
        if reconnect_s is not None:
            self.env["TUNE_REMOTE_RECONNECT_S"] = str(reconnect_s)

    # -- CLI --------------------------------------------------------------------------------------
    def argv(self, *args) -> list[str]:
        return [*TR, "--inventory", str(self.inv), "--workspace", str(self.ws), *map(str, args)]

    def run_args(self, *extra, variant=VARIANT, log=LOG) -> list[str]:
        return ["run", "--node", self.node.alias, "--container", self.c.name, "--variant", variant,
                "--log", log, "--m-preset", "1,64,1024", "--yes", "--job-id", self.job_id, *extra]

    def cli(self, *args, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*args), capture_output=True, timeout=timeout, cwd=self.tmp,
                              env=env or self.env, stdin=subprocess.DEVNULL)

    def popen(self, *args, stderr=subprocess.PIPE) -> subprocess.Popen:
        """``stderr``: a file object to read the product's messages while it runs (PIPE: at the end)."""
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=stderr,
                                cwd=self.tmp, env=self.env, stdin=subprocess.DEVNULL)

    # -- job state --------------------------------------------------------------------------------
    @property
    def job_dir(self) -> Path:
        return self.ws / self.job_id

    def state(self) -> dict:
        try:
            return json.loads((self.job_dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    def sub(self, name: str) -> dict:
        return (((self.state().get("steps") or {}).get("remote") or {}).get("info") or {}).get("sub", {}).get(name, {})

    # -- the node's truth ---------------------------------------------------------------------------
    def node_bytes(self, container_path: str) -> bytes:
        return self.c.host_path(container_path).read_bytes()

    def node_exists(self, container_path: str) -> bool:
        return self.c.host_path(container_path).exists()

    def tuner_pids(self) -> list[int]:
        return [p["pid"] for p in self.c.processes() if TUNE_SCRIPT in p["args"] and p["state"] != "Z"]

    def marked_pids(self) -> list[int]:
        """Container processes whose environment carries the job marker (zombies have none)."""
        script = ("for d in /proc/[0-9]*; do "
                  f"if tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -q '^{MARKER_VAR}='; then "
                  "echo ${d#/proc/}; fi; done")
        return [int(x) for x in self.c.sh(script).stdout.split()]

    def tune_rc_on_node(self) -> Path:
        return self.c.host_path(f"{self.state()['remote']['run_dir']}/tune.rc")

    def wait_tuning(self, timeout: float = 60) -> None:
        """Until the tuner runs in the container (launched; it may not have tuned a shape yet)."""
        def ready():
            st = self.state()
            tune_log = ((st.get("remote") or {}).get("logs") or {}).get("tune")
            if not tune_log or not self.node_exists(tune_log) or not self.tuner_pids():
                return False
            return len(self.c.launches()) >= 1
        poll(ready, timeout=timeout, what="the tuner to run in the container")

    def assert_logs_identical(self) -> None:
        """Every file under <job>/logs is byte-identical to its node original."""
        r = self.state()["remote"]
        by_name = {os.path.basename(p): p for p in r["logs"].values()}
        by_name["pipeline.log"] = r["pipeline_log"]
        by_name[os.path.basename(r["report_md"])] = r["report_md"]
        local = sorted(p.name for p in (self.job_dir / "logs").iterdir())
        assert local, "no logs pulled"
        for name in local:
            assert name in by_name, f"unexpected local log {name}"
            node = self.node_bytes(by_name[name])
            assert sha((self.job_dir / "logs" / name).read_bytes()) == sha(node), f"{name} differs from the node's"
        # every log that exists on the node was pulled
        for name, path in by_name.items():
            if self.node_exists(path):
                assert name in local, f"{path} exists on the node but was not pulled"
        # the live pipeline log copy (appended poll by poll) has no duplicated or missing bytes
        if (self.job_dir / "pipeline.log").exists():
            assert (self.job_dir / "pipeline.log").read_bytes() == self.node_bytes(r["pipeline_log"])


def err_lines(cp) -> list[str]:
    return [l for l in cp.stderr.decode().splitlines() if l.startswith("tune-remote: error:")]


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


def desc(cp) -> str:
    return f"rc={cp.returncode}\nstdout:\n{cp.stdout.decode()[-3000:]}\nstderr:\n{cp.stderr.decode()[-3000:]}"


# ------------------------------------------------------------------------------------------------
# 1. the laptop process is SIGKILLed during tuning
# ------------------------------------------------------------------------------------------------

def test_sigkill_laptop_during_tuning_then_resume(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.slow(0.25)                      # 35 shapes: ~9 s of tuning
    proc = bed.popen(*bed.run_args())
    try:
        poll(lambda: bed.sub("tune").get("status") == "running" or proc.poll() is not None,
             timeout=90, what="state.json to show the tune step running")
        assert proc.poll() is None, "run ended before tuning started: " + str(proc.communicate())
        bed.wait_tuning()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    # the tuner goes on in the container without the laptop
    assert bed.tuner_pids(), "the tuner died with the laptop process"
    assert not bed.tune_rc_on_node().exists()
    assert bed.state()["state"] == "running"
    # A kill can land after a polled chunk was written to the local log copies but before state.json
    # recorded the new offsets: leave exactly that (offsets rolled back) and resume must not duplicate.
    path = bed.job_dir / "state.json"
    st = json.loads(path.read_text())
    offsets = st["steps"]["remote"]["info"]["offsets"]
    assert offsets.get(st["remote"]["pipeline_log"]), offsets
    for k in offsets:
        offsets[k] //= 2
    path.write_text(json.dumps(st))

    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    assert st["state"] == "succeeded"
    assert (bed.job_dir / "report.md").is_file() and (bed.job_dir / "report.html").is_file()
    assert st["steps"]["remote"]["info"]["sub"]["tune"]["status"] in ("done", "partial")
    assert len(bed.c.launches()) == 1, bed.c.launches()      # resume re-attached, never re-launched
    assert st["steps"]["remote"]["info"]["launched"] == 1
    assert not bed.tuner_pids()
    bed.assert_logs_identical()


# ------------------------------------------------------------------------------------------------
# 2. connections cut / refused during tuning
# ------------------------------------------------------------------------------------------------

def test_connections_cut_during_tuning_run_reconnects_and_finishes(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.slow(2.0)                       # the tuning outlasts the faults, however slow the machine ...
    proxy = node.proxy
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err_file:
        proc = bed.popen(*bed.run_args(), stderr=err_file)
    try:
        poll(lambda: bed.sub("tune").get("status") == "running" or proc.poll() is not None,
             timeout=90, what="the tune step to run")
        bed.wait_tuning()
        cuts = 0
        for _ in range(3):                # cut every connection, wait for the reconnect, again
            seen = proxy.connections_total
            cuts += proxy.cut_all()
            poll(lambda: proxy.connections_total > seen or proc.poll() is not None, timeout=60,
                 what="the product to reconnect")
        assert cuts >= 1
        # refuse new connections (and drop the current one) until the product has gone into its
        # back-off (it says so), then accept again: it must reconnect and finish
        seen = proxy.connections_total
        proxy.refuse_new(None)
        try:
            proxy.cut_all()
            poll(lambda: "retrying" in err_path.read_text() or proc.poll() is not None, timeout=60,
                 what="the product to back off while connections are refused")
        finally:
            proxy.accept_new()
        assert proc.poll() is None, err_path.read_text()[-3000:]
        poll(lambda: proxy.connections_total > seen or proc.poll() is not None, timeout=60,
             what="the product to reconnect after the refusal")
        bed.c.slow(0.01)                  # ... and ends soon after them (the sim reads this per shape)
        assert bed.tuner_pids() or bed.tune_rc_on_node().exists()
        out, _ = proc.communicate(timeout=180)
        rc, err = proc.returncode, err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, f"rc={rc}\n{err[-3000:]}"
    assert len(bed.c.launches()) == 1, bed.c.launches()
    st = bed.state()
    assert st["state"] == "succeeded" and st["steps"]["remote"]["info"]["launched"] == 1
    assert (bed.job_dir / "report.md").is_file()
    bed.assert_logs_identical()
    tuned = st["remote"]["tuned_csv"]
    assert sha((bed.job_dir / os.path.basename(tuned)).read_bytes()) == sha(bed.node_bytes(tuned))


def test_connection_refused_longer_than_reconnect_window_exits_75_then_resume(node, tmp_path):
    bed = Bed(node, tmp_path, reconnect_s=3)
    bed.c.slow(0.3)
    proxy = node.proxy
    proc = bed.popen(*bed.run_args())
    try:
        poll(lambda: bed.sub("tune").get("status") == "running" or proc.poll() is not None,
             timeout=90, what="the tune step to run")
        bed.wait_tuning()
        proxy.refuse_new(None)           # until accept_new()
        proxy.cut_all()
        t0 = time.monotonic()
        rc, out, err = finish(proc, timeout=60)
        gave_up_after = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        proxy.accept_new() if proc.returncode != 75 else None
    assert rc == 75, f"rc={rc}\n{err[-3000:]}"
    errors = [l for l in err.splitlines() if l.startswith("tune-remote: error:")]
    assert len(errors) == 1, err
    assert f"tune-remote resume {bed.job_id}" in errors[0]
    # the whole reconnect window, then gave up; the window opens when the poll in flight at the cut began,
    # up to one poll interval (0.2 s) + a round trip before t0
    assert 3 - 0.5 <= gave_up_after < 30
    # the job goes on on the node while the laptop is gone
    assert bed.state()["state"] == "running"
    assert bed.tuner_pids() or bed.tune_rc_on_node().exists()
    proxy.accept_new()
    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    assert st["state"] == "succeeded"
    assert (bed.job_dir / "report.md").is_file()
    assert len(bed.c.launches()) == 1, bed.c.launches()
    bed.assert_logs_identical()


# ------------------------------------------------------------------------------------------------
# 3. cancel kills the whole tree; zombies are never "alive"
# ------------------------------------------------------------------------------------------------

def _node_status(bed: Bed) -> dict:
    """The helper's own view of the run (python3 node_helper.py status, run in the container)."""
    helper = bed.c.sh("ls -d /tmp/tune-remote/helper-*/orchestrator/nodeside/node_helper.py").stdout.split()[0]
    req = json.dumps({"runs": [{"run_dir": bed.state()["remote"]["run_dir"], "offset": 0}], "max_bytes": 0})
    out = bed.c.exec("python3", helper, "status", input=req).stdout
    return json.loads(out.strip().splitlines()[-1])["runs"][0]


def _start_hung_detached(bed: Bed) -> None:
    bed.c.hang_after(1)
    cp = bed.cli(*bed.run_args("--detach"))
    assert cp.returncode == 0, desc(cp)
    bed.wait_tuning()
    bed.c.wait_stalled()            # the tuner has done its one shape and now hangs (sleeping), still alive
    assert bed.marked_pids(), "no process carries the job marker while the job runs"


def test_cancel_kills_whole_tree_and_zombies_are_not_alive(node, tmp_path):
    bed = Bed(node, tmp_path)
    _start_hung_detached(bed)
    st = bed.state()
    record = st["steps"]["remote"]["info"]["record"]
    marked = set(bed.marked_pids())
    assert record["pid"] in marked and len(marked) >= 3       # supervisor, pipeline.sh, step shell(s), tuner
    assert set(bed.tuner_pids()) <= marked

    cp = bed.cli("cancel", bed.job_id, "--grace", "3")
    assert cp.returncode == 0, desc(cp)
    assert b"cancelled" in cp.stdout
    # not one process with the job marker is left in the container
    assert bed.marked_pids() == []
    assert bed.tuner_pids() == []
    # PID 1 is `sleep infinity` and reaps nothing: the job's processes linger as zombies ...
    zombies = {p["pid"] for p in bed.c.zombies()}
    assert zombies & marked, "expected the job's dead processes to stay as zombies (PID 1 does not reap)"
    # ... and are never counted as alive, neither by the node helper nor by `status`
    ns = _node_status(bed)
    assert ns["alive"] is False and ns["state"] == "cancelled", ns
    cp = bed.cli("status", bed.job_id, "--json")
    assert cp.returncode == 0, desc(cp)
    row = json.loads(cp.stdout)[0]
    assert row["state"] == "cancelled"
    # the cancelled job is not resumed into a second launch
    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 1 and len(bed.c.launches()) == 1


def test_status_of_killed_job_with_zombie_leader_is_lost_not_running(node, tmp_path):
    """The job's processes die behind tune-remote's back (SIGKILL in the container): they stay as zombies,
    and `status` must report the job lost -- kill -0 on a zombie would still say 'alive'."""
    bed = Bed(node, tmp_path)
    _start_hung_detached(bed)
    record = bed.state()["steps"]["remote"]["info"]["record"]
    bed.c.exec("kill", "-KILL", "--", f"-{record['pgid']}")
    poll(lambda: not bed.marked_pids(), timeout=20, what="the job's processes to die")
    pid1 = [p for p in bed.c.processes() if p["pid"] == record["pid"]]
    assert pid1 and pid1[0]["state"] == "Z", pid1                 # the session leader is a zombie
    assert bed.c.exec("kill", "-0", str(record["pid"]), check=False).returncode == 0   # kill -0 lies
    cp = bed.cli("status", bed.job_id, "--json")
    assert cp.returncode == 0, desc(cp)
    row = json.loads(cp.stdout)[0]
    assert row["state"] == "lost", row
    assert bed.state()["state"] == "lost"


# ------------------------------------------------------------------------------------------------
# 4. host keys: unknown -> refused before any command; changed -> refused always
# ------------------------------------------------------------------------------------------------

def _ssh_config(node, path: Path, known_hosts: Path, strict: str) -> Path:
    lines = []
    for line in node.ssh_config().splitlines():
        key = line.strip().split(" ", 1)[0].lower()
        if key == "userknownhostsfile":
            line = f"    UserKnownHostsFile {known_hosts}"
        elif key == "stricthostkeychecking":
            line = f"    StrictHostKeyChecking {strict}"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    return path


def _nothing_ran(bed: Bed) -> None:
    assert bed.c.exec("test", "-e", "/tmp/tune-remote", check=False).returncode != 0, \
        "a helper was pushed into the container"
    assert bed.c.launches() == []
    assert bed.c.exec("test", "-e", f"{bed.c.aiter_root}/tune_logs/.tune-remote", check=False).returncode != 0


def test_unknown_host_key_is_refused_before_any_remote_command(node, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    cfg = _ssh_config(node, tmp_path / "ssh_config", kh, "yes")
    bed = Bed(node, tmp_path, ssh_config=cfg)
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 3, desc(cp)
    errors = err_lines(cp)
    assert len(errors) == 1, desc(cp)
    assert "host key" in errors[0] and "not known" in errors[0] and "--accept-new-host-key" in errors[0]
    assert f"[{node.host}]:{node.port}" in errors[0]
    _nothing_ran(bed)
    assert kh.read_text() == ""                                       # never written without consent
    assert not list(bed.ws.glob("*/state.json"))                     # no half-made job left behind


def test_changed_host_key_is_refused_even_with_accept_new(node, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    fake = " ".join(other.with_suffix(".pub").read_text().split()[:2])
    assert fake != " ".join(node.host_public_key.split()[:2])
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[{node.host}]:{node.port} {fake}\n")
    before = kh.read_text()
    cfg = _ssh_config(node, tmp_path / "ssh_config", kh, "yes")
    bed = Bed(node, tmp_path, ssh_config=cfg)
    for extra in ((), ("--accept-new-host-key",)):
        cp = bed.cli(*bed.run_args(*extra), "--job-id", f"changed{len(extra)}")
        assert cp.returncode == 3, desc(cp)
        errors = err_lines(cp)
        assert len(errors) == 1 and "does not match" in errors[0], desc(cp)
        _nothing_ran(bed)
        assert kh.read_text() == before                               # the known key is never replaced
    # accept-new in ssh_config does not accept a CHANGED key either
    cfg = _ssh_config(node, tmp_path / "ssh_config", kh, "accept-new")
    cp = bed.cli(*bed.run_args(), "--job-id", "changed-cfg")
    assert cp.returncode == 3, desc(cp)
    _nothing_ran(bed)


def test_accept_new_host_key_flag_records_the_key_and_works(node, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    cfg = _ssh_config(node, tmp_path / "ssh_config", kh, "yes")
    bed = Bed(node, tmp_path, ssh_config=cfg)
    cp = bed.cli(*bed.run_args("--accept-new-host-key"))
    assert cp.returncode == 0, desc(cp)
    lines = [l.split() for l in kh.read_text().splitlines() if l.strip()]
    want = node.host_public_key.split()[:2]
    assert lines and all(l[:1] == [f"[{node.host}]:{node.port}"] for l in lines), lines
    assert [l[1:3] for l in lines] == [want], lines                   # appended once, the right key
    assert len(bed.c.launches()) == 1
    # the key is now known: a plain run (StrictHostKeyChecking yes, no flag) works and appends nothing
    bed.job_id = "job2"
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    assert len([l for l in kh.read_text().splitlines() if l.strip()]) == 1


def test_accept_new_in_ssh_config_works_without_flag(node, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    cfg = _ssh_config(node, tmp_path / "ssh_config", kh, "accept-new")
    bed = Bed(node, tmp_path, ssh_config=cfg)
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    assert kh.read_text().split()[:3] == [f"[{node.host}]:{node.port}", *node.host_public_key.split()[:2]]


# ------------------------------------------------------------------------------------------------
# 5. a log path full of shell metacharacters is data, never code
# ------------------------------------------------------------------------------------------------

METACHAR_NAME = "run 1 $(touch pwned);x.log"       # written by orchestrator.sim.logs (_metachar)


def test_metachar_log_path_is_parsed_and_nothing_executes(node, tmp_path):
    from orchestrator.sim.logs import expected_misses
    bed = Bed(node, tmp_path)
    assert (bed.c.logs_host_dir / METACHAR_NAME).is_file()
    log = f"/opt/aiter-sim/logs/{METACHAR_NAME}"
    want = expected_misses(METACHAR_NAME)["batched_a8w8"]
    assert want
    host_dirs = [Path(pwd.getpwnam(node.user).pw_dir), Path("/tmp"), Path.cwd(), tmp_path, node.dir,
                 Path.home(), bed.c.host_dir, bed.c.logs_host_dir]
    host_before = {d: (d / "pwned").exists() for d in host_dirs}
    cp = bed.cli(*bed.run_args(variant="batched_a8w8", log=log))
    st = bed.state()
    assert st["steps"]["shapes"]["status"] == "done", desc(cp)
    # the log was found and parsed: every miss of the log is among the job's shapes
    got = {(s["b"], s["m"], s["n"], s["k"]) for s in st["shapes"]}
    assert {(s["b"], s["m"], s["n"], s["k"]) for s in want} <= got
    assert cp.returncode == 0, desc(cp)
    assert len(bed.c.launches()) == 1
    # nothing was executed: no `pwned` anywhere it could have been created
    found = bed.c.sh("find / -xdev -name 'pwned*' 2>/dev/null; "
                     "find /tmp /opt/aiter-sim -name 'pwned*' 2>/dev/null; true").stdout.split()
    assert found == [], found
    for d in host_dirs:
        assert (d / "pwned").exists() == host_before[d], f"{d}/pwned appeared"
    assert not host_before[Path("/tmp")] and not host_before[Path(pwd.getpwnam(node.user).pw_dir)]
    assert not list(bed.c.host_dir.rglob("pwned*"))


# ------------------------------------------------------------------------------------------------
# 6. run --detach, status, logs, resume, fetch
# ------------------------------------------------------------------------------------------------

def test_detach_status_logs_resume_fetch(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.slow(1.0)                                   # ~35 s of tuning: far longer than `run --detach`
    cp = bed.cli(*bed.run_args("--detach"))
    assert cp.returncode == 0, desc(cp)
    # it returned while the pipeline runs on the node
    assert not bed.tune_rc_on_node().exists()
    assert not bed.c.host_path(f"{bed.state()['remote']['run_dir']}/rc").exists()
    cp = bed.cli("status", bed.job_id, "--json")
    assert cp.returncode == 0, desc(cp)
    row = json.loads(cp.stdout)[0]
    assert {"job_id", "state", "step", "node", "container", "variant"} <= set(row)
    assert (row["job_id"], row["state"], row["step"], row["node"], row["container"], row["variant"]) == \
        (bed.job_id, "running", "remote", node.alias, bed.c.name, VARIANT)

    # `logs --step tune` of a detached job prints the node's tuning log (here: once tuning is over)
    bed.c.slow(0.0)
    poll(lambda: bed.tune_rc_on_node().exists(), timeout=90, what="tuning to finish on the node")
    tune_log = bed.state()["remote"]["logs"]["tune"]
    cp = bed.cli("logs", bed.job_id, "--step", "tune")
    assert cp.returncode == 0, desc(cp)
    node_log = bed.node_bytes(tune_log)
    assert b"processed 1 batches of" in node_log
    assert cp.stdout == node_log

    cp = bed.cli("resume", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    st = bed.state()
    assert st["state"] == "succeeded" and (bed.job_dir / "report.md").is_file()
    assert len(bed.c.launches()) == 1
    bed.assert_logs_identical()

    # a second fetch transfers nothing
    cp = bed.cli("fetch", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    files = json.loads(cp.stdout)["files"]
    assert files and set(files.values()) == {"unchanged"}, files
    # fetch --dest writes byte-identical copies of the node's files
    dest = tmp_path / "elsewhere"
    cp = bed.cli("fetch", bed.job_id, "--dest", dest)
    assert cp.returncode == 0, desc(cp)
    files = json.loads(cp.stdout)["files"]
    assert set(files.values()) == {"fetched"}, files
    local = sorted(p for p in dest.rglob("*") if p.is_file())
    assert len(local) == len(files)
    node_sha = {os.path.basename(p): sha(bed.node_bytes(p)) for p in files}
    for p in local:
        assert sha(p.read_bytes()) == node_sha[p.name if p.name != "pipeline.log" else "pipeline.log"], p


# ------------------------------------------------------------------------------------------------
# 7. the tuner crashes mid-run
# ------------------------------------------------------------------------------------------------

def _csv_rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def _mnk(row: dict) -> tuple[int, int, int]:
    return int(row["M"]), int(row["N"]), int(row["K"])


def test_tuner_crash_mid_run_fails_cleanly_and_keeps_completed_batches(node, tmp_path):
    bed = Bed(node, tmp_path)
    bed.c.crash_after(10)                     # --batch 4: batches 1-2 complete, batch 3 dies half way
    cp = bed.cli(*bed.run_args("--batch", "4"))
    assert cp.returncode == 1, desc(cp)
    st = bed.state()
    r = st["remote"]
    errors = err_lines(cp)
    assert len(errors) == 1 and "\n" not in errors[0], desc(cp)
    assert "step tune failed" in errors[0] and "exit 139" in errors[0], errors[0]
    assert r["logs"]["tune"] in errors[0]
    assert st["state"] == "failed" and st["steps"]["remote"]["status"] == "failed"
    assert st["steps"]["remote"]["info"]["sub"]["tune"] == {**st["steps"]["remote"]["info"]["sub"]["tune"],
                                                           "status": "failed", "rc": 139}
    assert "after" not in st["steps"]["remote"]["info"]["sub"]      # the pipeline stopped at tune
    assert len(bed.c.launches()) == 1
    assert b"Memory access fault" in bed.node_bytes(r["logs"]["tune"])

    # the backup of the tuned CSV exists (taken before tuning) ...
    assert r["tuned_backup"] and bed.node_exists(r["tuned_backup"])
    backup = _csv_rows(bed.node_bytes(r["tuned_backup"]))
    assert backup, "the original tuned CSV was not empty"
    # ... and the tuned CSV kept every original row plus the rows of the completed batches, no more
    untuned = [_mnk(row) for row in _csv_rows(bed.node_bytes(r["untuned_csv"]))]
    before = {_mnk(row) for row in backup if row.get("cu_num") == "256"}
    todo = [k for k in untuned if k not in before]
    assert len(todo) > 10
    tuned = _csv_rows(bed.node_bytes(r["tuned_csv"]))
    tuned_keys = {_mnk(row) for row in tuned if row.get("cu_num") == "256"}
    from orchestrator.sim.perf_model import tune_result
    valid = {k for k in todo[:8] if tune_result(VARIANT, dict(zip("mnk", k)), "gfx950", 256) is not None}
    assert valid and set(todo[:8]) & tuned_keys == valid, "rows of the completed batches are missing"
    assert not set(todo[8:]) & tuned_keys, "rows of the crashed batch or later ones were written"
    assert {_mnk(row) for row in backup} <= {_mnk(row) for row in tuned}
    # the failure's evidence came home anyway
    assert (bed.job_dir / "logs" / os.path.basename(r["logs"]["tune"])).read_bytes() == \
        bed.node_bytes(r["logs"]["tune"])


def test_inventory_env_reaches_the_node_but_its_values_never_land_in_state_or_node_records(node, tmp_path):
    """Container env from the inventory is applied to benchmarks/tuner, and a secret in it is never written
    into state.json, the pipeline's command record, or any pulled file."""
    bed = Bed(node, tmp_path)
    secret = "s3cr3t-token-value-%d" % os.getpid()
    bed.inv.write_text(yaml.safe_dump({"nodes": {node.alias: {
        "ssh_config": str(node.ssh_config_file),
        "containers": {bed.c.name: {"env": {"HF_TOKEN": secret, "AITER_LOG_TUNED_CONFIG": "1"}}}}}}))
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    # applied: AITER_LOG_TUNED_CONFIG=1 makes the after bench print the "found ... is tuned" lines
    after_log = (bed.job_dir / "logs").glob("*_bench_after_*.log")
    assert any("is tuned" in p.read_text() for p in after_log)
    # never written: laptop state and every local artifact, and the node's run records
    for path in bed.job_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    run_dir = bed.state()["remote"]["run_dir"]
    for name in ("command.json", "record.json"):
        assert secret.encode() not in bed.node_bytes(f"{run_dir}/{name}"), name
    assert secret not in cp.stdout.decode() + cp.stderr.decode()
