"""The user's own OpenSSH ControlMaster (ssh_config ControlPath/ControlMaster auto/ControlPersist) end to end:
real ssh and sshd; the node's proxy counts every TCP connection (the master's is one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.e2e.test_reliability_e2e import TR, Bed, _nothing_ran, _ssh_config, desc, err_lines, finish
from tests.e2e.test_proxyjump_e2e import bastion_config
from tests.fake_remote.provision import poll

pytestmark = pytest.mark.e2e


class Master:
    """An ssh_config that names a master (its socket in a short dir: a Unix socket path has ~104 bytes):
    ``auto`` (ControlMaster auto + ControlPersist: ssh starts it) or ``by hand`` (ControlMaster no: only a
    master the user started is used)."""

    def __init__(self, node, tmp_path: Path, base: Path | None = None, mode: str = "auto"):
        self.node = node
        self.dir = Path(tempfile.mkdtemp(prefix="trcm", dir="/tmp"))
        self.cfg = tmp_path / "ssh_config_master"
        how = "ControlMaster auto\n    ControlPersist 300" if mode == "auto" else "ControlMaster no"
        self.cfg.write_text((base or node.ssh_config_file).read_text()
                            + f"\nHost *\n    {how}\n    ControlPath {self.dir}/cm-%C\n")

    def ssh(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", str(self.cfg), *args, self.node.alias], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=30)

    def start(self) -> None:
        """As a user does by hand: `ssh -fN -o ControlMaster=yes -o ControlPersist=300 node`."""
        cp = self.ssh("-fN", "-o", "ControlMaster=yes", "-o", "ControlPersist=300")
        assert cp.returncode == 0, cp.stderr

    def alive(self) -> bool:
        return self.ssh("-O", "check").returncode == 0

    def stop(self) -> None:
        self.ssh("-O", "exit")


@pytest.fixture
def master(node, tmp_path):
    m = Master(node, tmp_path)
    yield m
    m.stop()                      # the test's own master: nothing left running
    shutil.rmtree(m.dir, ignore_errors=True)


def test_a_run_rides_the_users_master_and_later_commands_open_no_connection(node, tmp_path, master):
    """ControlMaster auto + ControlPersist: the run starts the master as `ssh` would, every command of the
    job rides it, it outlives the run (ControlPersist decides), and `fetch` afterwards opens no connection."""
    bed = Bed(node, tmp_path, ssh_config=master.cfg)
    before = node.proxy.connections_total
    cp = bed.cli(*bed.run_args())
    assert cp.returncode == 0, desc(cp)
    assert bed.state()["state"] == "succeeded"
    assert master.alive(), "the user's ControlPersist keeps the master; tune-remote never stops it"
    assert node.proxy.connections_total - before == 1        # the master's, and nothing else
    stats = bed.state()["remote"]["stats"][-1]
    assert stats["helpers_started"] == 1 and stats["round_trips"] >= stats["helper_requests"], stats
    bed.assert_logs_identical()
    gone = sorted((bed.job_dir / "logs").iterdir())[0]
    gone.unlink()
    cp = bed.cli("fetch", bed.job_id)
    assert cp.returncode == 0, desc(cp)
    assert gone.is_file()                                      # copied again, through the master
    bed.assert_logs_identical()
    assert node.proxy.connections_total - before == 1        # no handshake, no authentication


@pytest.mark.parametrize("mode", ["auto", "by hand"])
def test_the_master_going_away_mid_job_does_not_stop_the_job(node, tmp_path, mode):
    """The master ends while the job tunes (its ControlPersist ran out, the user ran ssh -O exit): under
    ControlMaster auto the next command starts one again, as ssh would; a master the user starts by hand is
    not started behind their back (tune-remote's own connection takes over). The job completes with one
    launch either way."""
    m = Master(node, tmp_path, mode=mode)
    try:
        if mode == "by hand":
            m.start()
        bed = Bed(node, tmp_path, ssh_config=m.cfg)
        bed.c.slow(0.15)
        before = node.proxy.connections_total
        proc = bed.popen(*bed.run_args())
        poll(lambda: bed.tuner_pids(), timeout=90, what="the tuner to start")
        assert m.alive()
        m.stop()
        rc, _, err = finish(proc)
        assert rc == 0, err[-3000:]
        assert bed.state()["state"] == "succeeded"
        assert len(bed.c.launches()) == 1
        assert m.alive() is (mode == "auto")
        # auto: the first master, then its successor; by hand: the user's, then tune-remote's own (paramiko)
        assert node.proxy.connections_total - before == (2 if mode == "auto" else 1)
        bed.assert_logs_identical()
    finally:
        m.stop()
        shutil.rmtree(m.dir, ignore_errors=True)


def test_an_unknown_host_key_is_still_refused_and_no_master_is_started(node, tmp_path):
    """BatchMode: the master's start never prompts; an unknown key is refused with the usual one line
    (exit 3, the --accept-new-host-key hint), nothing runs on the node and known_hosts stays empty."""
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    m = Master(node, tmp_path, base=_ssh_config(node, tmp_path / "ssh_config", kh, "yes"))
    try:
        bed = Bed(node, tmp_path, ssh_config=m.cfg)
        cp = bed.cli(*bed.run_args())
        assert cp.returncode == 3, desc(cp)
        errors = err_lines(cp)
        assert len(errors) == 1 and "host key" in errors[0] and "--accept-new-host-key" in errors[0], desc(cp)
        assert not m.alive()
        _nothing_ran(bed)
        assert kh.read_text() == ""
        # with the flag, the master is started accepting the new key (OpenSSH records it) and the run works
        cp = bed.cli(*bed.run_args("--accept-new-host-key"), "--job-id", "accepted")
        assert cp.returncode == 0, desc(cp)
        assert m.alive()
        lines = [line.split() for line in kh.read_text().splitlines() if line.strip()]
        assert [line[1:3] for line in lines] == [node.host_public_key.split()[:2]], lines
    finally:
        m.stop()
        shutil.rmtree(m.dir, ignore_errors=True)


def test_a_master_through_a_proxyjump_bastion_and_the_bastions_key_still_checked(make_node, tmp_path):
    """The master carries the ProxyJump hop (its clients never connect by themselves: ProxyCommand=false);
    with the bastion's key unknown no master starts (its hop cannot prompt) and the run is refused as before."""
    bastion = make_node("current", proxy=False)
    target = make_node("current", proxy=False)
    ctr = next(iter(target.containers.values()))
    known = tmp_path / "known_hosts"
    sock_dir = Path(tempfile.mkdtemp(prefix="trcm", dir="/tmp"))
    cfg = tmp_path / "ssh_config"
    cfg.write_text(bastion_config(bastion, target, known, f"    ControlMaster auto\n    ControlPath {sock_dir}/cm-%C\n"
                                                            "    ControlPersist 300\n"))

    def master(*args: str) -> int:
        return subprocess.run(["ssh", "-F", str(cfg), *args, "gpu-node"], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=30).returncode

    bed = Bed(target, tmp_path, ssh_config=cfg)
    bed.inv.write_text(f"nodes:\n  gpu-node:\n    ssh_config: {cfg}\n    containers:\n      {ctr.name}: {{}}\n")
    args = ["run", "--node", "gpu-node", "--container", ctr.name, "--variant", "a8w8_blockscale",
            "--nk", "4096,512", "--m-preset", "1,64", "--yes"]
    try:
        known.write_text(target.known_hosts_line + "\n")                 # the bastion's key unknown
        cp = bed.cli(*args, "--job-id", "pj0")
        assert cp.returncode == 3 and "not known" in cp.stderr.decode(), desc(cp)
        assert master("-O", "check") != 0 and ctr.launches() == []
        known.write_text(bastion.known_hosts_line + "\n" + target.known_hosts_line + "\n")
        cp = bed.cli(*args, "--job-id", "pj1")
        assert cp.returncode == 0, desc(cp)
        assert master("-O", "check") == 0 and len(ctr.launches()) == 1
        cp = bed.cli("fetch", "pj1")
        assert cp.returncode == 0, desc(cp)
    finally:
        master("-O", "exit")
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_a_campaign_rides_the_master_one_connection_for_everything(node, tmp_path, master, monkeypatch):
    """Plan, mining, both variants' jobs and the promotion across the kind: every target of the campaign's pool
    rides the one master (sessions counted per master: sshd's MaxSessions), and `status`/`logs` after it too."""
    import io
    from contextlib import redirect_stdout

    import yaml

    from orchestrator.cli import main
    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"nodes": {node.alias: {"ssh_config": str(master.cfg),
                                                          "containers": {c: {} for c in node.containers}}}}))

    def cli(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        with redirect_stdout(out):
            rc = main(["--inventory", str(inv), "--workspace", str(tmp_path / "ws"), *argv])
        return rc, out.getvalue()

    before = node.proxy.connections_total
    rc, out = cli("run", "--node", node.alias, "--variant", "a8w8_blockscale,a8w8_blockscale_bpreshuffle",
                  "--log", "/opt/aiter-sim/logs/vllm_tp8_dsv3.log", "--m-preset", "1,64", "--yes",
                  "--job-id", "camp")
    assert rc == 0, out
    subs = json.loads(cli("status", "--json")[1])[0]["targets"]
    assert sorted(t["variant"] for t in subs) == ["a8w8_blockscale", "a8w8_blockscale_bpreshuffle"]
    assert all(t["state"] == "succeeded" for t in subs), subs
    assert node.proxy.connections_total - before == 1              # the master's, for all of it
    assert master.alive()


def test_a_slurm_login_node_is_reached_through_the_users_master(slurm_cluster, tmp_path, monkeypatch):
    """The login node is where an OTP is asked per connection: its master carries sbatch/squeue/srun and
    every compute node's container (srun ... docker exec over the login's ssh clients)."""
    import yaml

    monkeypatch.setenv("TUNE_REMOTE_POLL_S", "0.2")
    m = Master(slurm_cluster.login, tmp_path)
    inv = tmp_path / "inventory.yaml"
    data = slurm_cluster.inventory("testslurm", gpus_per_node=2)
    data["slurm"]["testslurm"]["ssh_config"] = str(m.cfg)
    inv.write_text(yaml.safe_dump(data))
    login = slurm_cluster.login
    before = login.proxy.connections_total
    try:
        cp = subprocess.run([*TR, "--inventory", str(inv), "--workspace", str(tmp_path / "ws"), "run", "--slurm",
                             "testslurm", "--slurm-nodes", "2", "--variant", "a8w8_blockscale", "--nk", "6144,7168",
                             "--m-preset", "1,16,64,256", "--yes", "--job-id", "slm"], capture_output=True,
                            stdin=subprocess.DEVNULL, timeout=300, env=dict(os.environ, TUNE_REMOTE_POLL_S="0.2"))
        assert cp.returncode == 0, desc(cp)
        state = json.loads((tmp_path / "ws" / "slm" / "state.json").read_text())
        assert state["state"] == "succeeded"
        assert m.alive()                       # started for the login node by the run, left to ControlPersist
        assert login.proxy.connections_total - before == 1      # one authentication for the whole campaign
    finally:
        m.stop()
        shutil.rmtree(m.dir, ignore_errors=True)
