"""The test bed's own tests: every simulated behaviour, observed through a real
``ssh -i key -o UserKnownHostsFile=... -o StrictHostKeyChecking=yes -p port node docker exec ...``.

No sleeps for synchronisation: every wait polls a real condition with a deadline.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fake_remote import procs
from tests.fake_remote.provision import LABEL, OWNER_LABEL, STATE_ROOT, docker, poll

pytestmark = pytest.mark.e2e
REPO_ROOT = Path(__file__).resolve().parents[2]


def sh_in(node, container, script: str, **kw) -> subprocess.CompletedProcess:
    """ssh node docker exec <container> sh -c <script>"""
    return node.ssh_docker_exec(container, ["sh", "-c", script], **kw)


# ------------------------------------------------------------------------------------------------
# login, user, container basics
# ------------------------------------------------------------------------------------------------

def test_login_is_plain_and_can_run_docker(shared_node):
    t0 = time.monotonic()
    cp = shared_node.ssh("echo shell=$0; id -nG; ls -A ~; docker ps --format '{{.Names}}'", check=True)
    elapsed = time.monotonic() - t0
    out = cp.stdout
    assert "shell=sh" in out or "shell=/bin/sh" in out
    assert "docker" in out.splitlines()[1].split()
    assert ".bashrc" not in out and ".profile" not in out        # no rc files (no pyenv rehash hangs)
    for name in shared_node.containers:
        assert name in out
    assert cp.stderr == ""                                          # nothing printed on login
    assert elapsed < 10


def test_container_pid1_is_sleep_without_init(shared_node):
    c = shared_node.container("aiter-dev")
    cp = sh_in(shared_node, c, "tr '\\0' ' ' < /proc/1/cmdline; echo; cat /proc/1/comm", check=True)
    assert cp.stdout.split("\n")[0].strip() == "/bin/sleep infinity"
    assert docker("inspect", "--format", "{{.HostConfig.NetworkMode}} {{.HostConfig.Init}}",
                  c.id).stdout.split()[0] == "none"


# ------------------------------------------------------------------------------------------------
# the simulated AITER, seen through ssh + docker exec
# ------------------------------------------------------------------------------------------------

def _pip_show(node, container, dist="amd-aiter") -> dict:
    cp = node.ssh_docker_exec(container, ["pip", "show", dist])
    if cp.returncode != 0:
        return {}
    return dict(line.split(": ", 1) for line in cp.stdout.splitlines() if ": " in line)


def test_pip_show_current_develop_is_editable(shared_node):
    info = _pip_show(shared_node, shared_node.container("aiter-dev"))
    assert info["Name"] == "amd-aiter" and info["Version"] == "0.1.20"
    assert info["Editable project location"] == "/opt/aiter-sim/aiter"


def test_pip_show_legacy_install_is_not_editable(shared_node):
    c = shared_node.container("aiter-legacy")
    info = _pip_show(shared_node, c)
    assert info["Name"] == "amd-aiter" and info["Version"] == "0.1.11"
    assert "Editable project location" not in info
    assert info["Location"] == c.aiter_root == "/opt/aiter-sim/site-packages"


def test_pip_name_aiter_variant(make_node):
    n = make_node({"profile": "legacy", "install_mode": "install", "pip_name": "aiter"})
    c = n.container("aiter-dev")
    assert _pip_show(n, c, "aiter")["Name"] == "aiter"
    assert _pip_show(n, c, "amd-aiter") == {}


def test_rocm_smi_showuse(shared_node):
    cp = shared_node.ssh_docker_exec(shared_node.container("aiter-dev"), ["rocm-smi", "--showuse"])
    assert cp.returncode == 0, cp.stderr
    use = {int(g): int(u) for g, u in re.findall(r"GPU\[(\d+)\]\s*: GPU use \(%\): (\d+)", cp.stdout)}
    assert sorted(use) == list(range(8))
    assert [g for g, u in use.items() if u > 50] == [6, 7]      # SimSpec.busy_gpus default


UNTUNED = "M,N,K\n16,1536,7168\n32,1536,7168\n64,576,7168\n128,7168,256\n"


def _tune(node, c, tag: str, *, timeout=120) -> tuple[subprocess.CompletedProcess, str]:
    out = f"/tmp/{tag}-tuned.csv"
    script = (f"printf '{UNTUNED}' > /tmp/{tag}-untuned.csv && cd {c.aiter_root} && "
              f"python3 {c.tune_script()} -i /tmp/{tag}-untuned.csv -o {out}")
    return sh_in(node, c, script, timeout=timeout), out


@pytest.mark.parametrize("suffix,profile,header", [
    ("aiter-dev", "current", ["gfx", "cu_num", "M", "N", "K"]),
    ("aiter-legacy", "legacy", ["cu_num", "M", "N", "K"]),
])
def test_tune_writes_profile_csv_and_counts_launches(shared_node, suffix, profile, header):
    c = shared_node.container(suffix)
    assert c.profile == profile
    before = len(c.launches())
    tag = f"tb{os.getpid()}{suffix}"
    cp, out = _tune(shared_node, c, tag)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    text = sh_in(shared_node, c, f"cat {out}", check=True).stdout
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0][:len(header)] == header and rows[0][len(header)] == "libtype"
    assert 1 <= len(rows) - 1 <= 4
    if profile == "current":
        assert all(r[0] == "gfx950" and r[1] == "256" for r in rows[1:])
    else:
        assert all(r[0] == "256" for r in rows[1:])
    launches = c.launches()
    assert len(launches) == before + 1
    assert launches[-1]["script"].endswith("gemm_a8w8_blockscale_tune.py")
    assert launches[-1]["argv"][-1] == out


def test_legacy_tree_differs(shared_node):
    has = {}
    for suffix in ("aiter-dev", "aiter-legacy"):
        c = shared_node.container(suffix)
        has[suffix] = sh_in(shared_node, c, f"head -1 {c.aiter_root}/aiter/configs/a8w8_blockscale_tuned_gemm.csv"
                            ).stdout.strip().split(",")[0]
    assert has == {"aiter-dev": "gfx", "aiter-legacy": "cu_num"}


def test_crash_control_kills_tuner_mid_run(node):
    c = node.container("aiter-dev")
    c.crash_after(1)
    cp, _ = _tune(node, c, "crash")
    assert cp.returncode == 139, cp.stderr[-2000:]
    assert "Memory access fault by GPU" in cp.stderr
    assert len(c.launches()) == 1
    c.reset_control()
    cp, out = _tune(node, c, "after")
    assert cp.returncode == 0, cp.stderr[-2000:]
    assert len(c.launches()) == 2


def test_hang_control_blocks_tuner_until_cancelled(node):
    c = node.container("aiter-dev")
    c.hang_after(1)
    launch = (f"printf '{UNTUNED}' > /tmp/h.csv && cd {c.aiter_root} && "
              f"setsid nohup python3 {c.tune_script()} -i /tmp/h.csv -o /tmp/h-out.csv "
              "</dev/null >/tmp/hang.log 2>&1 & echo pid=$!")
    cp = sh_in(node, c, launch, check=True)
    pid = int(cp.stdout.strip().split("=")[1])
    poll(lambda: c.launches(), timeout=30, what="the tuner to record its launch")
    # hanging = parked in the hang loop's sleep (the tuner never sleeps otherwise: seconds_per_shape=0)
    poll(lambda: sh_in(node, c, f"cat /proc/{pid}/wchan").stdout.strip() in ("hrtimer_nanosleep", "do_nanosleep"),
         timeout=30, what="tuner to hang")
    assert sh_in(node, c, "test -e /tmp/h-out.csv || echo absent").stdout.strip() == "absent"
    sh_in(node, c, f"kill -9 -{pid}", check=True)   # the whole session (setsid)
    poll(lambda: sh_in(node, c, f"grep -q '^{pid} .* Z' /proc/{pid}/stat 2>/dev/null || test ! -e /proc/{pid} "
                                "&& echo gone").stdout.strip() == "gone", timeout=20, what="tuner to die")


# ------------------------------------------------------------------------------------------------
# ssh security: host keys
# ------------------------------------------------------------------------------------------------

def test_host_key_mismatch_is_refused(node, tmp_path):
    ok = node.ssh("true")
    assert ok.returncode == 0, ok.stderr
    # A known_hosts file that pins another key for this [host]:port
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = tmp_path / "known_hosts_wrong"
    key = " ".join(Path(str(other) + ".pub").read_text().split()[:2])
    wrong.write_text(f"[{node.host}]:{node.port} {key}\n")
    cp = node.ssh("echo SHOULD-NOT-RUN", known_hosts_file=wrong, options=["LogLevel=INFO"])
    assert cp.returncode == 255
    assert "SHOULD-NOT-RUN" not in cp.stdout
    assert "Host key verification failed" in cp.stderr
    assert "IDENTIFICATION HAS CHANGED" in cp.stderr
    # An empty known_hosts: unknown host is refused too (StrictHostKeyChecking=yes)
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    cp = node.ssh("echo SHOULD-NOT-RUN", known_hosts_file=empty)
    assert cp.returncode == 255 and "Host key verification failed" in cp.stderr


def test_two_nodes_are_independent(make_node, tmp_path):
    a = make_node("current")
    b = make_node("legacy")
    assert a.port != b.port and a.host_public_key != b.host_public_key
    assert a.ssh(["docker", "exec", f"{a.name}-aiter-dev", "true"]).returncode == 0
    assert b.ssh(["docker", "exec", f"{b.name}-aiter-dev", "true"]).returncode == 0
    # b's client key is not authorised on a
    argv = a.ssh_argv("true")
    argv[argv.index("-i") + 1] = str(b.identity_file)
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert cp.returncode == 255 and "Permission denied" in cp.stderr


# ------------------------------------------------------------------------------------------------
# fault proxy
# ------------------------------------------------------------------------------------------------

def _host_procs_of(user_uid: int, needle: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid != user_uid:
                    continue
            except OSError:
                continue
            if needle in " ".join(procs.cmdline(int(entry))):
                out.append(int(entry))
    return out


def test_proxy_cut_kills_open_ssh_session_and_keeps_accepting(node):
    import pwd
    uid = pwd.getpwnam(node.user).pw_uid
    marker = f"sleep 4{os.getpid() % 1000:03d}"
    proc = node.ssh_popen(f"echo started; exec {marker}")
    try:
        # the session is up when its remote command runs (observed on the host, as the node user)
        poll(lambda: _host_procs_of(uid, marker), timeout=20, what="remote sleep to start")
        assert node.proxy.active >= 1
        cut = node.proxy.cut_all()
        assert cut >= 1
        rc = proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.wait()
    assert rc == 255, (rc, proc.stderr.read() if proc.stderr else "")
    # new connections still accepted
    assert node.ssh("echo back").stdout.strip() == "back"
    # like a real network cut without a pty, the remote command outlives its session (peers.md E8b) ...
    assert _host_procs_of(uid, marker)
    # ... and the test bed finds it by the session marker sshd sets (teardown does this too)
    node.kill_session_leftovers()
    assert not _host_procs_of(uid, marker)


def test_proxy_refuses_then_accepts_and_adds_latency(node):
    node.proxy.refuse_new(None)
    cp = node.ssh("true", connect_timeout=5)
    assert cp.returncode == 255 and "Connection refused" in cp.stderr
    node.proxy.accept_new()
    assert node.ssh("true").returncode == 0
    node.proxy.reset_new(None)
    cp = node.ssh("true", connect_timeout=5)
    assert cp.returncode == 255
    node.proxy.accept_new()
    t0 = time.monotonic()
    assert node.ssh("true").returncode == 0
    base = time.monotonic() - t0
    node.proxy.set_latency(0.15)
    t0 = time.monotonic()
    assert node.ssh("true").returncode == 0
    slow = time.monotonic() - t0
    node.proxy.heal()
    # an ssh login is at least 6 round trips (banner, kex, service, auth, channel, exec), each 2 x 0.15 s
    # more: a lower bound that load cannot beat (comparing with `base`, one sample under load, could)
    assert slow > 6 * 0.3 * 0.9, (base, slow)
    # refusal for a while: the listener comes back by itself
    node.proxy.refuse_new(0.5)
    assert not node.proxy.listening
    poll(lambda: node.proxy.listening, timeout=10, what="proxy to listen again")
    assert node.ssh("true").returncode == 0


def test_proxy_pause_freezes_session_without_closing(node):
    import pwd
    uid = pwd.getpwnam(node.user).pw_uid
    tag = f"paused{os.getpid()}"
    proc = node.ssh_popen(f"read x; echo {tag}-$x", stdin=subprocess.PIPE)
    try:
        poll(lambda: _host_procs_of(uid, tag), timeout=20, what="remote shell waiting on stdin")
        node.proxy.pause()
        proc.stdin.write("hello\n")
        proc.stdin.flush()
        # the bytes reach the proxy and stay there; the connection stays open
        poll(lambda: node.proxy.pending_bytes > 0, timeout=10, what="proxy to hold client bytes")
        assert node.proxy.active >= 1 and proc.poll() is None
        assert _host_procs_of(uid, tag)
        node.proxy.resume()
        out, _err = proc.communicate(timeout=20)
    finally:
        node.proxy.resume()
        proc.kill()
        proc.wait()
    assert out.strip() == f"{tag}-hello"


def test_sshd_restart_drops_sessions_keeps_identity(node):
    port, key = node.sshd_port, node.host_public_key
    node.restart_sshd()
    assert node.sshd_port == port
    assert node.ssh("echo ok").stdout.strip() == "ok"      # same host key: known_hosts still valid
    assert node.host_public_key == key


# ------------------------------------------------------------------------------------------------
# container-level faults
# ------------------------------------------------------------------------------------------------

def test_zombies_pile_up_under_sleep_pid1(node):
    c = node.container("aiter-dev")
    before = len(c.zombies())
    cp = sh_in(node, c, "(sleep 0.05 &) ; (sleep 0.05 &) ; echo launched", check=True)
    assert "launched" in cp.stdout
    zs = poll(lambda: [z for z in c.zombies() if z["ppid"] == 1] if len(c.zombies()) >= before + 2 else None,
              timeout=20, what="two zombies reparented to PID 1")
    assert all(z["comm"] == "sleep" for z in zs)
    # kill -0 on a zombie succeeds: the pitfall the tool must avoid
    z = zs[0]["pid"]
    assert sh_in(node, c, f"kill -0 {z} && grep -q '^{z} (sleep) Z' /proc/{z}/stat && echo zombie-alive"
                 ).stdout.strip() == "zombie-alive"


def test_container_restart_kills_processes_keeps_sim_tree(node):
    c = node.container("aiter-dev")
    sh_in(node, c, "setsid sleep 4242 </dev/null >/tmp/bg.log 2>&1 & echo ok; touch /opt/aiter-sim/.keep-me",
          check=True)
    poll(lambda: any(p["args"].startswith("sleep 4242") for p in c.processes()), timeout=20,
         what="background job in the container")
    started = c.state()["StartedAt"]
    c.restart()
    assert c.state()["StartedAt"] != started
    assert not any(p["args"].startswith("sleep 4242") for p in c.processes())
    assert sh_in(node, c, "test -e /opt/aiter-sim/.keep-me && echo kept").stdout.strip() == "kept"
    assert sh_in(node, c, "tr '\\0' ' ' < /proc/1/cmdline").stdout.strip() == "/bin/sleep infinity"


def test_fill_log_big_file(node):
    c = node.container("aiter-dev")
    size = int(os.environ.get("TRTEST_BIG_LOG_BYTES", 48 * 1024 * 1024 + 123))
    fill = c.fill_log(size, name="big-server.log")
    assert fill.size == size
    cp = sh_in(node, c, f"wc -c < {fill.container_path}; wc -l < {fill.container_path}; "
                        f"grep -c 'not found tuned config' {fill.container_path}", check=True, timeout=120)
    nbytes, nlines, nmiss = (int(x) for x in cp.stdout.split())
    assert (nbytes, nlines, nmiss) == (size, fill.lines, fill.gemm_miss_lines)
    print(f"fill_log: {size / 1e6:.0f} MB in {fill.seconds:.2f}s ({fill.mb_per_s:.0f} MB/s)")


# ------------------------------------------------------------------------------------------------
# `python -m tests.fake_remote up/down`
# ------------------------------------------------------------------------------------------------

def _cli(*args, timeout=180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.fake_remote", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_cli_up_down_leaves_nothing(testbed, tmp_path):
    name = f"cli{os.getpid()}"
    cp = _cli("up", "--name", name, "--profile", "legacy", "--proxy", "--json")
    assert cp.returncode == 0, cp.stderr
    try:
        info = json.loads(cp.stdout)
        for key in ("host", "port", "user", "identity_file", "known_hosts_line", "known_hosts_file",
                    "containers", "ssh_config"):
            assert key in info, key
        assert info["containers"][0]["name"] == f"trtest-{name}-aiter-dev"
        assert info["containers"][0]["profile"] == "legacy"
        assert "StrictHostKeyChecking yes" in info["ssh_config"]
        assert info["port"] == info["proxy_port"] != info["sshd_port"]      # --proxy: clients go through it
        proxy_pid = info["proxy_pid"]
        # reach it exactly as a person would: the printed ssh config snippet + known_hosts line
        cfg = tmp_path / "ssh_config"
        cfg.write_text(info["ssh_config"])
        kh = Path(info["known_hosts_file"]).read_text()
        assert info["known_hosts_line"] in kh
        alias = info["ssh_config"].split()[1]
        r = subprocess.run(["ssh", "-F", str(cfg), alias, "docker", "exec", info["containers"][0]["name"],
                            "cat", "/proc/1/cmdline"], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        assert r.stdout.replace("\0", " ").strip() == "/bin/sleep infinity"
        # idempotent: a second `up` re-shows the same node
        again = json.loads(_cli("up", "--name", name, "--profile", "legacy", "--proxy", "--json").stdout)
        assert again["port"] == info["port"] and again["reused"] is True
        sshd_pid = info["sshd_pid"]
        assert procs.alive(sshd_pid)
    finally:
        down = _cli("down", "--name", name, "--json")
    assert down.returncode == 0, down.stderr
    owner = f"up-trtest-{name}"
    left = docker("ps", "-a", "-q", "--filter", f"label={LABEL}=1", "--filter", f"label={OWNER_LABEL}={owner}")
    assert left.stdout.strip() == ""
    assert not procs.alive(sshd_pid) and not procs.alive(proxy_pid)
    state_dir = Path(info["state_dir"])
    assert not state_dir.exists()
    assert not [p for p in os.listdir("/proc") if p.isdigit()
                and str(state_dir) in " ".join(procs.cmdline(int(p)))]
    # down again: nothing to do, still success
    assert _cli("down", "--name", name).returncode == 0


def test_state_root_is_private_per_session(testbed):
    assert testbed.root.parent == STATE_ROOT
    assert testbed.root.name == f"pytest-{os.getpid()}"

